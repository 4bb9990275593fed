"""Shrink tool results the model has already acted on; keep the recent ones nearly whole.

Problem: tool output (file dumps, logs, test runs) is most of an agent's context and mostly stale
a few turns later. Seed 002 keeps 8,000 chars for the last turns and 400 for older ones.

Rules (ToolResultsConfig):
- groups older than the most recent `keep_recent_groups` are "old": each tool result longer than
  `old_max_chars` becomes head + marker + tail, `old_max_chars` kept in total;
- the rest are "recent": capped the same way at `recent_max_chars`;
- results of `exclude_tools`, pinned messages, the newest user turn and the in-flight last
  group are never touched;
- the marker says what happened and where to get the rest:
  `[trimmed: tool result of bash, 48,210 chars; first 200 and last 200 kept; event 57]`, and
  when the request offers the recall tool, that it can fetch it:
  `[trimmed: tool result of bash, 48,210 chars; first 200 and last 200 kept; event 57;
  ctxproxy_recall can fetch it]` (a function of the result and the tool name alone, so the
  bytes stay the same from turn to turn).

Pass-through: while no checkpoint applies and the request as the client sent it fits the input
budget (`late_trim`, default the whole of it; never below the trigger), nothing is trimmed -- the
request goes as sent, so its prompt-cache hits are the client's own (trimming it would save
tokens yet rewrite a cached prefix, which costs more). A conversation only grows, so once it
crosses that line it stays trimmed.

Invariant (cache-friendly prefix, DESIGN 11): the old/recent boundary is counted in groups over
the WHOLE branch history (covered groups included), then rounded down to a multiple of
`clear_at_least`. Appending a group moves it only every `clear_at_least` groups, so consecutive
turns produce byte-identical prefixes in between and upstream prompt caches keep hitting.

Small windows: at most one recent group per `RECENT_GROUP_TOKENS` of input budget (and the
quantum no larger than that), so a 16k-window model keeps one recent group whole, not four:
four recent results of 8,000 chars would fill the room between the compaction's landing point
and its trigger, and the proxy would compact on nearly every request (each a summarizer call
and a rewritten prefix). From a 32k input budget on, the configured values apply.

Example: keep_recent_groups=4, clear_at_least=4 (a 128k window): with 10 groups the raw boundary is 6, trimmed
boundary 4 (groups 0-3 old); with 11 groups still 4; with 12 groups 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from policies.base import Message, ToolResultsConfig, TrimEntry
from policies.draft import PLAIN, CountFn, Draft, Slot, StepContext, TrimOne
from policies.text import content_text, cut_text, non_text_parts, with_content

RECENT_GROUP_TOKENS = 8000
"""input budget per recent group: a 16k window keeps one recent group, 32k three, 128k four"""


def recent_groups(config: ToolResultsConfig, input_budget: int | None = None) -> tuple[int, int]:
    """(recent groups kept, quantum of the boundary) for a model's input budget (None: as configured)."""
    keep = config.keep_recent_groups
    if input_budget is not None:
        keep = min(keep, input_budget // RECENT_GROUP_TOKENS)
    return keep, min(config.clear_at_least, max(1, keep))


def trim_boundary(n_groups: int, config: ToolResultsConfig, input_budget: int | None = None) -> int:
    """How many of the oldest groups count as old, quantized (`recent_groups`). Never the last
    group, even with no recent group kept: it is protected (never trimmed), so a cache point
    placed in it would point at a result that is trimmed, and changes, on the next request."""
    keep, clear = recent_groups(config, input_budget)
    raw = max(0, n_groups - max(1, keep))
    return (raw // clear) * clear


def previous_boundary(boundary: int, config: ToolResultsConfig, input_budget: int | None = None) -> int:
    """Where `trim_boundary` stood before it last moved to `boundary` (one quantum back)."""
    return max(0, boundary - recent_groups(config, input_budget)[1])


def recall_hint(recall_tool: str | None) -> str:
    """The end of a marker when the request offers the recall tool: it can fetch the rest."""
    return f"; {recall_tool} can fetch it" if recall_tool else ""


def trim_marker(
    tool_name: str, original_chars: int, head: int, tail: int, seq: int, dropped: int, recall_tool: str | None = None
) -> str:
    extra = f"; {dropped} non-text part(s) dropped" if dropped else ""
    return (
        f"[trimmed: tool result of {tool_name}, {original_chars:,} chars; "
        f"first {head:,} and last {tail:,} kept; event {seq}{extra}{recall_hint(recall_tool)}]"
    )


def trim_message(
    message: Message, *, max_chars: int, head_ratio: float, tool_name: str, seq: int, recall_tool: str | None = None
) -> tuple[dict[str, object], TrimEntry] | None:
    """The trimmed copy of a tool result and its record, or None when it already fits."""
    content = message.get("content")
    text = content_text(content)
    if len(text) <= max_chars:
        return None
    head, tail = cut_text(text, max_chars, head_ratio)
    marker = trim_marker(tool_name, len(text), len(head), len(tail), seq, non_text_parts(content), recall_tool)
    parts = [part for part in (head, marker, tail) if part]
    if sum(len(part) + 1 for part in parts) >= len(text):
        return None  # the marker would cost more than the cut saves
    trimmed = with_content(message, "\n".join(parts))
    tool_call_id = str(message.get("tool_call_id", ""))
    return trimmed, TrimEntry(seq, tool_call_id, len(text), len(head) + len(tail))


def cap_slot(
    slot: Slot,
    max_chars: int,
    ctx: StepContext,
    trim_one: TrimOne | None = None,
    *,
    exclude: tuple[str, ...] | None = None,
) -> tuple[Slot, list[TrimEntry]]:
    """Cap every eligible tool result of `slot` at `max_chars` (pinned ones and those of the
    `exclude` tools untouched; default: the policy's `exclude_tools`), head + tail by the
    policy's `head_ratio`, with markers naming the recall tool the request offers (a `CapSlot`:
    what a `Renderer` trims with).

    `trim_one`: how one result's trimmed form is found (e.g. remembered between projections);
    it must return what `trim_one` below does. None: computed here, skipping the tool-name
    lookup for results that fit (the hot path on long histories)."""
    config = ctx.config.tool_results
    head_ratio, pinned, count, recall_tool = config.head_ratio, ctx.pinned, ctx.count, ctx.recall_tool
    exclude = config.exclude_tools if exclude is None else exclude
    entries: list[TrimEntry] = []
    messages: list[Message] | None = None
    counts: list[int] | None = None
    for position, (seq, message) in enumerate(zip(slot.seqs, slot.messages, strict=True)):
        if seq is None or message.get("role") != "tool" or seq in pinned:
            continue
        if trim_one is not None:
            tool_name, result, tokens = trim_one(slot, message, max_chars, head_ratio, seq, count, recall_tool)
            if result is None or tool_name in exclude:
                continue
        else:
            if len(content_text(message.get("content"))) <= max_chars:
                continue  # fits: skip the name lookup (hot path on long histories)
            tool_name = slot.group.tool_name(str(message.get("tool_call_id", "")))
            if tool_name in exclude:
                continue
            result = trim_message(
                message,
                max_chars=max_chars,
                head_ratio=head_ratio,
                tool_name=tool_name,
                seq=seq,
                recall_tool=recall_tool,
            )
            if result is None:
                continue
            tokens = count(result[0])
        trimmed, entry = result
        if messages is None or counts is None:
            messages, counts = list(slot.messages), list(slot.tokens)
        messages[position] = trimmed
        counts[position] = tokens
        entries.append(entry)
    if messages is None or counts is None:
        return slot, entries
    return replace(slot, messages=tuple(messages), tokens=tuple(counts)), entries


def trim_one(
    slot: Slot, message: Message, max_chars: int, head_ratio: float, seq: int, count: CountFn, recall_tool: str | None
) -> tuple[str, tuple[dict[str, object], TrimEntry] | None, int]:
    """(tool name, `trim_message` result, tokens of the trimmed message) of one tool result of
    `slot` (a `TrimOne`); ("", None, 0) when it fits."""
    if len(content_text(message.get("content"))) <= max_chars:
        return "", None, 0
    tool_name = slot.group.tool_name(str(message.get("tool_call_id", "")))
    result = trim_message(
        message, max_chars=max_chars, head_ratio=head_ratio, tool_name=tool_name, seq=seq, recall_tool=recall_tool
    )
    return tool_name, result, count(result[0]) if result is not None else 0


def trim_slots(slots: Sequence[Slot], boundary: int, ctx: StepContext) -> tuple[tuple[Slot, ...], list[TrimEntry]]:
    """`slots` with the results of tool-call groups capped: old ones (index below `boundary`)
    at `old_max_chars`, the rest at `recent_max_chars`; protected slots untouched."""
    config = ctx.config.tool_results
    renderer = ctx.renderer if ctx.renderer is not None else PLAIN
    out: list[Slot] = []
    entries: list[TrimEntry] = []
    for slot in slots:
        if slot.protected or slot.group.kind != "tool_call":  # only tool_call groups hold results
            out.append(slot)
            continue
        max_chars = config.old_max_chars if slot.index < boundary else config.recent_max_chars
        new_slot, new_entries = renderer.trimmed_slot(slot, max_chars, ctx, cap_slot)
        out.append(new_slot)
        entries.extend(new_entries)
    return tuple(out), entries


def trim_tool_results(draft: Draft, ctx: StepContext) -> Draft:
    """Pipeline step: trim old results to `old_max_chars`, cap recent ones at `recent_max_chars`.
    A request that has no checkpoint applied and fits as sent (`pass_through_tokens`) goes
    unchanged."""
    if ctx.covered_through <= 0 and draft.total <= ctx.pass_through_tokens:
        return draft
    return trimmed(draft, ctx)


def trimmed(draft: Draft, ctx: StepContext) -> Draft:
    """`draft` with its tool results trimmed, whether or not it would go as sent."""
    boundary = trim_boundary(len(ctx.groups), ctx.config.tool_results, ctx.budget.sizing)
    head, head_entries = trim_slots(draft.head, boundary, ctx)
    tail, tail_entries = trim_slots(draft.tail, boundary, ctx)
    trimmed = draft.trimmed + tuple(head_entries) + tuple(tail_entries)
    previous = previous_boundary(boundary, ctx.config.tool_results, ctx.budget.sizing)
    return replace(draft, head=head, tail=tail, trimmed=trimmed, old_groups=boundary, previous_old_groups=previous)
