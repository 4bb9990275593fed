"""The follow-up request's new messages, in the common model, for each wire.

The intermediate answer keeps only its calls of the proxy's tools (recall, memory): client tool
calls made beside them are dropped (the model issues them again once it has the result). What the wire needs around the
calls stays exactly as received, so the follow-up passes the provider's checks:

* OpenAI chat: the text and the recall `tool_calls`.
* Anthropic: the native blocks minus the dropped `tool_use` blocks -- thinking and
  redacted_thinking first with their signatures, as the API requires of an assistant turn with
  tool use when thinking is on, text and server-tool blocks as they came.
* Responses: the output items minus the dropped `function_call` items -- reasoning items with
  their `id` and `encrypted_content`, message items, the recall `function_call`s keyed by `call_id`.

Each call is answered by a tool result (`role: tool`, `tool_call_id`), which every wire's encoder
renders natively: a `tool_result` block in the next user turn, a `function_call_output` item.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.text import call_name, tool_calls

from ..protocols.anthropic.convert import PRIVATE as ANTHROPIC_PRIVATE
from ..protocols.anthropic.convert import assistant_to_common
from ..protocols.responses.convert import assistant_message
from ..protocols.responses.items import PRIVATE as RESPONSES_PRIVATE
from ..protocols.responses.items import item_type
from ..types import Message


def intermediate_turn(wire: str, message: Message, names: frozenset[str]) -> Message:
    """The assistant turn that called the proxy's tools (`names`), with those calls only."""
    if wire == "anthropic":
        blocks = _private(message, ANTHROPIC_PRIVATE, "content")
        if blocks is not None:
            kept = [b for b in blocks if not (_is(b, "type", "tool_use") and not _named(b, names))]
            return assistant_to_common({"role": "assistant", "content": kept})
    if wire == "openai_responses":
        items = _private(message, RESPONSES_PRIVATE, "items")
        if items is not None:
            kept = [i for i in items if not (item_type(i) == "function_call" and not _named(i, names))]
            return assistant_message(kept)
    calls = [call for call in tool_calls(message) if call_name(call) in names]
    private = {k: v for k, v in message.items() if k.startswith("_")}  # a wire's own parts (Gemini's signatures)
    return {"role": "assistant", "content": message.get("content"), "tool_calls": calls, **private}


def tool_result(call: Mapping[str, Any], text: str) -> Message:
    return {"role": "tool", "tool_call_id": str(call.get("id", "")), "content": text}


def _private(message: Message, key: str, field: str) -> list[Any] | None:
    private = message.get(key)
    value = private.get(field) if isinstance(private, Mapping) else None
    return value if isinstance(value, list) else None


def _named(block: Any, names: frozenset[str]) -> bool:
    return isinstance(block, Mapping) and block.get("name") in names


def _is(block: Any, key: str, value: str) -> bool:
    return isinstance(block, Mapping) and block.get(key) == value
