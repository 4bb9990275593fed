"""Applying a compaction plan: rolling summaries folded into the next checkpoint. Pure, no I/O.

Problem: a `CompactionPlan` (from `summary_tail`) lists chunks of history; each is summarized
with the previous summary (rolling), and the last summary becomes a checkpoint covering
through `plan.through_seq`. The proxy's background job, the offline replay and the tests all
do this; the rule for the resulting checkpoint lives here once.

Invariant: the new checkpoint's generation is the previous one's plus one (1 for the first);
its `tokens` are those of the summary block as the projection will send it, counted with the
caller's `count` (the same framing as `Item.tokens`).

Example::

    summary = fold_summaries(plan, previous.summary if previous else None, summarize)
    checkpoint = next_checkpoint(previous, plan, summary, counter)   # generation + 1
"""

from __future__ import annotations

from collections.abc import Callable

from policies.base import Checkpoint, Item, Message
from policies.outcome import CompactionPlan
from policies.summary_prompt import checkpoint_block

Summarize = Callable[[str | None, tuple[Item, ...]], str]
"""(previous summary or None, chunk) -> the summary of everything so far"""


def fold_summaries(plan: CompactionPlan, previous: str | None, summarize: Summarize) -> str:
    """The rolling summary of the plan's chunks, starting from `previous`."""
    summary = previous
    for chunk in plan.chunks:
        summary = summarize(summary, chunk)
    if summary is None:
        raise ValueError("a compaction plan needs at least one chunk")
    return summary


def next_checkpoint(
    previous: Checkpoint | None,
    plan: CompactionPlan,
    summary: str,
    count: Callable[[Message], int],
    through: int | None = None,
    native: tuple[Message, ...] = (),
) -> Checkpoint:
    """The checkpoint `summary` makes once `plan` is applied on top of `previous`; `through`: the
    last event it covers when fewer chunks than planned were summarized (default the plan's);
    `native`: the provider's own compaction, standing before the summary block (`summary` then
    empty, or what was summarized after it)."""
    covered = plan.through_seq if through is None else through
    block = checkpoint_block(summary, covered, native=native)
    return Checkpoint(
        generation=(previous.generation if previous is not None else 0) + 1,
        covered_through_seq=covered,
        summary=summary,
        tokens=sum(count(message) for message in block),
        native=native,
    )
