"""CPU per SSE event of a watched stream's relay, in process (run by `bench.hop_ab --events`).

Run as a script with `PYTHONPATH=<tree>`, so the tree's own `proxy` is measured: the recall
watch's `Watched` (it read the role chunk and the first text, the rest arrives in one upstream
read) relayed by `StreamRelay` with the chat wire's observer, to a `send` that keeps nothing.
CPU by `time.process_time`, the best of 7 x 300 streams of 16 and of 200 events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from proxy.protocols import OPENAI_CHAT
from proxy.recall.watch import Answer, Watched
from proxy.relay import StreamOutcome, StreamRelay
from proxy.sse import SseSplitter
from proxy.upstream.base import UpstreamResponse

HEAD = b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":'


def stream(n: int) -> list[bytes]:
    """`n` events as the mock sends them: the role, content pieces, the finish, usage, [DONE]."""
    choice = b'[{"index":0,"delta":%s,"finish_reason":%s}],"usage":null}'
    out = [b"data: " + HEAD + choice % (b'{"role":"assistant","content":""}', b"null") + b"\n\n"]
    out += [b"data: " + HEAD + choice % (b'{"content":"word%d "}' % i, b"null") + b"\n\n" for i in range(n - 3)]
    out.append(b"data: " + HEAD + choice % (b"{}", b'"stop"') + b"\n\n")
    out.append(b"data: " + HEAD + b'[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}\n\n')
    return [*out, b"data: [DONE]\n\n"]


class Upstream(UpstreamResponse):
    def __init__(self, pieces: list[bytes]) -> None:
        super().__init__(200, [("content-type", "text/event-stream")], "text/event-stream", None, 0.0)
        self._pieces = pieces

    async def pieces(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece

    def close(self) -> None:
        return None


async def relay_one(events: list[bytes]) -> None:
    upstream = Upstream([b"".join(events[2:])])
    answer = Answer(upstream, aiter(upstream.pieces()), OPENAI_CHAT.observer({}), SseSplitter(), 0.0)
    head = answer.splitter.feed(events[0] + events[1])
    for event in head:
        answer.observer(event)
    exchange: Any = SimpleNamespace(wire=OPENAI_CHAT, call=None)  # read by a recall round only: none here
    watched = Watched(exchange, {}, SimpleNamespace(tools=None), answer, head, [])  # type: ignore[arg-type]
    never = asyncio.Event()

    async def finish(outcome: StreamOutcome) -> None:
        return None

    async def receive() -> Any:
        await never.wait()

    async def send(message: Any) -> None:
        return None

    await StreamRelay(watched, OPENAI_CHAT.observer({}), finish, [])({"type": "http"}, receive, send)


async def main() -> None:
    best = {}
    for n in (16, 200):
        events = stream(n)
        for _ in range(50):
            await relay_one(events)
        runs = []
        for _ in range(7):
            start = time.process_time()
            for _ in range(300):
                await relay_one(events)
            runs.append((time.process_time() - start) / 300)
        best[n] = min(runs)
    per_event = (best[200] - best[16]) / 184
    print(f"16 events {best[16] * 1e6:.0f} us, 200 events {best[200] * 1e6:.0f} us, per event {per_event * 1e6:.2f} us")


if __name__ == "__main__":
    asyncio.run(main())
