"""The memoized projection: a request that adds a turn costs what the turn adds.

Problem: before the first compaction (history under the trigger) every group of the branch is
sent, so `build_draft`, trimming, `Draft.messages` and `make_record` each walked the whole
history on every request, so a request cost what the whole history did, though the previous
request had already rendered all but the newest turn exactly the same way.

`ProjectionCache.tail` (a `TailState`) keeps the previous call's rendered uncovered groups
("the tail", before pruning): per slot the messages sent (trimmed, repaired), their seqs, trim
entries, repairs, and running token totals, all as flat lists with per-slot end offsets so the
state can be cut after any slot in O(1) (`del` of what follows) and extended by new slots.

`project_incremental` reuses the state up to the first slot whose rendering may differ and
renders the rest. The reused slots are exactly what a fresh render would produce because:
- their groups are the very objects of the previous call: the `HistoryIndex` resumed from the
  index the state was built with (`index.base is state.serial`), so
  `groups[:state.stable_groups]` are shared, and the previous last group (whose `is_last`,
  protection and repairs change) is `groups[state.stable_groups]`, re-rendered;
- the covered boundary, `PolicyConfig` and `count` are the same (else: rebuilt from scratch);
- trimming of a slot depends on its side of the trim boundary: when the (quantized) boundary
  moves, slots from the lower of the two boundaries on are re-rendered; and on the groups up to
  its `context_horizon` (repeats, quotes): slots whose horizon reaches a group that may have
  changed are re-rendered too (`first_reader`; none while the history only grows);
- pins of the shared items cannot change (rules read the item only; the first user message
  is shared) unless pins are released (`pins.release_pins`; the state is rebuilt when the
  released seqs or the recall tool differ), and the only other flags that change —
  `keep`/`protected` of the previous newest user message's group — do not change what a
  `user` group renders to (it is never trimmed); flags only matter to `prune_groups`, which this path never runs.

The result is returned only when no step would change it: `summary_tail` sees a total at or
below the trigger (no plan) and `prune_groups` sees one within the input budget. Otherwise
`project_cached` runs the full pipeline (the state is still updated: it is valid for the next call).
The head (covered groups kept: pinned, newest user message) and the summary block are small and
recomputed each time. Output equals the full pipeline's byte for byte (property-tested in
`tests/policies/test_incremental.py`).

`project_cached` is the entry point: this fast path when it applies, else the core pipeline
(`policies.projection.run_steps`) over the cache's resumed index and its `MemoRenderer`.

Cost: O(new groups + re-rendered groups + head) Python work, plus C-level copies of the outgoing
message list and seq tuple and of the index's shared lists; the index's identity check of the
shared items is O(1) when the caller passes its `SharedPrefix` proof, else a C-level walk.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from policies.base import Message
from policies.draft import Inputs, Slot, build_draft, layout
from policies.history_index import HistoryIndex, SharedPrefix
from policies.memo.cache import ProjectionCache
from policies.memo.tail import NO_TRIM, TailState
from policies.outcome import Projection, TrimEntry
from policies.projection import run_steps
from policies.projection_record import Sent, projection_record
from policies.summary_tail import first_rewrite
from policies.text import clone
from policies.trim_tool_results import first_reader, previous_boundary, trim_boundary, trim_slots


def project_cached(cache: ProjectionCache, inputs: Inputs, shared: SharedPrefix | None = None) -> Projection:
    """`policies.projection.project` of `inputs`, byte for byte, doing only the work `cache` (this
    branch's, from its previous calls) has not done. `shared`, when the caller built the items
    from an earlier list, says so (`policies.history_index.SharedPrefix`): resuming then costs no walk
    over the shared items.

    Raises `ContextOverflow` when even the irreducible request does not fit."""
    index = cache.index(inputs.items, shared)
    fast = None
    if INCREMENTAL.issuperset(inputs.config.order):
        fast = project_incremental(inputs, index, cache)
    if fast is not None:
        cache.incremental += 1
        return fast
    return run_steps(*build_draft(inputs, index=index, renderer=cache.renderer))


INCREMENTAL = frozenset({"trim_tool_results", "summary_tail", "prune_groups"})
"""The steps the fast path reproduces (it knows what each does to a draft); a config that names
any other step is projected by the full pipeline, whatever the step does."""


def seq_ranges(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending unique seqs as inclusive ranges: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    out: list[tuple[int, int]] = []
    for seq in seqs:
        if out and out[-1][1] == seq - 1:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out


def project_incremental(inputs: Inputs, index: HistoryIndex, cache: ProjectionCache) -> Projection | None:
    """`project()`'s result from the cached tail, or None when a step would change the draft
    (then the caller runs the full pipeline). `index` is `cache.index(items)` of this call."""
    prefix, budget, config, count = inputs.prefix, inputs.budget, inputs.config, inputs.count
    recall_tool = inputs.recall_tool
    renderer = cache.renderer
    prefix_tokens = sum(count(message) for message in prefix)
    shape = layout(inputs, index, renderer, prefix_tokens)
    ctx, groups, covered = shape.ctx, index.groups, shape.ctx.covered_through
    checkpoint = ctx.checkpoint
    last, latest_group, keep_groups, first_uncovered = shape.last, shape.latest_group, shape.keep, shape.first_uncovered
    trimming = "trim_tool_results" in config.order
    head = tuple(
        renderer.slot(i, groups[i], i == last, True, i == last or i == latest_group, count)
        for i in sorted(keep_groups)
        if 0 <= i < first_uncovered and groups[i].kind != "orphan"
    )
    summary: tuple[Message, ...] = ()
    summary_tokens = 0
    if checkpoint is not None and covered > 0:
        summary, summary_tokens = renderer.summary(checkpoint.summary, covered, count, recall_tool, checkpoint.native)
    base = budget.fixed_tokens + prefix_tokens + summary_tokens
    trigger = ctx.trigger_tokens

    def render(start: int) -> list[tuple[int, int, Slot]]:
        return [
            (i, slot.total, slot)
            for i in range(start, len(groups))
            if groups[i].kind != "orphan"
            for slot in (
                renderer.slot(i, groups[i], i == last, i in keep_groups, i == last or i == latest_group, count),
            )
        ]

    state = cache.tail
    fresh = (
        state is None
        or state.serial is not index.base
        or state.covered != covered
        or not (state.count is count or state.count == count)
        or not (state.config is config or state.config == config)
        or state.recall_tool != recall_tool
        or state.released != ctx.released
    )
    keep, start = 0, first_uncovered
    if state is not None and not fresh:
        resume = state.stable_groups
        boundary = trim_boundary(len(groups), config.tool_results, budget.sizing) if state.trims else NO_TRIM
        if boundary != state.boundary and max(boundary, state.boundary) > first_uncovered:
            resume = min(resume, boundary, state.boundary)
        if state.trims:  # results that read the groups from `resume` on are rendered again
            resume = first_reader(resume, boundary, config.tool_results, budget.sizing)
        keep = bisect_left(state.slot_groups, resume)
        start = max(resume, first_uncovered)
    raw = render(start)
    raw_total = base + sum(slot.total for slot in head) + sum(total for _, total, _ in raw)
    raw_total += state.raw_ends[keep] if state is not None and not fresh else 0
    # `trim_tool_results`' pass-through: no checkpoint and under `pass_through_tokens` as sent
    passing = ctx.pass_through_tokens
    trims = trimming and not (covered <= 0 and raw_total <= passing)
    if state is None or fresh or state.trims != trims:
        if state is not None and not fresh and start > first_uncovered:
            raw = render(first_uncovered)
        state = TailState(covered=covered, config=config, count=count, recall_tool=recall_tool, released=ctx.released)
        keep = 0
    boundary = trim_boundary(len(groups), config.tool_results, budget.sizing) if trims else NO_TRIM
    if trims:
        sent_head, head_entries = trim_slots(head, boundary, ctx)
    else:
        sent_head, head_entries = head, []
    rendered: list[tuple[int, int, Slot, Sequence[TrimEntry]]] = []
    for i, total_raw, slot in raw:
        entries: Sequence[TrimEntry] = ()
        if trims:
            (slot,), entries = trim_slots((slot,), boundary, ctx)
        rendered.append((i, total_raw, slot, entries))
    # nothing below raises: the state always describes a whole call
    cache.rendered += len(rendered)
    state.truncate(keep)
    for i, raw_total, slot, entries in rendered:
        state.append(i, raw_total, slot, entries)
    state.serial = index.serial
    state.stable_groups = index.stable_groups
    state.boundary = boundary
    state.trims = trims
    cache.tail = state

    raw_total = base + sum(slot.total for slot in head) + state.raw_ends[-1]
    total = base + sum(slot.total for slot in sent_head) + state.tok_ends[-1]
    at, trimmed = raw_total, False
    for name in config.order:
        if name == "trim_tool_results":
            at, trimmed = total, trims and bool(head_entries or state.entries)
        elif name == "summary_tail" and first_rewrite(ctx, trimmed):
            return None  # the first rewrite: a compaction to plan, below the trigger too
        elif name == "summary_tail" and at > trigger and not (covered <= 0 and not trimmed and at <= passing):
            return None  # a compaction to plan (none while the request goes as sent)
        elif name == "prune_groups" and at > budget.input_budget:
            return None  # groups to drop

    messages: list[Any] = list(prefix)
    head_seqs: list[int] = []
    repaired: list[tuple[int, str]] = []
    for slot in sent_head:
        messages.extend(slot.messages)
        for seq, message in zip(slot.seqs, slot.messages, strict=True):
            if seq is None:
                repaired.append((slot.group.first_seq, str(message.get("tool_call_id"))))
            else:
                head_seqs.append(seq)
    messages.extend(summary)
    if any(type(message) is not dict for message in messages):
        messages = [message if type(message) is dict else clone(message) for message in messages]
    cache_point = _cache_point(state, len(messages), state.boundary)
    previous = previous_boundary(state.boundary, config.tool_results, budget.sizing)
    previous_point = _cache_point(state, len(messages), previous)
    messages += state.body
    sent_seqs = (*head_seqs, *state.sent)
    ranges = seq_ranges(head_seqs)
    tail_ranges = state.ranges
    if ranges and tail_ranges and ranges[-1][1] == tail_ranges[0][0] - 1:
        ranges[-1] = (ranges[-1][0], tail_ranges[0][1])
        ranges.extend(tail_ranges[1:])
    else:
        ranges.extend(tail_ranges)
    entries, repairs = (*head_entries, *state.entries), (*repaired, *state.repaired)
    record = projection_record(ctx, Sent(prefix_tokens, total, sent_seqs, entries, repairs, tuple(ranges)))
    return Projection(messages=messages, record=record, cache_point=cache_point, previous_point=previous_point)


def _cache_point(state: TailState, offset: int, boundary: int) -> int | None:
    """`Draft.cache_point` (or `previous_point`, for the previous boundary) of the state's
    slots, placed after `offset` messages."""
    if not state.trims:
        return None
    old_end = state.msg_ends[bisect_left(state.slot_groups, boundary)]
    last = bisect_left(state.tool_at, old_end)  # the last tool result before `old_end`, if any
    return offset + state.tool_at[last - 1] if last else None
