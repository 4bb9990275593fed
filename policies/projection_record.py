"""The projection record: what a projection did, made in one place.

Problem: the record (`ProjectionRecord`) is derived from what is sent plus the call's context —
the checkpoint boundary, the budget, the history's size and orphans. Both ways of computing a
projection (the pipeline over a `Draft`, and a memo that reassembles the previous call's
rendering) must produce the very same record, so the derivation lives here once:
`projection_record` takes what was sent, `make_record` reads that off a finished draft.

Invariant: seqs sent are ascending; head seqs (covered groups kept verbatim) are all <= the
boundary and tail seqs above it, so the pinned part is a prefix of `sent_seqs` (one bisection).

Example: boundary 30, sent (1, 31, 32, 33) -> pinned_seqs (1,), checkpoint generation set.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import attrgetter, is_not

from policies.draft import Draft, Slot, StepContext
from policies.history_index import index_items
from policies.outcome import ProjectionRecord, TrimEntry

_SEQS = attrgetter("seqs")
_NOT_NONE = partial(is_not, None)


@dataclass(frozen=True)
class Sent:
    """What a projection sends, as its record states it: the prefix's and the whole request's
    tokens, the item seqs sent (ascending; `ranges`: them as inclusive ranges, when the caller
    has them), the results trimmed and the calls repaired."""

    prefix_tokens: int
    tokens: int
    seqs: tuple[int, ...]
    trimmed: tuple[TrimEntry, ...]
    repaired: tuple[tuple[int, str], ...]
    ranges: tuple[tuple[int, int], ...] | None = None


def projection_record(ctx: StepContext, sent: Sent, draft: Draft | None = None) -> ProjectionRecord:
    """The record of a projection that sent `sent`; `draft`: the finished draft when the steps
    ran (what they pruned, planned, cut or marked rewritten), None when nothing but trimming
    changed it (the memo's fast path)."""
    index = ctx.index if ctx.index is not None else index_items(ctx.items)
    covered = ctx.covered_through
    budget = ctx.budget
    orphans = index.orphan_seqs
    trigger = ctx.trigger_tokens
    dropped = tuple(orphans[bisect_right(orphans, covered) :])
    pruned = draft.pruned_seqs if draft is not None else ()
    cut_to_fit = draft.cut_to_fit if draft is not None else ()
    marked = draft.rewritten if draft is not None else False
    rewritten = marked or bool(covered or sent.trimmed or pruned or dropped or sent.repaired or cut_to_fit)
    seqs = sent.seqs
    return ProjectionRecord(
        client_tokens=budget.fixed_tokens + sent.prefix_tokens + index.total_tokens,
        sent_tokens=sent.tokens,
        checkpoint_generation=ctx.checkpoint.generation if ctx.checkpoint and covered else None,
        covered_through_seq=covered,
        trimmed=sent.trimmed,
        pruned_seqs=pruned,
        over_trigger=(draft is not None and draft.over_trigger) or sent.tokens > trigger,
        compaction=draft.plan if draft is not None else None,
        sent_seqs=seqs,
        pinned_seqs=seqs[: bisect_right(seqs, covered)],
        orphan_seqs=dropped,
        repaired=sent.repaired,
        input_budget=budget.input_budget,
        trigger_tokens=trigger,
        sent_ranges=(seqs, sent.ranges) if sent.ranges is not None else None,
        cut_to_fit=cut_to_fit,
        released_pins=ctx.released,
        deferred_generation=ctx.deferred.generation if ctx.deferred is not None else None,
        rewritten=rewritten,
    )


def make_record(draft: Draft, ctx: StepContext) -> ProjectionRecord:
    """The projection record of a finished draft."""
    slots = draft.slots
    sent = tuple(sorted(filter(_NOT_NONE, chain.from_iterable(map(_SEQS, slots)))))
    trimmed: tuple[TrimEntry, ...] = ()
    if draft.trimmed:
        by_seq: dict[int, TrimEntry] = {entry.seq: entry for entry in draft.trimmed}
        sent_set = set(sent)
        trimmed = tuple(by_seq[seq] for seq in sorted(by_seq) if seq in sent_set)
    return projection_record(ctx, Sent(draft.prefix_tokens, draft.total, sent, trimmed, repaired_calls(slots)), draft)


def repaired_calls(slots: Sequence[Slot]) -> tuple[tuple[int, str], ...]:
    """(assistant seq, tool_call_id) of each synthetic result in `slots`, in order."""
    return tuple(
        (slot.group.first_seq, str(message.get("tool_call_id")))
        for slot in slots
        if slot.seqs and slot.seqs[-1] is None  # repairs follow the recorded results
        for seq, message in zip(slot.seqs, slot.messages, strict=True)
        if seq is None
    )
