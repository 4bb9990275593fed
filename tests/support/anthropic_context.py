"""The Anthropic Messages API's own context management, as the scripted upstream speaks it.

A request may carry ``context_management={"edits": [...]}`` with three edit types; the server
applies them to what the model sees, never to what the client sent:

- ``clear_tool_uses_20250919``: once the prompt exceeds ``trigger`` (default 100,000 input
  tokens; or a number of tool uses), the oldest tool results beyond the ``keep`` most recent
  tool uses (default 3) are replaced by :data:`CLEARED_TOOL_RESULT`, skipping ``exclude_tools``,
  and with ``clear_tool_inputs`` the tool uses' inputs too; with ``clear_at_least`` only when
  that many tokens go. The response reports it in ``context_management.applied_edits``
  (``cleared_tool_uses``, ``cleared_input_tokens``).
- ``clear_thinking_20251015``: thinking blocks of all but the ``keep`` most recent assistant
  turns that have them (default 1 turn; ``"all"`` keeps every one) are removed
  (``cleared_thinking_turns``, ``cleared_input_tokens``). It must come first in ``edits``.
- ``compact_20260112``: when the prompt reaches ``trigger`` (default 150,000 input tokens) the
  server summarizes it into a ``compaction`` block; with ``pause_after_compaction`` the answer
  is that block alone with ``stop_reason: "compaction"``, else the block and then the answer.
  ``usage.iterations`` lists a ``compaction`` iteration (the summarizing call) and a
  ``message`` iteration; the top-level usage is the message iterations' only.

A compaction block sent back (any message) makes the server drop every block before it; one
with ``content: null`` is a no-op. Its ``encrypted_content`` seals the summary
(:mod:`tests.support.sealing`), so an altered block is refused.

``context_management`` needs the ``anthropic-beta`` header ``context-management-2025-06-27``
(clearing edits) or ``compact-2026-01-12`` (compaction); without either the API answers
"context_management: Extra inputs are not permitted" (that wording is real:
anthropics/claude-code#14135). Messages marked *guessed* below are ours in the API's style.

Shapes, from anthropic-sdk-python 2.17.0 ``src/anthropic/types/beta/`` (the installed
``anthropic``): ``beta_context_management_config_param.py`` (edits),
``beta_clear_tool_uses_20250919_edit_param.py``, ``beta_clear_thinking_20251015_edit_param.py``,
``beta_compact_20260112_edit_param.py`` (type, trigger, pause_after_compaction, instructions),
``beta_*_edit_response.py`` and ``beta_context_management_response.py`` (applied_edits),
``beta_compaction_block.py`` / ``_param.py`` (type, content, encrypted_content, signature,
tool_changes), ``beta_compaction_content_block_delta.py`` (``compaction_delta``: content,
encrypted_content), ``beta_iterations_usage.py``, ``beta_compaction_iteration_usage.py``,
``beta_message_iteration_usage.py``, ``beta_stop_reason.py`` (``"compaction"``),
``beta_raw_message_delta_event.py`` (``context_management`` on ``message_delta``),
``beta_count_tokens_context_management_response.py`` (``original_input_tokens``) and
``anthropic_beta_param.py`` (the beta names).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

from tests.support.sealing import seal, unseal

__all__ = [
    "CLEARED_TOOL_RESULT",
    "COMPACTION_BETA",
    "CONTEXT_MANAGEMENT_BETA",
    "Plan",
    "compacted",
    "compaction_block",
    "default_summary",
    "iteration",
    "plan",
    "request_problem",
]

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
COMPACTION_BETA = "compact-2026-01-12"
SEALING_KEY = b"scripted-anthropic-compaction-key"
CLEARED_TOOL_RESULT = "[tool result cleared]"
"""What a cleared tool result reads (guessed: the API documents placeholder text, not its words)."""
CLEAR_TRIGGER: dict[str, Any] = {"type": "input_tokens", "value": 100_000}
COMPACT_TRIGGER: dict[str, Any] = {"type": "input_tokens", "value": 150_000}
COMPACT_MINIMUM = 50_000
"""The lowest compaction trigger the API takes (its compaction guide: "minimum 50,000")."""

_CLEARING = ("clear_tool_uses_20250919", "clear_thinking_20251015")
_COMPACT = "compact_20260112"

Count = Callable[[dict[str, Any]], int]


def _error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def _betas(headers: dict[str, str]) -> set[str]:
    return {b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()}


def _digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def compaction_block(summary: str) -> dict[str, Any]:
    """A compaction block whose ``encrypted_content`` seals `summary`."""
    return {"type": "compaction", "content": summary, "encrypted_content": seal(SEALING_KEY, {"sha": _digest(summary)})}


def default_summary(messages: list[dict[str, Any]]) -> str:
    return f"[compacted: {len(messages)} messages]"


def request_problem(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any] | None:
    """The 400 for context management the API would refuse, or for a compaction block that does
    not verify."""
    betas = _betas(headers)
    config = body.get("context_management")
    if config is not None:
        if not betas & {CONTEXT_MANAGEMENT_BETA, COMPACTION_BETA}:
            return _error("context_management: Extra inputs are not permitted")
        edits = config.get("edits") if isinstance(config, dict) else None
        if not isinstance(edits, list):
            return _error("context_management.edits: Input should be a valid list")  # guessed
        tags = [
            *(_CLEARING if CONTEXT_MANAGEMENT_BETA in betas else ()),
            *([_COMPACT] if COMPACTION_BETA in betas else []),
        ]
        for i, edit in enumerate(edits):
            kind = edit.get("type") if isinstance(edit, dict) else None
            if kind not in tags:  # guessed: pydantic's discriminated-union wording, as the API uses
                expected = ", ".join(f"'{t}'" for t in tags)
                return _error(
                    f"context_management.edits.{i}: Input tag '{kind}' found using 'type' does not match "
                    f"any of the expected tags: {expected}"
                )
            trigger = edit.get("trigger") if kind == _COMPACT else None
            value = trigger.get("value") if isinstance(trigger, dict) else None
            if isinstance(value, int) and value < COMPACT_MINIMUM:  # the documented minimum; guessed wording
                return _error(
                    f"context_management.edits.{i}.trigger.value: Input should be greater than or equal to "
                    f"{COMPACT_MINIMUM}"
                )
            if kind == "clear_thinking_20251015" and i != 0:  # guessed wording
                return _error(
                    f"context_management.edits.{i}: `clear_thinking_20251015` must be the first edit in "
                    "`context_management.edits`."
                )
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict) or block.get("type") != "compaction":
                continue
            text = block.get("content")
            if text == "":  # guessed wording; the SDK: "Empty string content is not allowed"
                return _error(f"messages.{i}.content.{j}.content: String should have at least 1 character")
            if text is None:
                continue
            sealed = unseal(SEALING_KEY, block.get("encrypted_content"))
            if sealed is None or sealed.get("sha") != _digest(str(text)):  # guessed wording
                return _error(f"messages.{i}.content.{j}: Invalid `encrypted_content` in `compaction` block")
    return None


@dataclasses.dataclass
class Plan:
    """What the model sees of a request, and what the server did to get there."""

    body: dict[str, Any]
    """The request as the model sees it: blocks before the last compaction dropped, edits applied."""
    original_tokens: int
    """Its prompt before the edits (count_tokens' ``context_management.original_input_tokens``)."""
    applied_edits: list[dict[str, Any]]
    compact: dict[str, Any] | None
    """The ``compact_20260112`` edit, if the request has one."""
    managed: bool
    """The request carried ``context_management`` (the response then reports it)."""

    def compaction_trigger(self) -> int:
        trigger = (self.compact or {}).get("trigger") or COMPACT_TRIGGER
        return int(trigger["value"])


def _drop_compacted(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages from the last compaction block with content on (null-content blocks removed)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list) or not any(b.get("type") == "compaction" for b in content):
            out.append(message)
            continue
        kept: list[dict[str, Any]] = []
        for block in content:
            if block.get("type") != "compaction":
                kept.append(block)
            elif block.get("content") is not None:  # the API drops all blocks before it
                out, kept = [], [block]
        if kept:
            out.append({**message, "content": kept})
    return out


def _clear_tool_uses(body: dict[str, Any], edit: dict[str, Any], count: Count) -> dict[str, Any] | None:
    messages = body["messages"]
    uses = [
        block
        for m in messages
        if m.get("role") == "assistant" and isinstance(m.get("content"), list)
        for block in m["content"]
        if block.get("type") == "tool_use"
    ]
    before = count(body)
    trigger = edit.get("trigger") or CLEAR_TRIGGER
    if (before if trigger["type"] == "input_tokens" else len(uses)) <= int(trigger["value"]):
        return None
    keep = int((edit.get("keep") or {"value": 3})["value"])
    exclude = set(edit.get("exclude_tools") or ())
    candidates = [u for u in uses if u.get("name") not in exclude]
    chosen = candidates[: max(0, len(candidates) - keep)]
    ids = {u.get("id") for u in chosen}
    inputs = edit.get("clear_tool_inputs")
    names = {u.get("id"): u.get("name") for u in chosen}

    def edited(block: dict[str, Any]) -> dict[str, Any]:
        kind = block.get("type")
        if kind == "tool_result" and block.get("tool_use_id") in ids:
            return {**block, "content": CLEARED_TOOL_RESULT}
        if (
            kind == "tool_use"
            and block.get("id") in ids
            and (inputs is True or (isinstance(inputs, list) and names[block.get("id")] in inputs))
        ):
            return {**block, "input": {}}
        return block

    cleared = [
        {**m, "content": [edited(b) for b in m["content"]]} if isinstance(m.get("content"), list) else m
        for m in messages
    ]
    after_body = {**body, "messages": cleared}
    freed = before - count(after_body)
    floor = edit.get("clear_at_least")
    if not chosen or (floor is not None and freed < int(floor["value"])):
        return None
    return {
        "body": after_body,
        "edit": {"type": "clear_tool_uses_20250919", "cleared_tool_uses": len(chosen), "cleared_input_tokens": freed},
    }


def _clear_thinking(body: dict[str, Any], edit: dict[str, Any], count: Count) -> dict[str, Any] | None:
    keep = edit.get("keep") or {"type": "thinking_turns", "value": 1}
    if keep == "all" or keep.get("type") == "all":
        return None
    thinking = ("thinking", "redacted_thinking")
    turns = [
        i
        for i, m in enumerate(body["messages"])
        if m.get("role") == "assistant"
        and isinstance(m.get("content"), list)
        and any(b.get("type") in thinking for b in m["content"])
    ]
    chosen = set(turns[: max(0, len(turns) - int(keep["value"]))])
    if not chosen:
        return None
    messages = [
        {**m, "content": [b for b in m["content"] if b.get("type") not in thinking]} if i in chosen else m
        for i, m in enumerate(body["messages"])
    ]
    after_body = {**body, "messages": messages}
    return {
        "body": after_body,
        "edit": {
            "type": "clear_thinking_20251015",
            "cleared_thinking_turns": len(chosen),
            "cleared_input_tokens": count(body) - count(after_body),
        },
    }


def plan(body: dict[str, Any], count: Count) -> Plan:
    """What the model sees of a valid request (:func:`request_problem` passed): the compacted
    prefix dropped, then the edits in their order. `count` counts a request body's prompt."""
    seen = body
    messages = body.get("messages") or []
    if any(
        isinstance(m.get("content"), list) and any(b.get("type") == "compaction" for b in m["content"])
        for m in messages
    ):
        seen = {**body, "messages": _drop_compacted(messages)}
    config = body.get("context_management")
    edits = config.get("edits") or [] if isinstance(config, dict) else []
    original = count(seen) if config is not None else 0
    applied: list[dict[str, Any]] = []
    compact = None
    for edit in edits:
        kind = edit["type"]
        if kind == _COMPACT:
            compact = edit
            continue
        done = (_clear_thinking if kind == "clear_thinking_20251015" else _clear_tool_uses)(seen, edit, count)
        if done is not None:
            seen = done["body"]
            applied.append(done["edit"])
    return Plan(seen, original, applied, compact, config is not None)


def iteration(kind: str, usage: dict[str, Any]) -> dict[str, Any]:
    """One entry of ``usage.iterations`` (``BetaMessageIterationUsage`` for ``"message"``,
    ``BetaCompactionIterationUsage`` for ``"compaction"``)."""
    return {
        "type": kind,
        "input_tokens": usage["input_tokens"],
        "output_tokens": usage["output_tokens"],
        "cache_creation_input_tokens": usage.get("cache_creation_input_tokens", 0),
        "cache_read_input_tokens": usage.get("cache_read_input_tokens", 0),
    }


def compacted(
    content: list[dict[str, Any]],
    usage: dict[str, Any],
    block: dict[str, Any],
    summarizing: dict[str, Any],
    resumed: int,
    paused: bool,
) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    """The answer to a request whose compaction fired: (content, usage, stop reason or None for
    the reply's own). `summarizing` is the compaction call's usage (the closed context in, the
    summary out), `resumed` the prompt the model answers from afterwards (the summary), `usage`
    the answer's. As ``beta_iterations_usage.py`` documents, the compaction entry's tokens are
    not in the top-level fields: paused, they are all 0.

    Example: a 180,000-token prompt summarized in 3,000 tokens, then answered from 3,200 with
    400 tokens out: iterations ``[compaction 180,000/3,000, message 3,200/400]``, top level
    ``input_tokens`` 3,200 and ``output_tokens`` 400.
    """
    first = iteration("compaction", summarizing)
    if paused:
        top = {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0}
        return [block], {**top, "iterations": [first]}, "compaction"
    top = {
        "input_tokens": resumed,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": usage["output_tokens"],
    }
    return [block, *content], {**top, "iterations": [first, iteration("message", top)]}, None
