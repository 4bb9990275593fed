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

Invariants: the prefix is first and unchanged; the newest user message and the in-flight group
are verbatim; the result is deterministic (same inputs -> byte-identical `json.dumps`), the
input is never mutated, and `messages` are fresh dicts.

Example: prefix [system], items 1..40, checkpoint covering through 30, pins = first user (1):
-> [system, user(1), summary(e30), groups 31..40 with old tool results trimmed].
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

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
from policies.draft import CountFn, Draft, Slot, StepContext
from policies.groups import effective_boundary, group_items, last_index, render_group
from policies.pins import latest_user_seq, pinned_seqs
from policies.prune_groups import prune_groups
from policies.summary_prompt import summary_block
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
) -> tuple[Draft, StepContext]:
    """Groups, pins and the checkpoint applied; no step run yet."""
    groups = group_items(items)
    pinned = pinned_seqs(items, config.pins)
    latest_user = latest_user_seq(items)
    keep_seqs = pinned | ({latest_user} if latest_user is not None else set())
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
    )
    head: list[Slot] = []
    tail: list[Slot] = []
    last = last_index(groups)
    for index, group in enumerate(groups):
        is_last = index == last
        keep = is_last or any(seq in keep_seqs for seq in group.seqs)
        is_covered = group.last_seq <= covered
        if group.kind == "orphan" or (is_covered and not keep):
            continue
        rendered = render_group(group, is_last=is_last)
        tokens = {item.seq: item.tokens for item in group.items}
        slot = Slot(
            index=index,
            group=group,
            seqs=tuple(seq for seq, _ in rendered),
            messages=tuple(message for _, message in rendered),
            tokens=tuple(count(m) if seq is None else tokens[seq] for seq, m in rendered),
            keep=keep,
            protected=is_last or (latest_user is not None and latest_user in group.seqs),
        )
        (head if is_covered else tail).append(slot)
    summary: tuple[Message, ...] = ()
    if checkpoint is not None and covered > 0:
        summary = (summary_block(checkpoint.summary, covered),)
    draft = Draft(
        prefix=tuple(prefix),
        prefix_tokens=sum(count(message) for message in prefix),
        fixed_tokens=budget.fixed_tokens,
        head=tuple(head),
        summary=summary,
        summary_tokens=sum(count(message) for message in summary),
        tail=tuple(tail),
    )
    return draft, ctx


def make_record(draft: Draft, ctx: StepContext) -> ProjectionRecord:
    """The projection record of a finished draft."""
    by_seq: dict[int, TrimEntry] = {entry.seq: entry for entry in draft.trimmed}
    sent = set(draft.sent_seqs())
    covered = ctx.covered_through
    orphans = tuple(
        item.seq
        for group in ctx.groups
        if group.kind == "orphan" and group.first_seq > covered
        for item in group.items
    )
    repaired = tuple(
        (slot.group.first_seq, str(message.get("tool_call_id")))
        for slot in draft.slots
        for seq, message in zip(slot.seqs, slot.messages, strict=True)
        if seq is None
    )
    pinned_sent = tuple(seq for seq in sorted(sent) if seq <= covered)
    client = ctx.budget.fixed_tokens + draft.prefix_tokens + sum(item.tokens for item in ctx.items)
    return ProjectionRecord(
        client_tokens=client,
        sent_tokens=draft.total,
        checkpoint_generation=ctx.checkpoint.generation if ctx.checkpoint and covered else None,
        covered_through_seq=covered,
        trimmed=tuple(by_seq[seq] for seq in sorted(by_seq) if seq in sent),
        pruned_seqs=draft.pruned_seqs,
        over_trigger=draft.over_trigger or draft.total > ctx.trigger_tokens,
        compaction=draft.plan,
        sent_seqs=tuple(sorted(sent)),
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
) -> Projection:
    """The messages to send for this call and the record of how they were chosen.

    Raises `ContextOverflow` when even the irreducible request does not fit."""
    draft, ctx = build_draft(prefix, items, checkpoint, budget, config, count)
    for name in config.order:
        draft = STEPS[name](draft, ctx)
    if draft.total > budget.input_budget:  # unreachable while prune_groups ends the order
        raise ContextOverflow(
            draft.total, budget.input_budget, budget.context_window, budget.max_output_tokens
        )
    return Projection(messages=draft.messages(), record=make_record(draft, ctx))
