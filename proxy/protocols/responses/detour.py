"""The proxy's own tools on the OpenAI Responses API: their declaration, the assistant turn of a
detour, and how a follow-up's stream continues the client's.

* A tool is a flat function tool with `strict: false` (the API defaults to strict schemas,
  which forbid optional properties).
* The detour turn keeps the output items minus the client's `function_call` items: reasoning
  items with their `id` and `encrypted_content`, message items, the proxy's `function_call`s
  keyed by `call_id`.
* The follow-up's `response.created` / `in_progress` are dropped, `output_index` shifts past the
  items already relayed, `sequence_number` continues, and the final `response.completed` (or
  incomplete / failed) lists the relayed items before its own output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...sse import SseEvent, event_json, json_event, parse_event
from ...types import Json, Message
from ..base import Continue
from .convert import assistant_message
from .items import PRIVATE, item_type

_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def tool_definition(name: str, description: str, parameters: Json) -> Json:
    return {"type": "function", "name": name, "description": description, "parameters": parameters, "strict": False}


def detour_turn(message: Message, names: frozenset[str]) -> Message | None:
    """The output items minus the `function_call`s of other tools; None without native items."""
    private = message.get(PRIVATE)
    items = private.get("items") if isinstance(private, Mapping) else None
    if not isinstance(items, list):
        return None
    kept = [
        i
        for i in items
        if not (item_type(i) == "function_call" and not (isinstance(i, Mapping) and i.get("name") in names))
    ]
    return assistant_message(kept)


def continuation(relayed: Sequence[bytes]) -> Continue:
    seen = [data for data in (event_json(parse_event(raw)) for raw in relayed) if data is not None]
    shift = 1 + max((d["output_index"] for d in seen if isinstance(d.get("output_index"), int)), default=-1)
    numbers = [d["sequence_number"] for d in seen if isinstance(d.get("sequence_number"), int)]
    counter = [1 + max(numbers, default=-1)]
    items = [
        d["item"] for d in seen if d.get("type") == "response.output_item.done" and isinstance(d.get("item"), dict)
    ]

    def go(event: SseEvent) -> bytes | None:
        data = event_json(event)
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
        return json_event(event.event or str(kind), data)

    return go
