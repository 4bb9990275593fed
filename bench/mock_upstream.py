"""A fast mock of OpenAI's chat completions API: raw asyncio protocol, pre-serialized answers.

    python -m bench.mock_upstream --port P [--delay-ms 0] [--chunks 16] [--gap-ms 0]
                                  [--paced-gap-ms 5] [--summary-delay-ms 50]

* non-stream: one pre-serialized JSON body (usage included).
* stream (`"stream": true` in the body): `--chunks` SSE events (role, content pieces, finish),
  then a usage chunk when the body asks for `include_usage` (and `"usage": null` on the other
  chunks, as the real API does), then `data: [DONE]`. Events are written back to back, or with
  `--gap-ms` between them; a request whose model contains "paced" uses `--paced-gap-ms`.
* `--delay-ms` before the response starts (time to first token).
* summarizer requests (the body holds ctxproxy's summary prompt, or ends with the ask of a shared
  summary, `policies.shared_prompt`, as the default `summarizer.mode: auto` sends) wait
  `--summary-delay-ms` and answer a short structured summary.
HTTP/1.1 keep-alive, Content-Length or chunked request bodies; GET /v1/models and /health too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re

from policies.shared_prompt import OPENING

REPLY_TEXT = "Understood. I ran the command and the output looks as expected; continuing with the next step."
SUMMARY_TEXT = (
    "## Goal\nContinue the user's task.\n## Constraints\nnone\n## Decisions\nnone\n## Key facts\nnone\n"
    "## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue."
)
USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 20,
    "total_tokens": 1020,
    "prompt_tokens_details": {"cached_tokens": 0},
}

SHARED_MARK = OPENING.encode()


def is_summary(body: bytes) -> bool:
    """A summarizer request: ctxproxy's own (its system prompt) or a shared one (its ask)."""
    return b"You compress the history" in body or SHARED_MARK in body


_STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
_MODEL_RE = re.compile(rb'"model"\s*:\s*"([^"]*)"')


def _http(status: str, ctype: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\nx-request-id: req_mock\r\n\r\n"
    ).encode() + body


def completion(text: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "mock",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
            "system_fingerprint": "fp_mock",
        },
        separators=(",", ":"),
    ).encode()


def sse_events(chunks: int, with_usage: bool) -> list[bytes]:
    """`chunks` events whose content pieces add up to REPLY_TEXT, then usage (if asked), [DONE]."""
    pieces = max(1, chunks - 2)
    size = -(-len(REPLY_TEXT) // pieces)
    texts = [REPLY_TEXT[i : i + size] for i in range(0, len(REPLY_TEXT), size)]
    base = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "mock",
        "system_fingerprint": "fp_mock",
    }
    extra = {"usage": None} if with_usage else {}
    deltas = [({"role": "assistant", "content": ""}, None)] + [({"content": t}, None) for t in texts]
    deltas.append(({}, "stop"))
    events = [
        {**base, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": f}], **extra}
        for d, f in deltas
    ]
    if with_usage:
        events.append({**base, "choices": [], "usage": USAGE})
    out = [b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in events]
    out.append(b"data: [DONE]\n\n")
    return out


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\nx-request-id: req_mock\r\n\r\n"
)


class Mock(asyncio.Protocol):
    def __init__(self, opts: argparse.Namespace, cache: dict[str, bytes | list[bytes]]) -> None:
        self.opts = opts
        self.cache = cache
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.queue: asyncio.Queue[tuple[str, str, bytes] | None] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.worker = asyncio.get_running_loop().create_task(self.serve())

    def connection_lost(self, exc: Exception | None) -> None:
        self.queue.put_nowait(None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            method, path = (lines[0].split(" ") + ["", ""])[:2]
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            start = end + 4
            if "chunked" in headers.get("transfer-encoding", "").lower():
                body = bytearray()
                pos = start
                while True:
                    nl = self.buf.find(b"\r\n", pos)
                    if nl < 0:
                        return
                    size = int(bytes(self.buf[pos:nl]).split(b";")[0], 16)
                    if len(self.buf) < nl + 2 + size + 2:
                        return
                    body += self.buf[nl + 2 : nl + 2 + size]
                    pos = nl + 2 + size + 2
                    if size == 0:
                        break
                consumed = pos
            else:
                length = int(headers.get("content-length", "0") or 0)
                if len(self.buf) < start + length:
                    return
                body = self.buf[start : start + length]
                consumed = start + length
            self.queue.put_nowait((method, path, bytes(body)))
            del self.buf[:consumed]

    async def serve(self) -> None:
        assert self.transport is not None
        while True:
            item = await self.queue.get()
            if item is None or self.transport.is_closing():
                return
            method, path, body = item
            if method == "GET":
                if "models" in path:
                    self.transport.write(self.cache["models"])  # type: ignore[arg-type]
                else:
                    self.transport.write(_http("200 OK", "application/json", b'{"status":"ok"}'))
                continue
            if is_summary(body):
                await asyncio.sleep(self.opts.summary_delay_ms / 1000)
                self.transport.write(self.cache["summary"])  # type: ignore[arg-type]
                continue
            if self.opts.delay_ms:
                await asyncio.sleep(self.opts.delay_ms / 1000)
            if not _STREAM_RE.search(body):
                self.transport.write(self.cache["whole"])  # type: ignore[arg-type]
                continue
            events = self.cache["usage" if b"include_usage" in body else "plain"]
            model = _MODEL_RE.search(body)
            gap = self.opts.gap_ms
            if model and b"paced" in model.group(1):
                gap = self.opts.paced_gap_ms
            if not gap:
                self.transport.write(STREAM_HEAD + b"".join(events) + b"0\r\n\r\n")  # type: ignore[arg-type]
                continue
            self.transport.write(STREAM_HEAD)
            for event in events:
                self.transport.write(event)  # type: ignore[arg-type]
                await asyncio.sleep(gap / 1000)
            self.transport.write(b"0\r\n\r\n")


def build_cache(opts: argparse.Namespace) -> dict[str, bytes | list[bytes]]:
    models = json.dumps({"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "mock"}]})
    return {
        "whole": _http("200 OK", "application/json", completion(REPLY_TEXT)),
        "summary": _http("200 OK", "application/json", completion(SUMMARY_TEXT)),
        "models": _http("200 OK", "application/json", models.encode()),
        "plain": [_chunked(e) for e in sse_events(opts.chunks, False)],
        "usage": [_chunked(e) for e in sse_events(opts.chunks, True)],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.mock_upstream")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--chunks", type=int, default=16)
    p.add_argument("--gap-ms", type=float, default=0.0)
    p.add_argument("--paced-gap-ms", type=float, default=5.0)
    p.add_argument("--summary-delay-ms", type=float, default=50.0)
    return p.parse_args(argv)


async def amain(opts: argparse.Namespace) -> None:
    cache = build_cache(opts)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Mock(opts, cache), opts.host, opts.port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(amain(parse_args()))
    except KeyboardInterrupt:
        pass
