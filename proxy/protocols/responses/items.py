"""Responses items in canonical form: what identity hashes, and how equal items are recognised.

Every common message carries `_responses: {"items": [...]}`, the CANONICAL form of the native
items it stands for, in order. Canonical (deterministic, what identity hashes): keys with null
values dropped; `status` dropped everywhere; `id` dropped on message, function_call and
function_call_output items (server-assigned, clients may omit them); message items always get
`"type": "message"` and list content (a string becomes one `input_text`/`output_text` part);
`annotations` and `logprobs` dropped from content parts; `function_call.arguments` in the
canonical JSON form of `identify.canonical_arguments` (pi re-stringifies them). Canonical items
are for matching: what goes upstream is the client's own item. Reasoning items keep their `id` and
`encrypted_content`. A client that drops reasoning items when re-sending a turn continues on a
fork of its conversation (the turn is a different one).

Example: `{"type": "message", "id": "msg_1", "role": "user", "content": "hi", "status": null}` and
`{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}` have the same canonical
form, `{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}`.
"""

from __future__ import annotations

import json
from typing import Any

from ... import identify
from ...types import Json

PRIVATE = "_responses"
MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = frozenset({"input_text", "output_text"})
ASSISTANT_SIDE = frozenset(
    {
        "reasoning",
        "function_call",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
    }
)
ATTACHED = frozenset({"compaction"})
"""Opaque items without a pairing: carried with the next message."""
_NO_ID = frozenset({"message", "function_call", "function_call_output"})
_PART_DROP = frozenset({"annotations", "logprobs"})


def item_type(item: Json) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def _canonical_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    return {k: v for k, v in part.items() if v is not None and k not in _PART_DROP}


def canonical_item(item: Json) -> Json:
    """The deterministic form of a native item (see the module docstring)."""
    kind = item_type(item)
    out = {k: v for k, v in item.items() if v is not None and k != "status"}
    if kind in _NO_ID:
        out.pop("id", None)
    if kind == "function_call" and isinstance(out.get("arguments"), str):
        out["arguments"] = identify.canonical_arguments(out["arguments"])
    if kind == "message":
        out["type"] = "message"
        content = out.get("content")
        if isinstance(content, str):
            text_type = "output_text" if out.get("role") == "assistant" else "input_text"
            content = [{"type": text_type, "text": content}]
        if isinstance(content, list):
            out["content"] = [_canonical_part(p) for p in content]
    return out


def item_key(item: Json) -> str:
    return json.dumps(canonical_item(item), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def is_assistant_side(item: Json) -> bool:
    kind = item_type(item)
    if kind == "message":
        return item.get("role") == "assistant"
    return kind in ASSISTANT_SIDE


def is_mappable(item: Json) -> bool:
    """Whether the policies can treat the item safely (else the request is not rewritable)."""
    kind = item_type(item)
    return kind in ("message", "function_call_output") or kind in ASSISTANT_SIDE or kind in ATTACHED
