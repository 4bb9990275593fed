"""The proxy's own tools on the Anthropic Messages API: their declaration, the assistant turn of a
detour, and how a follow-up's stream continues the client's.

* A tool is `{"name", "description", "input_schema"}`.
* A request ending with an assistant turn asks the model to continue that turn (a prefill): a
  detour cannot append a turn after it.
* The detour turn keeps the native blocks minus the client's `tool_use` blocks: thinking and
  redacted_thinking first with their signatures, as the API requires of an assistant turn with
  tool use when thinking is on, text and server-tool blocks as they came.
* The follow-up's `message_start` and `ping` are dropped (the client's message has started), its
  content block indexes shift past the blocks already relayed, and its `message_delta` usage is
  completed with its own `message_start` input fields, so the client's final usage is the
  final call's.

Example: relayed `content_block_start {index: 0, text}` ... `content_block_stop 0`; the
follow-up's `content_block_start {index: 0, text: "The port is 8443."}` goes out as index 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...sse import SseEvent, event_json, json_event, parse_event
from ...types import Json, Message
from ..base import Continue
from .convert import PRIVATE, assistant_to_common


def tool_definition(name: str, description: str, parameters: Json) -> Json:
    return {"name": name, "description": description, "input_schema": parameters}


def room_for_a_turn(body: Json) -> bool:
    """False for a prefill: the request ends with an assistant turn."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return True
    last = messages[-1]
    return not (isinstance(last, Mapping) and last.get("role") == "assistant")


def detour_turn(message: Message, names: frozenset[str]) -> Message | None:
    """The native turn minus the `tool_use` blocks of other tools; None without native blocks."""
    private = message.get(PRIVATE)
    blocks = private.get("content") if isinstance(private, Mapping) else None
    if not isinstance(blocks, list):
        return None
    kept = [b for b in blocks if not (_is_tool_use(b) and not (isinstance(b, Mapping) and b.get("name") in names))]
    return assistant_to_common({"role": "assistant", "content": kept})


def _is_tool_use(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "tool_use"


def continuation(relayed: Sequence[bytes]) -> Continue:
    seen = [data for data in (event_json(parse_event(raw)) for raw in relayed) if data is not None]
    shift = 1 + max((d["index"] for d in seen if isinstance(d.get("index"), int)), default=-1)
    started: dict[str, Any] = {}

    def go(event: SseEvent) -> bytes | None:
        data = event_json(event)
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
        return json_event(event.event or str(kind), data)

    return go
