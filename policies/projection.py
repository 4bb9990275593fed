"""project(): the messages actually sent upstream, as a pure function of the stored branch.

Problem: the raw history is the truth; what the model sees must be bounded, protocol-valid,
cache-friendly and explainable. This module only orchestrates; each rule lives in its module.

Steps (DESIGN "project"):
1. groups — `groups.group_items`; pins — `pins.pinned_seqs` (+ the newest user message);
2. checkpoint — covered groups are dropped except kept ones (pinned / newest user message),
   which move to the head, right after the prefix; the summary block follows them. A boundary
   inside a group is lowered to the group's start (`groups.effective_boundary`): a group is
   never split, and the last group is never covered;
3. the configured steps, `PolicyConfig.order` (default `trim_tool_results`, `summary_tail`,
   `prune_groups`); `summary_tail` only plans (`ProjectionRecord.compaction`), it never rewrites;
4. record — what was sent, trimmed, pruned, dropped (orphans), repaired.

`count(message)` must return the tokens of a (possibly rewritten) message with the same framing
as `Item.tokens`; it is called only for messages a policy produced (trimmed results, synthetic
results, the summary block, the prefix), untouched items use `item.tokens`. Pass a
`tokens.TokenCounter` so those counts are cached across turns.

Cost: proportional to what is sent, plus one pass over the items (grouping, tokens, users).
Covered groups are skipped by bisection, not visited. With `cache=ProjectionCache()` (one per
branch, kept by the caller) the pass only reads what follows the previous call's stable point,
and slots, trimmed results and the summary block of unchanged inputs are reused — provided the
caller passes the same `Item` objects again (checked by identity, never by equality). When no
step would rewrite the draft (under the trigger, within the budget: the common case), the
result is assembled from the previous call's rendering plus the groups that are new or whose
rendering may have changed (`policies.incremental`): Python work proportional to the new
turn, plus C-level copies of the outgoing lists.

Invariants: the prefix is first and unchanged; the newest user message and the in-flight group
are verbatim; the result is deterministic (same inputs -> byte-identical `json.dumps`, with or
without a cache), the input is never mutated. `messages` are read-only: untouched messages are
the caller's own objects and rewritten ones may be shared between projections; serialize them,
do not mutate them.

Example: prefix [system], items 1..40, checkpoint covering through 30, pins = first user (1):
-> [system, user(1), summary(e30), groups 31..40 with old tool results trimmed].
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from itertools import chain
from operator import attrgetter, is_not

from policies.base import (
    Budget,
    Checkpoint,
    ContextOverflow,
    Item,
    Message,
    PolicyConfig,
    Projection,
    ProjectionRecord,
    TrimEntry,
)
from policies.draft import CountFn, Draft, StepContext, cached_slot, render_slot
from policies.groups import effective_boundary, last_index
from policies.incremental import project_incremental, summary_for
from policies.index import HistoryIndex, ProjectionCache, index_items
from policies.prune_groups import prune_groups
from policies.summary_tail import plan_compaction
from policies.trim_tool_results import trim_tool_results

Step = Callable[[Draft, StepContext], Draft]


def summary_tail(draft: Draft, ctx: StepContext) -> Draft:
    """Pipeline step: flag the trigger and plan the next compaction (messages unchanged)."""
    over = draft.total > ctx.trigger_tokens
    if not over:
        return draft
    sent: dict[int, int] = {}
    for slot in draft.tail:
        for seq, tokens in zip(slot.seqs, slot.tokens, strict=True):
            if seq is not None:
                sent[seq] = tokens
    tail_tokens = sum(slot.total for slot in draft.tail)
    plan = plan_compaction(
        ctx.items,
        ctx.checkpoint,
        ctx.budget,
        ctx.config,
        projected_tokens=draft.total,
        overhead_tokens=draft.total - tail_tokens,
        count=ctx.count,
        sent_tokens=sent,
        groups=ctx.groups,
        pinned=ctx.pinned,
        pinned_tokens=ctx.index.tokens_of(ctx.pinned) if ctx.index is not None else None,
    )
    return replace(draft, over_trigger=True, plan=plan)


STEPS: Mapping[str, Step] = {
    "trim_tool_results": trim_tool_results,
    "summary_tail": summary_tail,
    "prune_groups": prune_groups,
}
"""Registered pipeline steps; every one of them is run through the invariant checkers."""


def build_draft(
    prefix: Sequence[Message],
    items: Sequence[Item],
    checkpoint: Checkpoint | None,
    budget: Budget,
    config: PolicyConfig,
    count: CountFn,
    cache: ProjectionCache | None = None,
    *,
    index: HistoryIndex | None = None,
) -> tuple[Draft, StepContext]:
    """Groups, pins and the checkpoint applied; no step run yet.

    Work is proportional to what is sent (plus one index pass over what `cache` has not seen):
    covered groups are skipped by bisection, only the kept ones (pinned, newest user message)
    are looked up. `index`: this call's index of `items` when the caller already has it."""
    if index is None:
        index = cache.index(items) if cache is not None else index_items(items)
    groups = index.groups
    pinned = index.pinned(config.pins)
    latest_user = index.last_user
    covered = effective_boundary(groups, checkpoint)
    ctx = StepContext(
        items=items,
        groups=groups,
        checkpoint=checkpoint,
        budget=budget,
        config=config,
        count=count,
        pinned=pinned,
        latest_user=latest_user,
        covered_through=covered,
        index=index,
        cache=cache,
    )
    last = last_index(groups)
    latest_group = index.group_of(latest_user) if latest_user is not None else -1
    keep_groups = {index.group_of(seq) for seq in pinned}
    keep_groups.add(latest_group)
    keep_groups.add(last)
    first_uncovered = index.first_uncovered(covered)  # groups before it are covered
    head = [
        _slot(i, groups[i], i == last, True, i == last or i == latest_group, count)
        for i in sorted(keep_groups)
        if 0 <= i < first_uncovered and groups[i].kind != "orphan"
    ]
    if cache is None:
        tail = [
            _slot(i, group, i == last, i in keep_groups, i == last or i == latest_group, count)
            for i, group in enumerate(groups[first_uncovered:], first_uncovered)
            if group.kind != "orphan"
        ]
    else:
        tail = [
            _cached_slot(cache, i, group, i == last, i in keep_groups, i == last or i == latest_group, count)
            for i, group in enumerate(groups[first_uncovered:], first_uncovered)
            if group.kind != "orphan"
        ]
    summary: tuple[Message, ...] = ()
    summary_tokens = 0
    if checkpoint is not None and covered > 0:
        summary, summary_tokens = _summary(checkpoint.summary, covered, count, cache)
    draft = Draft(
        prefix=tuple(prefix),
        prefix_tokens=sum(count(message) for message in prefix),
        fixed_tokens=budget.fixed_tokens,
        head=tuple(head),
        summary=summary,
        summary_tokens=summary_tokens,
        tail=tuple(tail),
    )
    return draft, ctx


