"""Shrink tool results the model has already acted on; keep the recent ones nearly whole.

Problem: tool output (file dumps, logs, test runs) is most of an agent's context and mostly stale
a few turns later. Seed 002 keeps 8,000 chars for the last turns and 400 for older ones.

Rules (ToolResultsConfig):
- groups older than the most recent `keep_recent_groups` are "old": each tool result longer than
  `old_max_chars` is shortened to about that; the rest are "recent": capped at `recent_max_chars`;
- lossless first (`trim_result`): a result identical to a later one (old or recent, whatever
  its size past `REPEAT_MIN_CHARS`) becomes a marker naming that event, one that is the same call
  as a later one a few lines apart becomes the line delta against it (`policies.repeats`); the
  newest of them, and the protected groups, stay whole; then by content: test output keeps its
  failures, a log its errors, JSON its structure, a diff its headers and changed lines
  (`policies.shaping`); text of no kind is cut head + tail;
- text a later tool call quotes verbatim (an edit's `old_string`) is never left out of the newest
  result holding it (`policies.later`);
- per-tool rules (`rules`, `policies.tool_rules`): `keep`, `trim` (head + tail), `type-aware`,
  their own cap (`max_chars`), only the newest `keep_last_n` results kept as recent;
- results of `exclude_tools`, pinned messages, the newest user turn and the in-flight last
  group are never touched;
- the marker says what happened and where to get the rest:
  `[trimmed: tool result of bash, 48,210 chars; first 200 and last 200 kept; event 57]`, and
  when the request offers the recall tool, that it can fetch it:
  `[trimmed: tool result of bash, 48,210 chars; first 200 and last 200 kept; event 57;
  ctxproxy_recall can fetch it]`.

Pass-through: while no checkpoint applies and the request as the client sent it fits the input
budget (`late_trim`, default the whole of it; never below the trigger), nothing is trimmed -- the
request goes as sent, so its prompt-cache hits are the client's own (trimming it would save
tokens yet rewrite a cached prefix, which costs more). A conversation only grows, so once it
crosses that line it stays trimmed.

Invariant (cache-friendly prefix, DESIGN 11): the old/recent boundary is counted in groups over
the WHOLE branch history (covered groups included), then rounded down to a multiple of
`clear_at_least`. Appending a group moves it only every `clear_at_least` groups, so consecutive
turns produce byte-identical prefixes in between and upstream prompt caches keep hitting. What a
result's rendering reads of later groups (repeats, quotes, newer results of its tool) ends at its
horizon (`context_horizon`): the groups the history held when the boundary last moved, never
past the one that made it old, so an old result's bytes never change again and a recent one's
change only when the boundary moves.

Small windows: at most one recent group per `RECENT_GROUP_TOKENS` of input budget, so a
16k-window model keeps one recent group whole, not four: four recent results of 8,000 chars
would fill the room between the compaction's landing point and its trigger, and the proxy would
compact on nearly every request (each a summarizer call and a rewritten prefix). A 32k window
keeps two (seed 002's "last two turns"): the recent groups follow the boundary, so each of its
moves writes them to the prompt cache again (Anthropic bills a cache write at 1.25x input, a
read at 0.1x), and a third whole result there cost more in those writes and in earlier
compactions than it saved. From a 48k input budget on, the configured values apply.

The quantum stays `clear_at_least` however few groups are kept whole, down to two: a move
costs a cache write of everything after the boundary, and the results left whole a little
longer in between cost only cache reads (at 32k, Claude's replayed bill 0.447 -> 0.439 of the
client's in `summarizer.mode: shared`, its last run dearer than without ctxproxy 1.001 ->
0.996). Where one group is kept whole (16k) the boundary moves every group: there the results
waiting to be trimmed fill the little room left and bring the next compaction closer (a
quantum of 2 there: 0.504 -> 0.547).

Example: keep_recent_groups=4, clear_at_least=4 (a 128k window): with 10 groups the raw boundary is 6, trimmed
boundary 4 (groups 0-3 old); with 11 groups still 4; with 12 groups 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from policies.base import Message
from policies.config import ToolResultsConfig
from policies.draft import PLAIN, CountFn, Draft, ShapeOne, Slot, StepContext
from policies.groups import Group
from policies.later import Later, call_of
from policies.outcome import TrimEntry
from policies.text import content_text
from policies.tool_rules import floor_cap, treatment
from policies.trim_result import Shaping, Trimmed, recall_hint, shape_message, trim_marker, trim_message

__all__ = [
    "RECENT_GROUP_TOKENS",
    "REPEAT_MIN_CHARS",
    "cap_slot",
    "context_horizon",
    "first_reader",
    "previous_boundary",
    "recall_hint",
    "recent_groups",
    "shape_one",
    "shape_slot",
    "trim_boundary",
    "trim_marker",
    "trim_message",
    "trim_slots",
    "trim_tool_results",
    "trimmed",
]

RECENT_GROUP_TOKENS = 12000
"""input budget per recent group: a 16k window keeps one recent group, 32k two, 64k and up four"""
REPEAT_MIN_CHARS = 200
"""a result this short is not worth a repeat marker (one is 120-170 characters)"""


def recent_groups(config: ToolResultsConfig, input_budget: int | None = None) -> tuple[int, int]:
    """(recent groups kept, quantum of the boundary) for a model's input budget (None: as
    configured): the quantum is `clear_at_least`, or 1 where at most one group is kept whole."""
    keep = config.keep_recent_groups
    if input_budget is not None:
        keep = min(keep, input_budget // RECENT_GROUP_TOKENS)
    return keep, config.clear_at_least if keep >= 2 else 1


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


def context_horizon(index: int, boundary: int, config: ToolResultsConfig, input_budget: int | None = None) -> int:
    """The end (exclusive) of the groups the result of group `index` may read (repeats, quotes,
    newer results of its tool), for the trim `boundary`: the groups the history held when the
    boundary moved to where it stands, or, for an old group, to where it first passed it. Every
    group before it is whole (never the in-flight last one) and stays what it is as the history
    grows, so the rendering of an old result never changes, and that of a recent one only when
    the boundary moves."""
    keep, quantum = recent_groups(config, input_budget)
    passed = (index // quantum + 1) * quantum  # the boundary that makes `index` old
    end = min(passed, boundary)
    return end + max(1, keep) - 1 if end > 0 else 0  # a boundary at 0 stands from the first group on


def first_reader(group: int, boundary: int, config: ToolResultsConfig, input_budget: int | None = None) -> int:
    """The first group whose results read group `group` or a later one (its `context_horizon`
    lies past `group`); `group` itself when no earlier one does. A memo that knows groups from
    `group` on changed re-renders from here."""
    first = group
    while first > 0 and context_horizon(first - 1, boundary, config, input_budget) > group:
        first -= 1
    return first


def cap_slot(
    slot: Slot, max_chars: int, ctx: StepContext, *, exclude: tuple[str, ...] | None = None
) -> tuple[Slot, list[TrimEntry]]:
    """Cap every eligible tool result of `slot` at `max_chars` head + tail (pinned ones and those
    of the `exclude` tools untouched; default: the policy's `exclude_tools`), with markers naming
    the recall tool the request offers: the last resort of `prune_groups`, blind to content."""
    config = ctx.config.tool_results
    exclude = config.exclude_tools if exclude is None else exclude
    entries: list[TrimEntry] = []
    out = slot
    for position, (seq, message) in enumerate(zip(slot.seqs, slot.messages, strict=True)):
        if seq is None or message.get("role") != "tool" or seq in ctx.pinned:
            continue
        if len(content_text(message.get("content"))) <= max_chars:
            continue  # fits: skip the name lookup (hot path on long histories)
        tool_name = slot.group.tool_name(str(message.get("tool_call_id", "")))
        if tool_name in exclude:
            continue
        result = trim_message(
            message,
            max_chars=max_chars,
            head_ratio=config.head_ratio,
            tool_name=tool_name,
            seq=seq,
            recall_tool=ctx.recall_tool,
        )
        if result is None:
            continue
        out = out.with_message(position, result[0], ctx.count(result[0]))
        entries.append(result[1])
    return out, entries


def shape_one(message: Message, spec: Shaping, count: CountFn) -> tuple[Trimmed | None, int]:
    """(`trim_result.shape_message` of the result, tokens of the trimmed message) (a `ShapeOne`)."""
    result = shape_message(message, spec)
    return result, count(result[0]) if result is not None else 0


def shape_slot(
    slot: Slot, old: bool, later: Sequence[Group], ctx: StepContext, shape: ShapeOne | None = None
) -> tuple[Slot, list[TrimEntry]]:
    """Trim the eligible tool results of `slot` (a group below the boundary when `old`), reading
    `later` (the groups after it up to its `context_horizon`) for repeats, quotes and newer
    results of the same tool (a `ShapeSlot`: what a `Renderer` trims with).

    `shape`: how one result's trimmed form is found (e.g. remembered between projections); it
    must return what `shape_one` does."""
    config = ctx.config.tool_results
    floor = min(floor_cap(config, old), REPEAT_MIN_CHARS)
    shape = shape_one if shape is None else shape
    entries: list[TrimEntry] = []
    out = slot
    reader: Later | None = None
    for position, (seq, message) in enumerate(zip(slot.seqs, slot.messages, strict=True)):
        if seq is None or message.get("role") != "tool" or seq in ctx.pinned:
            continue
        text = content_text(message.get("content"))
        if len(text) <= floor:
            continue  # fits whatever its tool and too short to repeat: no lookup (the hot path)
        tool, arguments = call_of(slot.group, str(message.get("tool_call_id", "")))
        how = treatment(config, tool)
        if how.action == "keep":
            continue
        if reader is None:
            reader = Later(later)
        as_old = old
        if how.keep_last_n is not None:
            as_old = reader.count(tool) >= how.keep_last_n  # superseded: old; else kept as recent
        cap = how.old_cap if as_old else how.recent_cap
        repeats = how.action == "type-aware" and len(text) > REPEAT_MIN_CHARS
        if len(text) <= cap and not repeats:
            continue
        after = [content_text(m.get("content")) for m in slot.messages[position + 1 :] if m.get("role") == "tool"]
        quotes = reader.quotes(text, after)
        twin = near = None
        if repeats:
            twin = None if quotes else reader.twin(text)  # a quoted result keeps its own bytes
            near = None if twin is not None else reader.near(tool, arguments, text)
        if len(text) <= cap and twin is None and near is None:
            continue
        spec = Shaping(
            seq=seq,
            tool=tool,
            arguments=arguments,
            max_chars=cap,
            action=how.action,
            head_ratio=config.head_ratio,
            recall_tool=ctx.recall_tool,
            twin=twin,
            near=near.seq if near is not None else None,
            reference=near.text if near is not None else None,
            quotes=quotes,
        )
        result, tokens = shape(message, spec, ctx.count)
        if result is None:
            continue
        out = out.with_message(position, result[0], tokens)
        entries.append(result[1])
    return out, entries


def trim_slots(slots: Sequence[Slot], boundary: int, ctx: StepContext) -> tuple[tuple[Slot, ...], list[TrimEntry]]:
    """`slots` with the results of tool-call groups trimmed: old ones (index below `boundary`)
    to `old_max_chars`, the rest capped at `recent_max_chars` (per-tool rules aside), each
    reading the groups up to its `context_horizon`; protected slots untouched."""
    config = ctx.config.tool_results
    renderer = ctx.renderer if ctx.renderer is not None else PLAIN
    keep, quantum = recent_groups(config, ctx.budget.sizing)
    span = max(1, keep) - 1
    groups = ctx.groups
    out: list[Slot] = []
    entries: list[TrimEntry] = []
    for slot in slots:
        if slot.protected or slot.group.kind != "tool_call":  # only tool_call groups hold results
            out.append(slot)
            continue
        index = slot.index
        end = min((index // quantum + 1) * quantum, boundary)  # `context_horizon`, inlined
        later = tuple(groups[index + 1 : end + span]) if end > 0 else ()
        new_slot, new_entries = renderer.trimmed_slot(slot, index < boundary, later, ctx, shape_slot)
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
