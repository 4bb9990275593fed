"""Incremental Server-Sent Events framing, pure.

Upstream bytes arrive in arbitrary pieces; the relay must forward each complete event as soon as
it is complete (never wait for more), and look inside it on the side. `SseSplitter.feed` returns
the complete events in a piece, each as its original bytes (terminator included) so relaying them
is byte-faithful, and keeps the incomplete rest for the next piece.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from . import codec

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(r"\r\n|\r|\n")


class SseEvent(NamedTuple):  # a tuple: one per event of every stream, built at C speed
    raw: bytes
    event: str | None
    data: str | None
    """The joined `data:` lines, or None for a comment-only or empty event."""


def parse_event(raw: bytes) -> SseEvent:
    if raw.startswith(b"data: ") and raw.endswith(b"\n\n") and raw.count(b"\n") == 2 and b"\r" not in raw:
        # the usual event, one `data:` line (what the general path below gives, without its splits)
        return SseEvent(raw, None, raw[6:-2].decode("utf-8", errors="replace"))
    event: str | None = None
    data: list[str] = []
    # Only CR, LF and CRLF end SSE lines; str.splitlines() would also split at U+2028 and
    # friends, which JSON may carry unescaped.
    for line in _LINE.split(raw.decode("utf-8", errors="replace")):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    return SseEvent(raw, event, "\n".join(data) if data else None)


class SseSplitter:
    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, piece: bytes) -> list[SseEvent]:
        self._buffer += piece
        events: list[SseEvent] = []
        start = 0
        if b"\r" not in self._buffer:  # LF line ends only, as every API sends: one boundary to find
            while (end := self._buffer.find(b"\n\n", start)) >= 0:
                events.append(parse_event(self._buffer[start : end + 2]))
                start = end + 2
            self._buffer = self._buffer[start:]
            return events
        for m in _BOUNDARY.finditer(self._buffer):
            events.append(parse_event(self._buffer[start : m.end()]))
            start = m.end()
        self._buffer = self._buffer[start:]
        return events

    def rest(self) -> bytes:
        """Bytes of an unterminated final event (an upstream that closed mid-event)."""
        return self._buffer


def event_json(event: SseEvent) -> dict[str, Any] | None:
    """An event's data as a JSON object (None: no data, not JSON, not an object)."""
    if event.data is None:
        return None
    try:
        data = codec.loads(event.data)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def json_event(name: str, data: dict[str, Any]) -> bytes:
    """One `event:` + `data:` SSE event."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
