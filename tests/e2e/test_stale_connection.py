"""A pooled keep-alive connection the upstream closed meanwhile (issue 12's upstream faults).

Every HTTP/1.1 server closes idle connections after its keep-alive timeout; a request the proxy
sends on such a connection just as it closes gets a clean close and no answer. The request never
reached a handler, so the proxy sends it again on a fresh connection instead of answering 502
(agents stopped on these, about one in a thousand calls under load). A fresh connection that
closes without answering is a real failure and is not retried.

The upstream here is a raw asyncio server: it answers chat completions with Content-Length and
keeps the connection open, and on the request number `close_on` of a connection reads the
request whole and closes cleanly (FIN), as a server at its idle timeout does.
"""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

pytestmark = pytest.mark.slow

ANSWER = {
    "id": "chatcmpl-stale",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "fine"}, "logprobs": None, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


class ClosingUpstream:
    def __init__(self, close_on: int) -> None:
        self.close_on = close_on
        self.requests = 0
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ClosingUpstream:
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _stop(self) -> None:
        self.server.close()
        for writer in self.writers:
            writer.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.requests += 1
                served += 1
                if served == self.close_on:
                    return  # the request read whole, then a clean close: no byte of an answer
                body = json.dumps(ANSWER).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def _proxy_for(proxy, upstream: ClosingUpstream):
    route = {
        "name": "closing",
        "match": {"model": "gpt-*"},
        "upstream": {"base_url": f"http://127.0.0.1:{upstream.port}/v1", "timeouts": {"first_byte": 10}},
        "policy": "default",
    }
    return proxy(fresh=True, routes=[route])


def _ask(p, text: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{p.base_url}/chat/completions", json=body, headers={"Authorization": "Bearer sk-x"}, timeout=30)


def test_a_pooled_connection_closed_by_the_upstream_is_sent_again(proxy):
    with ClosingUpstream(close_on=2) as upstream:
        p = _proxy_for(proxy, upstream)
        first = _ask(p, "first")
        assert first.status_code == 200, first.text
        second = _ask(p, "second")  # goes out on the pooled connection, which the upstream closes
        assert second.status_code == 200, second.text
        assert second.json()["choices"][0]["message"]["content"] == "fine"
        assert upstream.requests == 3 and upstream.connections == 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_fresh_connection_that_closes_is_a_502_sent_once(proxy, stream):
    with ClosingUpstream(close_on=1) as upstream:
        p = _proxy_for(proxy, upstream)
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
        r = httpx.post(
            f"{p.base_url}/chat/completions", json=body, headers={"Authorization": "Bearer sk-x"}, timeout=30
        )
        assert r.status_code == 502, r.text
        assert r.json()["error"]["type"]
        assert upstream.requests == 1