_summary = summary_for
_SEQS = attrgetter("seqs")
_NOT_NONE = partial(is_not, None)
_slot = render_slot
_cached_slot = cached_slot


def make_record(draft: Draft, ctx: StepContext) -> ProjectionRecord:
    """The projection record of a finished draft."""
    index = ctx.index if ctx.index is not None else index_items(ctx.items)
    covered = ctx.covered_through
    slots = draft.slots
    sent = sorted(filter(_NOT_NONE, chain.from_iterable(map(_SEQS, slots))))
    trimmed: tuple[TrimEntry, ...] = ()
    if draft.trimmed:
        by_seq: dict[int, TrimEntry] = {entry.seq: entry for entry in draft.trimmed}
        sent_set = set(sent)
        trimmed = tuple(by_seq[seq] for seq in sorted(by_seq) if seq in sent_set)
    orphans = tuple(index.orphan_seqs[bisect_right(index.orphan_seqs, covered) :])
    repaired = tuple(
        (slot.group.first_seq, str(message.get("tool_call_id")))
        for slot in slots
        if slot.seqs and slot.seqs[-1] is None  # repairs follow the recorded results
        for seq, message in zip(slot.seqs, slot.messages, strict=True)
        if seq is None
    )
    pinned_sent = tuple(sent[: bisect_right(sent, covered)])
    client = ctx.budget.fixed_tokens + draft.prefix_tokens + index.total_tokens
    return ProjectionRecord(
        client_tokens=client,
        sent_tokens=draft.total,
        checkpoint_generation=ctx.checkpoint.generation if ctx.checkpoint and covered else None,
        covered_through_seq=covered,
        trimmed=trimmed,
        pruned_seqs=draft.pruned_seqs,
        over_trigger=draft.over_trigger or draft.total > ctx.trigger_tokens,
        compaction=draft.plan,
        sent_seqs=tuple(sent),
        pinned_seqs=pinned_sent,
        orphan_seqs=orphans,
        repaired=repaired,
        input_budget=ctx.budget.input_budget,
        trigger_tokens=ctx.trigger_tokens,
    )


def project(
    prefix: Sequence[Message],
    items: Sequence[Item],
    checkpoint: Checkpoint | None,
    budget: Budget,
    config: PolicyConfig,
    count: CountFn,
    cache: ProjectionCache | None = None,
) -> Projection:
    """The messages to send for this call and the record of how they were chosen.

    `cache`: optional memo owned by the caller (one per branch), see `index.ProjectionCache`;
    the result is the same with or without it.

    Raises `ContextOverflow` when even the irreducible request does not fit."""
    index = None
    if cache is not None:
        index = cache.index(items)
        fast = project_incremental(prefix, items, index, checkpoint, budget, config, count, cache)
        if fast is not None:
            cache.incremental += 1
            return fast
    draft, ctx = build_draft(prefix, items, checkpoint, budget, config, count, cache, index=index)
    for name in config.order:
        draft = STEPS[name](draft, ctx)
    if draft.total > budget.input_budget:  # unreachable while prune_groups ends the order
        raise ContextOverflow(draft.total, budget.input_budget, budget.context_window, budget.max_output_tokens)
    return Projection(messages=draft.messages(), record=make_record(draft, ctx))
