"""The Responses API's own context management, as the scripted upstream speaks it.

OpenAI compacts a conversation three ways, all ending in the same opaque item:

- ``POST /v1/responses/compact`` (``client.responses.compact(...)``): the request takes the
  fields of a create request that shape the context (``model``, ``input``, ``instructions``,
  ``previous_response_id``, ``prompt_cache_key``...); the answer is a ``response.compaction``
  object whose ``output`` is "all user messages, followed by a single compaction item", with
  ``usage`` for the compaction pass;
- ``context_management=[{"type": "compaction", "compact_threshold": N}]`` on ``POST
  /v1/responses``: once the rendered input crosses N the server compacts and the response's
  output holds the compaction item before the answer;
- a ``{"type": "compaction_trigger"}`` input item, which "must be the final input item": the
  response is the compaction item alone.

A compaction item ``{"type": "compaction", "id": "cmp_...", "encrypted_content": ...}`` sent
back in a later input stands for what it compacted: it costs :data:`COMPACTION_ITEM_TOKENS`
(the items before it, if the client still sends them, count as usual). Its
``encrypted_content`` is sealed (:mod:`tests.support.sealing`); an altered or unknown one gets
the real 400 ``invalid_encrypted_content``.

Shapes, from openai-python 3.60.0 ``src/openai/types/responses/`` (the installed ``openai``):
``compacted_response.py`` (``CompactedResponse``: id, created_at, object
``"response.compaction"``, output, usage), ``response_compaction_item.py`` (id,
encrypted_content, type ``"compaction"``, created_by), ``response_compaction_item_param.py``
(the input form: id optional), ``response_compact_params.py`` (the request),
``response_create_params.py`` (``ContextManagement``: type, compact_threshold),
``response_input_item_param.py`` (``CompactionTrigger``), ``response_compaction_compacting_event.py``
(``response.compaction.compacting``: item_id, output_index), ``input_token_count_response.py``
(``{"object": "response.input_tokens", "input_tokens": N}`` for ``POST
/v1/responses/input_tokens``). The behaviour is the guide's
(developers.openai.com/api/docs/guides/compaction).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from tests.support.overflow import openai_error
from tests.support.sealing import seal, unseal

__all__ = [
    "COMPACTION_ITEM_TOKENS",
    "SEALING_KEY",
    "compacted_response",
    "compaction_item",
    "compaction_threshold",
    "default_summary",
    "input_problem",
    "invalid_encrypted_content",
    "summary_of",
]

SEALING_KEY = b"scripted-openai-compaction-key"
COMPACTION_ITEM_TOKENS = 40
"""What a compaction item in input costs (the real cost is hidden; a small fixed number)."""


def default_summary(items: list[dict[str, Any]]) -> str:
    """A deterministic summary naming what it covers (tests script their own with ``compactor``)."""
    users = [i for i in items if i.get("type", "message") == "message" and i.get("role") == "user"]
    return f"[compacted: {len(items)} items, {len(users)} user messages]"


def compaction_item(summary: str, items: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    """A compaction output item; its id is derived from what it seals, its content opaque."""
    covered = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16]
    payload = {"summary": summary, "items": len(items), "tokens": tokens, "covered": covered}
    blob = seal(SEALING_KEY, payload)
    return {
        "id": "cmp_" + hashlib.sha256(blob.encode()).hexdigest()[:24],
        "type": "compaction",
        "encrypted_content": blob,
        "created_by": None,
    }


def summary_of(item: dict[str, Any]) -> str | None:
    """The summary a compaction item of this server seals (None: not one of ours)."""
    payload = unseal(SEALING_KEY, item.get("encrypted_content"))
    return None if payload is None else str(payload.get("summary", ""))


def invalid_encrypted_content(blob: Any) -> dict[str, Any]:
    """The real 400 for encrypted content the server cannot verify. Wording and the abbreviation
    (first and last four characters) as users report it: openai/codex#8145, #8119; the
    ``Reason:`` tail as in Wei-Shaw/sub2api#2863 (2026)."""
    text = str(blob)
    shown = f"{text[:4]}...{text[-4:]}" if len(text) > 8 else text
    return openai_error(
        f"The encrypted content {shown} could not be verified. "
        "Reason: Encrypted content could not be decrypted or parsed.",
        code="invalid_encrypted_content",
    )


def input_problem(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The 400 for compaction items that do not verify or a compaction_trigger that is not last
    (that message is a guess in OpenAI's style: the SDK only says it "must be the final input
    item")."""
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "compaction" and summary_of(item) is None:
            return invalid_encrypted_content(item.get("encrypted_content"))
        if kind == "compaction_trigger" and i != len(items) - 1:
            return openai_error(
                f"Invalid 'input[{i}]': an item of type 'compaction_trigger' must be the final input item.",
                param=f"input[{i}]",
                code="invalid_value",
            )
    return None


def compaction_threshold(body: dict[str, Any], default: int) -> int | None | dict[str, Any]:
    """The request's compaction threshold (None: no context management), or the 400. The
    validation wording is OpenAI's usual (invalid_type / invalid_value); `default` stands for
    an entry without ``compact_threshold`` (the SDK leaves its default undocumented)."""
    entries = body.get("context_management")
    if entries is None:
        return None
    if not isinstance(entries, list):
        return openai_error(
            "Invalid type for 'context_management': expected an array of objects, but got "
            f"{type(entries).__name__} instead.",
            param="context_management",
            code="invalid_type",
        )
    threshold: int | None = None
    for i, entry in enumerate(entries):
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind != "compaction":
            return openai_error(
                f"Invalid value: '{kind}'. Supported values are: 'compaction'.",
                param=f"context_management[{i}].type",
                code="invalid_value",
            )
        value = entry.get("compact_threshold")
        if value is None:
            value = default
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return openai_error(
                f"Invalid 'context_management[{i}].compact_threshold': expected a positive integer, "
                f"but got {value!r} instead.",
                param=f"context_management[{i}].compact_threshold",
                code="invalid_value",
            )
        threshold = value if threshold is None else min(threshold, value)
    return threshold


def compacted_response(
    items: list[dict[str, Any]], item: dict[str, Any], input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    """The ``response.compaction`` object: every user message of the input as it was, then the
    compaction item; usage is the compaction pass's."""
    users = [
        {
            "id": "msg_" + hashlib.sha256(json.dumps(i, sort_keys=True).encode()).hexdigest()[:16],
            "type": "message",
            "status": "completed",
            "role": "user",
            "content": (
                [{"type": "input_text", "text": i["content"]}] if isinstance(i.get("content"), str) else i["content"]
            ),
        }
        for i in items
        if i.get("type", "message") == "message" and i.get("role") == "user"
    ]
    return {
        "id": "resp_" + item["id"][4:],
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*users, item],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }
