"""ctxproxy's own compaction done by the provider (`summarizer.mode: native`): `/responses/compact`.

The covered range goes as a Responses input (the previous checkpoint's opaque items first, when
it has them) and the answer -- `{"object": "response.compaction", "output": [user messages...,
one compaction item], "usage"}` -- becomes the checkpoint's content: the output items, converted
to common messages that carry them as the provider spelled them (the compaction item marks its message
`PROVIDER_STATE`), so every later projection sends them back byte for byte, as the API requires
of its `encrypted_content`.
"""

from __future__ import annotations

from ...types import Json, Message
from ..base import Compacted, NativeRequest
from .convert import items_to_messages, message_to_items
from .items import PRIVATE

PATH = "/responses/compact"


def compaction_request(model: str, messages: list[Message]) -> NativeRequest:
    """The compaction call over `messages`; the compaction item itself has no size to ask for."""
    items: list[Json] = []
    for message in messages:
        items.extend(message_to_items(message))
    return NativeRequest(PATH, {"model": model, "input": items}, {})


def compacted(parsed: Json) -> Compacted:
    """The output items as common messages; an answer without a compaction item compacted nothing."""
    output = parsed.get("output")
    usage = parsed.get("usage")
    if parsed.get("object") != "response.compaction" or not isinstance(output, list):
        return Compacted((), None, usage, "the answer is not a response.compaction object")
    items = [item for item in output if isinstance(item, dict)]
    if not any(item.get("type") == "compaction" for item in items):
        return Compacted((), None, usage, "the compaction answer holds no compaction item")
    messages = items_to_messages(items)
    provided = iter(items)
    for message in messages:  # the provider's own spelling, not the canonical form: they go back as made
        message[PRIVATE]["items"] = [next(provided) for _ in message[PRIVATE]["items"]]
    return Compacted(tuple(messages), None, usage)
