"""ctxproxy's own compaction done by the provider (`summarizer.mode: native`): Anthropic's
server-side compaction (`compact_20260112`), asked for on demand.

The covered range goes as a Messages request whose `context_management` holds one compaction
edit with the lowest trigger the API accepts (50,000 input tokens) and `pause_after_compaction`,
so the answer is the `compaction` block alone (`stop_reason: "compaction"`). Its `content` -- the
provider's readable summary -- becomes the checkpoint's text; the block itself is not kept: sent
back, it would make the API drop everything before it, the pinned task included. A range below the
trigger is not sent (the provider would answer it instead of compacting it).
"""

from __future__ import annotations

from ...types import Json, Message, as_list
from ..base import Compacted, NativeRequest
from .convert import to_native

BETA = "compact-2026-01-12"
VERSION = "2023-06-01"
MINIMUM_TRIGGER = 50_000
"""The smallest `trigger` the API takes for a compaction edit."""
ASK = "Compact the conversation so far."
"""The closing user turn when the range ends with the model's (the API answers a user turn)."""


def compaction_request(model: str, messages: list[Message], max_tokens: int) -> NativeRequest:
    native = to_native(messages, prefix=0)
    if native[-1]["role"] != "user":
        native.append({"role": "user", "content": ASK})
    edit = {
        "type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": MINIMUM_TRIGGER},
        "pause_after_compaction": True,
    }
    body: Json = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": native,
        "context_management": {"edits": [edit]},
    }
    headers = {"anthropic-version": VERSION, "anthropic-beta": BETA}
    return NativeRequest("/v1/messages", body, headers, MINIMUM_TRIGGER)


def compacted(parsed: Json) -> Compacted:
    """The compaction block's summary; an answer without one (the trigger not reached) compacted nothing."""
    usage = parsed.get("usage")
    for block in as_list(parsed.get("content")):
        if isinstance(block, dict) and block.get("type") == "compaction":
            text = block.get("content")
            if isinstance(text, str) and text.strip():
                return Compacted((), text, usage)
            return Compacted((), None, usage, "the compaction block holds no summary")
    return Compacted(
        (), None, usage, f"the provider answered without compacting (stop_reason {parsed.get('stop_reason')!r})"
    )
