"""A raw-socket upstream that misbehaves on purpose, for all three APIs.

The scripted servers in this package sit on uvicorn, which frames every answer correctly; the
faults here need bytes uvicorn would never write: a body shorter than its Content-Length, a
connection reset, a stall with the socket open. This server reads each request itself (asyncio,
its own thread), picks the next scripted :class:`Fault` (FIFO; ``ok`` when none), and writes the
answer in the wire of the path: OpenAI chat (``/v1/chat/completions``), Responses
(``/v1/responses``), Anthropic Messages (``/v1/messages``).

Kinds: ``ok``; ``status`` (``status`` with an error body of the API, ``retry_after`` header);
``reset`` (RST before any byte); ``stall_first`` (nothing, until the proxy hangs up);
``stall_mid`` (headers and the first event or half the body, then nothing); ``malformed``
(stream: an event whose data is not JSON between good ones; whole: a 200 body that is not JSON);
``deep`` (whole: a 200 body of arrays nested 2,000 deep, complete but past every decoder's depth);
``truncated`` (whole: half the announced Content-Length, then close; stream: cut inside an event,
then close); ``truncated_eof`` (whole: no Content-Length, half the body, then close);
``no_usage``; ``dup_usage`` (stream: the usage event twice; whole: the ``usage`` key twice);
``slow`` (stream: 100 events 20 ms apart, watching for the proxy hanging up).

It counts what the measured suite needs: requests per path (retries show as extra ones), open
connections, and the connections the proxy closed while a stall was held (a cancelled request).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import struct
import threading
from collections import deque
from typing import Any

from tests.support.waiting import wait_until

USAGE = {
    "chat": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    "responses": {"input_tokens": 11, "output_tokens": 5, "total_tokens": 16},
    "anthropic": {"input_tokens": 11, "output_tokens": 5},
}


@dataclasses.dataclass
class Fault:
    kind: str = "ok"
    status: int = 500
    retry_after: str | None = None
    text: str = "fine answer"


def wire_of(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    return "anthropic"


def whole_body(wire: str, text: str, usage: bool = True) -> dict[str, Any]:
    if wire == "chat":
        body: dict[str, Any] = {
            "id": "chatcmpl-fault",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        }
    elif wire == "responses":
        body = {
            "id": "resp_fault",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": "resp-model",
            "output": [
                {
                    "type": "message",
                    "id": "msg_fault",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
        }
    else:
        body = {
            "id": "msg_fault",
            "type": "message",
            "role": "assistant",
            "model": "claude-fault",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
        }
    if usage:
        body["usage"] = USAGE[wire]
    return body


def error_body(wire: str, status: int) -> dict[str, Any]:
    message = f"scripted upstream failure {status}"
    if wire == "anthropic":
        return {"type": "error", "error": {"type": "api_error", "message": message}}
    return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}


def sse(name: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {name}\n" if name else "").encode() + f"data: {payload}\n\n".encode()


def stream_events(wire: str, text: str, usage: str = "once") -> list[bytes]:
    """The wire's stream for `text`; usage `once`, `none` or `twice` (the final usage repeated)."""
    half = len(text) // 2
    parts = [text[:half], text[half:]]
    if wire == "chat":

        def chunk(choices: list[Any], u: Any = None) -> bytes:
            obj: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
            obj["choices"] = choices
            if u is not None:
                obj["usage"] = u
            return sse(None, obj)

        events = [chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
        events += [chunk([{"index": 0, "delta": {"content": p}, "finish_reason": None}]) for p in parts]
        events.append(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        if usage != "none":
            events += [chunk([], USAGE[wire])] * (2 if usage == "twice" else 1)
        return [*events, sse(None, "[DONE]")]
    if wire == "responses":
        final = whole_body(wire, text, usage != "none")
        start = {**final, "status": "in_progress", "output": []}
        start.pop("usage", None)
        events = [sse("response.created", {"type": "response.created", "response": start})]
        events += [
            sse("response.output_text.delta", {"type": "response.output_text.delta", "delta": p, "output_index": 0})
            for p in parts
        ]
        done = sse("response.completed", {"type": "response.completed", "response": final})
        return [*events, *([done] * (2 if usage == "twice" else 1))]
    message = {**whole_body(wire, "", False), "content": [], "stop_reason": None}
    if usage != "none":
        message["usage"] = {"input_tokens": 11, "output_tokens": 1}
    events = [sse("message_start", {"type": "message_start", "message": message})]
    events.append(
        sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
    )
    events += [
        sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
        )
        for p in parts
    ]
    events.append(sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
    if usage != "none":
        delta["usage"] = {"output_tokens": 5}
    events += [sse("message_delta", delta)] * (2 if usage == "twice" else 1)
    return [*events, sse("message_stop", {"type": "message_stop"})]


def head(status: int, content_type: str, length: int | None, extra: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"content-type: {content_type}", "x-request-id: req_fault"]
    lines.append(f"content-length: {length}" if length is not None else "connection: close")
    lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class FaultUpstream:
    def __init__(self) -> None:
        self.faults: deque[Fault] = deque()
        self.by_marker: dict[str, Fault] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.open_connections = 0
        self.cancelled = 0
        """Stalled exchanges the proxy hung up on (the upstream request was cancelled)."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, marker: str, fault: Fault) -> None:
        """Answer requests whose body mentions `marker` with `fault` (for concurrent tests)."""
        with self._lock:
            self.by_marker[marker] = fault

    def push(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()
            self.by_marker.clear()
            self.requests.clear()
            self.cancelled = 0

    def count(self, marker: str) -> int:
        """Requests whose body mentions `marker` (a test's own unique text)."""
        with self._lock:
            return sum(marker in json.dumps(body) for _, body in self.requests)

    def start(self) -> FaultUpstream:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop

            async def main() -> None:
                self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
                self.port = self._server.sockets[0].getsockname()[1]
                ready.set()
                async with self._server:
                    await self._server.serve_forever()

            try:
                loop.run_until_complete(main())
            except (asyncio.CancelledError, RuntimeError):
                pass
            # The handlers of connections still open end here, inside the loop: left to the
            # garbage collector, their coroutines were finalized at a random later moment of
            # the test process, outside any loop (an unraisable "Event loop is closed", and once
            # a SystemError from the ast module the collection interrupted).
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        threading.Thread(target=run, name="fault-upstream", daemon=True).start()
        assert ready.wait(10), "fault upstream did not start"
        return self

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)

    def wait_cancelled(self, n: int, timeout: float = 10) -> None:
        wait_until(lambda: self.cancelled >= n, timeout=timeout, what=f"{n} cancelled upstream requests")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open_connections += 1
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open_connections -= 1
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            raw_head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return False
        lines = raw_head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))) or b"{}")
        with self._lock:
            self.requests.append((path, body))
            text = json.dumps(body)
            fault = next((f for m, f in self.by_marker.items() if m in text), None)
            if fault is None:
                fault = self.faults.popleft() if self.faults else Fault()
        wire = wire_of(path)
        stream = bool(body.get("stream"))
        kind = fault.kind
        if kind == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if kind == "stall_first":
            await self._until_hangup(reader)
            return False
        if kind == "status":
            data = json.dumps(error_body(wire, fault.status)).encode()
            extra = {"retry-after": fault.retry_after} if fault.retry_after else None
            writer.write(head(fault.status, "application/json", len(data), extra) + data)
            await writer.drain()
            return True
        if stream and kind == "slow":
            await self._slow_stream(reader, writer, wire, fault.text)
            return False
        if stream:
            usage = {"no_usage": "none", "dup_usage": "twice"}.get(kind, "once")
            events = stream_events(wire, fault.text, usage)
            writer.write(head(200, "text/event-stream", None))
            if kind == "malformed":
                events.insert(2, b"data: {this is not json\n\n")
            if kind == "stall_mid":
                writer.write(events[0])
                await writer.drain()
                await self._until_hangup(reader)
                return False
            if kind == "truncated":
                writer.write(b"".join(events[:2]) + events[2][: len(events[2]) // 2])
                await writer.drain()
                return False
            writer.write(b"".join(events))
            await writer.drain()
            return False  # streams are framed by the close (no Content-Length)
        if kind == "malformed":
            data = b"<html>upstream gateway page, not JSON</html>"
        elif kind == "deep":
            data = b"[" * 2_000 + b"]" * 2_000
        else:
            data = json.dumps(whole_body(wire, fault.text, kind != "no_usage")).encode()
            if kind == "dup_usage":
                data = data[:-1] + b', "usage": ' + json.dumps(USAGE[wire]).encode() + b"}"
        if kind == "stall_mid":
            writer.write(head(200, "application/json", len(data)) + data[: len(data) // 2])
            await writer.drain()
            await self._until_hangup(reader)
            return False
        if kind in ("truncated", "truncated_eof"):
            length = len(data) if kind == "truncated" else None
            writer.write(head(200, "application/json", length) + data[: len(data) // 2])
            await writer.drain()
            return False
        writer.write(head(200, "application/json", len(data)) + data)
        await writer.drain()
        return True

    async def _slow_stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, wire: str, text: str
    ) -> None:
        """A stream of 100 events, one every 20 ms; a proxy hanging up counts as cancelled."""
        events = stream_events(wire, text * 20)
        body = events[1:-2]
        events = [events[0], *(body * (100 // max(1, len(body)) + 1))[:100], *events[-2:]]
        writer.write(head(200, "text/event-stream", None))
        for event in events:
            try:
                writer.write(event)
                await writer.drain()
                if await asyncio.wait_for(reader.read(1), 0.02) == b"":
                    raise ConnectionResetError
            except TimeoutError:
                continue
            except ConnectionError:
                with self._lock:
                    self.cancelled += 1
                return

    async def _until_hangup(self, reader: asyncio.StreamReader) -> None:
        """Hold the exchange open until the proxy closes its side (or an hour passes)."""
        try:
            await asyncio.wait_for(reader.read(), 3600)
        except (TimeoutError, ConnectionError):
            return
        with self._lock:
            self.cancelled += 1
