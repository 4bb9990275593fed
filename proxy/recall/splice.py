"""Continuing a client's stream with the follow-up answer, when recall was called after text.

A stream's first text is relayed at once (people read it as it streams). When the same answer then
calls recall, that text already reached the client; the recall call and anything after it are
held back and dropped, and the follow-up answer's events continue the same client stream, so the
client still sees one message: the text it got, then the final answer. Each wire's events are
rewritten to continue what the client saw:

* OpenAI chat: chunks are independent deltas; the follow-up's go through as they are (its usage
  chunk is the client-visible usage).
* Anthropic: the follow-up's `message_start` and `ping` are dropped (the client's message has
  started), its content block indexes shift past the blocks already relayed, and its
  `message_delta` usage is completed with its own `message_start` input fields, so the client's
  final usage is the final call's.
* Responses: `response.created` / `in_progress` are dropped, `output_index` shifts past the items
  already relayed, `sequence_number` continues, and the final `response.completed` (or
  incomplete / failed) lists the relayed items before its own output.

Example (Anthropic): relayed `content_block_start {index: 0, text}` ... `content_block_stop 0`;
the follow-up's `content_block_start {index: 0, text: "The port is 8443."}` goes out as index 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from .. import codec
from ..sse import SseEvent, parse_event

Continue = Callable[[SseEvent], bytes | None]
_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def continuation(wire: str, relayed: Sequence[bytes]) -> Continue:
    """How the follow-up's events continue a client stream that already got the events `relayed`."""
    seen = [data for data in (_data(parse_event(raw)) for raw in relayed) if data is not None]
    if wire == "anthropic":
        return _anthropic(seen)
    if wire == "openai_responses":
        return _responses(seen)
    return _unchanged


def _unchanged(event: SseEvent) -> bytes | None:
    return event.raw


def _anthropic(seen: list[dict[str, Any]]) -> Continue:
    shift = 1 + max((d["index"] for d in seen if isinstance(d.get("index"), int)), default=-1)
    started: dict[str, Any] = {}

    def go(event: SseEvent) -> bytes | None:
        data = _data(event)
        if data is None:
            return event.raw
        kind = data.get("type")
        if kind == "message_start":
            usage = (data.get("message") or {}).get("usage")
            started.update(usage if isinstance(usage, dict) else {})
            return None
        if kind == "ping":
            return None
        if isinstance(data.get("index"), int):
            data["index"] += shift
        if kind == "message_delta":
            usage = data.get("usage")
            known = {k: v for k, v in usage.items() if v is not None} if isinstance(usage, dict) else {}
            data["usage"] = {**started, **known}
        return _event(event.event or str(kind), data)

    return go


def _responses(seen: list[dict[str, Any]]) -> Continue:
    shift = 1 + max((d["output_index"] for d in seen if isinstance(d.get("output_index"), int)), default=-1)
    numbers = [d["sequence_number"] for d in seen if isinstance(d.get("sequence_number"), int)]
    counter = [1 + max(numbers, default=-1)]
    items = [
        d["item"] for d in seen if d.get("type") == "response.output_item.done" and isinstance(d.get("item"), dict)
    ]

    def go(event: SseEvent) -> bytes | None:
        data = _data(event)
        if data is None:
            return event.raw
        kind = data.get("type")
        if kind in ("response.created", "response.in_progress"):
            return None
        if isinstance(data.get("output_index"), int):
            data["output_index"] += shift
        if "sequence_number" in data:
            data["sequence_number"], counter[0] = counter[0], counter[0] + 1
        response = data.get("response")
        if kind in _ENDS and isinstance(response, dict):
            data["response"] = {**response, "output": [*items, *(response.get("output") or [])]}
        return _event(event.event or str(kind), data)

    return go


def _data(event: SseEvent) -> dict[str, Any] | None:
    if event.data is None:
        return None
    try:
        data = codec.loads(event.data)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
