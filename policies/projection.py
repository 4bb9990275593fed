"""project(): the messages actually sent upstream, as a pure function of the stored branch.

This is the pure core of DESIGN step 4 ("project"). Its edge in the proxy is
`proxy.projector.Projector`, which turns a request and its stored rows into this function's
arguments (items, checkpoint, budget) and keeps the per-branch memo (`policies.memo`).

Problem: the raw history is the truth; what the model sees must be bounded, protocol-valid,
cache-friendly and explainable. This module only orchestrates; each rule lives in its module.

Steps (DESIGN "project"):
1. groups — `groups.group_items` (through `history.index_items`); pins — `pins.pinned_seqs`
   (+ the newest user message);
2. checkpoint — covered groups are dropped except kept ones (pinned / newest user message),
   which move to the head, right after the prefix; the summary block follows them. A boundary
   inside a group is lowered to the group's start (`groups.effective_boundary`): a group is
   never split, and the last group is never covered (`draft.build_draft` does 1 and 2);
3. the configured steps, `PolicyConfig.order` (default `trim_tool_results`, `summary_tail`,
   `prune_groups`); `summary_tail` only plans (`ProjectionRecord.compaction`), it never rewrites;
4. record — what was sent, trimmed, pruned, dropped (orphans), repaired (`record.make_record`).

`count(message)` must return the tokens of a (possibly rewritten) message with the same framing
as `Item.tokens`; it is called only for messages a policy produced (trimmed results, synthetic
results, the summary block, the prefix), untouched items use `item.tokens`. Pass a
counter that caches (the proxy's `TokenCounter`) so those counts are reused across turns.

Cost: proportional to what is sent, plus one pass over the items (grouping, tokens, users).
Covered groups are skipped by bisection, not visited. Memoization across calls is not this
module's business: `policies.memo.project_cached` wraps it (same result, byte for byte).

Invariants: the prefix is first and unchanged; the newest user message and the in-flight group
are verbatim; the result is deterministic (same inputs -> byte-identical `json.dumps`), the
input is never mutated. `messages` are read-only: untouched messages are the caller's own
objects and rewritten ones may be shared between projections; serialize them, do not mutate
them.

Example: prefix [system], items 1..40, checkpoint covering through 30, pins = first user (1):
-> [system, user(1), summary(e30), groups 31..40 with old tool results trimmed].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from policies.base import Budget, Checkpoint, ContextOverflow, Item, Message
from policies.config import PolicyConfig, SettingError
from policies.draft import CountFn, Draft, Inputs, StepContext, build_draft
from policies.outcome import Projection
from policies.projection_record import make_record
from policies.prune_groups import prune_groups
from policies.summary_tail import summary_tail
from policies.trim_tool_results import trim_tool_results

Step = Callable[[Draft, StepContext], Draft]

STEPS: dict[str, Step] = {
    "trim_tool_results": trim_tool_results,
    "summary_tail": summary_tail,
    "prune_groups": prune_groups,
}
"""The one registry of pipeline steps, by the name `PolicyConfig.order` gives them. A step added
here is run by `project`, put through the invariant checkers by the property tests, and computed
through this pipeline by the branch memo, which reproduces only the steps it lists
(`policies.memo.incremental.INCREMENTAL`). A step that changes what is sent marks the draft
`rewritten` (the proxy then sends the projection, not the client's bytes)."""


def check_order(order: Sequence[str]) -> None:
    """`order` names registered steps only (`SettingError` naming the others)."""
    unknown = [name for name in order if name not in STEPS]
    if unknown:
        raise SettingError("order", f"order: unknown steps {unknown}; known steps are {tuple(STEPS)}")


def run_steps(draft: Draft, ctx: StepContext) -> Projection:
    """Run the configured steps over a first draft (`draft.build_draft`) and record the result.

    Raises `ContextOverflow` when even the irreducible request does not fit."""
    check_order(ctx.config.order)
    for name in ctx.config.order:
        draft = STEPS[name](draft, ctx)
    budget = ctx.budget
    if draft.total > budget.input_budget:  # unreachable while prune_groups ends the order
        raise ContextOverflow(draft.total, budget.input_budget, budget.context_window, budget.max_output_tokens)
    return Projection(
        messages=draft.messages(),
        record=make_record(draft, ctx),
        cache_point=draft.cache_point(),
        previous_point=draft.previous_point(),
    )


def project(
    prefix: Sequence[Message],
    items: Sequence[Item],
    checkpoint: Checkpoint | None,
    budget: Budget,
    config: PolicyConfig,
    count: CountFn,
    *,
    recall_tool: str | None = None,
) -> Projection:
    """The messages to send for this call and the record of how they were chosen.
    `recall_tool`: the name of the recall tool the request offers (trim markers and the summary
    block then say it can fetch what they stand for); None when it is not offered.

    Raises `ContextOverflow` when even the irreducible request does not fit."""
    return run_steps(*build_draft(Inputs(prefix, items, checkpoint, budget, config, count, recall_tool)))
