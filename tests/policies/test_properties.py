"""Property tests: every projection of a generated history keeps invariants 1-5, is
deterministic, leaves its input alone, and is cache-friendly between trim batch steps."""

from __future__ import annotations

import copy
import json
import os
from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from policies.base import Budget, Checkpoint, ContextOverflow
from policies.compaction import fold_summaries, next_checkpoint
from policies.config import PolicyConfig
from policies.draft import Inputs, build_draft
from policies.groups import Group, group_items, normalize_boundary
from policies.invariants import check_all, coverage, latest_turn_verbatim, prefix_pinned, tool_pairing
from policies.outcome import Projection
from policies.pins import pinned_seqs
from policies.projection import STEPS, project
from policies.projection_record import make_record
from policies.summary_prompt import PINNED_MAX_CHARS, SUMMARY_PROMPT_TOKENS, summary_block
from policies.summary_tail import MIN_CHUNK_TOKENS, chunk_limit
from policies.tool_rules import floor_cap
from policies.trim_tool_results import trim_boundary
from tests.policies.strategies import (
    Case,
    applied,
    cases,
    expected_head,
    fake_count,
    fake_summarize,
    group_of,
    kept_pins,
    mandatory_tokens,
    to_items,
)
from tests.support.lanes import examples

SETTINGS = settings(
    max_examples=examples(int(os.environ.get("POLICY_MAX_EXAMPLES", "150"))),  # raise it for a soak run
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def run(case: Case) -> Projection | ContextOverflow:
    try:
        return project(case.prefix, case.items, case.checkpoint, case.budget, case.config, fake_count)
    except ContextOverflow as exc:
        return exc


def assert_valid(case: Case, result: Projection | ContextOverflow) -> None:
    mandatory = mandatory_tokens(case)
    _label(result)
    if isinstance(result, ContextOverflow):
        assert mandatory > case.budget.input_budget, "overflow raised although the request could fit"
        assert result.needed_tokens == mandatory
        assert result.input_budget == case.budget.input_budget
        assert f"{result.needed_tokens:,}" in str(result)
        return
    assert mandatory <= case.budget.input_budget
    assert check_all(case.prefix, case.items, case.checkpoint, case.budget, result) == []
    deferred = case.checkpoint is not None and applied(case).checkpoint is None
    assert result.record.deferred_generation == (case.checkpoint.generation if deferred and case.checkpoint else None)
    record = result.record
    assert record.sent_tokens == case.budget.fixed_tokens + sum(fake_count(m) for m in result.messages)
    assert record.pinned_seqs == expected_head(case)
    json.dumps(record.to_dict())  # JSON-safe
    summaries = [m for m in result.messages if "<conversation_summary" in str(m.get("content"))]
    if record.covered_through_seq:
        assert len(summaries) == 1 and summaries[0]["role"] == "user"
    else:
        assert summaries == []
    assert all(m.get("role") != "system" for m in result.messages[len(case.prefix) :])


def _label(result: Projection | ContextOverflow) -> None:
    if isinstance(result, ContextOverflow):
        event("overflow")
        return
    record = result.record
    for name, hit in (
        ("pruned", record.pruned_seqs),
        ("trimmed", record.trimmed),
        ("compaction planned", record.compaction),
        ("checkpoint applied", record.covered_through_seq),
        ("orphans dropped", record.orphan_seqs),
        ("results repaired", record.repaired),
    ):
        if hit:
            event(name)
    for how in sorted({entry.how for entry in record.trimmed}):
        event(f"trimmed as {how}")


@SETTINGS
@given(cases())
def test_projection_keeps_invariants(case: Case) -> None:
    before = copy.deepcopy((case.prefix, [item.message for item in case.items]))
    first = run(case)
    assert copy.deepcopy((case.prefix, [item.message for item in case.items])) == before
    assert_valid(case, first)
    second = run(case)
    if isinstance(first, Projection):
        assert isinstance(second, Projection)
        assert json.dumps(first.messages) == json.dumps(second.messages)
        assert json.dumps(first.record.to_dict()) == json.dumps(second.record.to_dict())
        # read-only output (DESIGN: "do not mutate"): the prefix is sent as the caller's objects
        assert all(a is b for a, b in zip(first.messages, case.prefix, strict=False))
    else:
        assert isinstance(second, ContextOverflow) and str(first) == str(second)


@SETTINGS
@given(cases(max_groups=16), st.data())
def test_prefix_is_stable_between_batch_steps(case: Case, data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(("user", "assistant", "tools")))
    extra = data.draw(group_of(kind, 99))
    longer = replace(case, items=to_items(case.messages + extra))
    old, new = run(case), run(longer)
    if isinstance(old, ContextOverflow) or isinstance(new, ContextOverflow):
        return
    assert_valid(longer, new)
    n_old = len(group_items(case.items))
    n_new = len(group_items(longer.items))
    settings_ = case.config.tool_results
    budget = case.budget.input_budget
    if (
        old.record.pruned_seqs
        or new.record.pruned_seqs
        or trim_boundary(n_old, settings_, budget) != trim_boundary(n_new, settings_, budget)
        or old.record.pinned_seqs != new.record.pinned_seqs
        or old.record.covered_through_seq != new.record.covered_through_seq
        or (not old.record.covered_through_seq and not old.record.trimmed and new.record.trimmed)
    ):
        # the request crossed the trigger (trimming starts: `trim_tool_results`' pass-through),
        # a batch step, pruning, a new newest-user message or a checkpoint that reached into the
        # previous latest turn (only applicable now) legitimately moves bytes
        return
    # Every message before the previous latest turn is byte-identical; the previous latest
    # turn itself only changes when it is now trimmed (no longer protected) or repaired.
    last = _last_group(case)
    stable = len(old.messages) - len(last.items)
    assert json.dumps(new.messages[:stable]) == json.dumps(old.messages[:stable])
    event("prefix compared")
    position = [g.first_seq for g in group_items(case.items)].index(last.first_seq)
    old_now = position < trim_boundary(n_new, settings_, budget)
    cap = floor_cap(settings_, old_now)  # the smallest cap a result may get, rules included
    if not last.missing_ids and all(
        len(str(item.message.get("content") or "")) <= cap for item in last.items if item.message.get("role") == "tool"
    ):
        assert json.dumps(new.messages[: len(old.messages)]) == json.dumps(old.messages)
        event("full previous projection is a prefix")


def _last_group(case: Case) -> Group:
    return [g for g in group_items(case.items) if g.kind != "orphan"][-1]


@SETTINGS
@given(cases(), st.sampled_from(sorted(STEPS)))
def test_every_registered_step_keeps_invariants(case: Case, name: str) -> None:
    draft, ctx = build_draft(Inputs(case.prefix, case.items, case.checkpoint, case.budget, case.config, fake_count))
    try:
        stepped = STEPS[name](draft, ctx)
    except ContextOverflow:
        assert name == "prune_groups"
        assert mandatory_tokens(case) > case.budget.input_budget
        return
    messages = stepped.messages()
    record = make_record(stepped, ctx)
    history = [item.message for item in case.items]
    assert tool_pairing(messages) == []
    assert prefix_pinned(case.prefix, messages) == []
    assert latest_turn_verbatim(history, messages) == []
    assert coverage(case.items, case.checkpoint, record) == []
    if name == "prune_groups":
        assert stepped.total <= case.budget.input_budget
    if name == "summary_tail":
        assert messages == draft.messages()


@SETTINGS
@given(cases())
def test_compaction_plan_is_well_formed_and_applying_it_keeps_invariants(case: Case) -> None:
    result = run(case)
    if isinstance(result, ContextOverflow) or result.record.compaction is None:
        return
    plan = result.record.compaction
    event("plan applied")
    groups = group_items(case.items)
    assert normalize_boundary(groups, plan.through_seq) == plan.through_seq  # group boundary
    assert plan.through_seq < max(item.seq for item in case.items)
    covered = result.record.covered_through_seq
    expected = [item.seq for item in case.items if covered < item.seq <= plan.through_seq]
    assert [item.seq for chunk in plan.chunks for item in chunk] == expected
    assert plan.from_seq == expected[0]
    limit = chunk_limit(
        case.budget,
        case.config,
        previous_summary_tokens=case.checkpoint.tokens if case.checkpoint else 0,
        pinned_tokens=sum(i.tokens for i in case.items if i.seq in _pins(case)),
    )
    for chunk in plan.chunks:
        # over the limit only when one group (with the orphan results inside its span) is
        group = next(g for g in groups if g.first_seq == chunk[0].seq)
        orphans = [g for g in groups if g.kind == "orphan" and group.first_seq < g.first_seq < group.last_seq]
        assert sum(item.tokens + 16 for item in chunk) <= limit or len({i.seq for i in chunk}) == len(
            group.items
        ) + len(orphans)
    # apply the plan with the stand-in summarizer, then project again
    summary = fold_summaries(plan, case.checkpoint.summary if case.checkpoint else None, fake_summarize)
    checkpoint = next_checkpoint(case.checkpoint, plan, summary, fake_count)
    generation = case.checkpoint.generation + 1 if case.checkpoint else 1
    assert checkpoint == Checkpoint(
        generation, plan.through_seq, summary, fake_count(summary_block(summary, plan.through_seq))
    )
    after = replace(case, checkpoint=checkpoint)
    assert_valid(after, run(after))


@SETTINGS
@given(cases(), st.integers(1_000, 40_000), st.integers(0, 8_000))
def test_chunks_fit_the_summarizers_own_window(case: Case, window: int, reserve: int) -> None:
    """With a summarizer budget of its own, every chunk fits next to the summary prompt, the
    larger of the previous summary and the rolling summary (the reply reserve, or the longest
    summary accepted when that is less) and the pinned
    texts, whatever the main model's window; only an uncuttable single group may exceed it."""
    summarizer = Budget(window, min(reserve, window // 4), 3)
    case = replace(case, budget=replace(case.budget, summarizer=summarizer))
    result = run(case)
    if isinstance(result, ContextOverflow) or result.record.compaction is None:
        return
    event("plan with a summarizer budget")
    previous = case.checkpoint.tokens if case.checkpoint else 0
    pinned = min(sum(i.tokens for i in case.items if i.seq in _pins(case)), PINNED_MAX_CHARS // 3)
    rolling = summarizer.max_output_tokens  # a summary is no longer than the reply, nor the longest accepted
    if case.budget.summary_max_tokens:
        rolling = min(rolling, case.budget.summary_max_tokens)
    room = summarizer.input_budget - 3 - SUMMARY_PROMPT_TOKENS - max(previous, rolling) - pinned
    limit = max(MIN_CHUNK_TOKENS, min(case.config.summary_chunk_tokens, room))
    groups = group_items(case.items)
    for chunk in result.record.compaction.chunks:
        group = next(g for g in groups if g.first_seq == chunk[0].seq)
        orphans = [g for g in groups if g.kind == "orphan" and group.first_seq < g.first_seq < group.last_seq]
        single = len({i.seq for i in chunk}) == len(group.items) + len(orphans)
        assert sum(item.tokens + 16 for item in chunk) <= limit or single


def _pins(case: Case) -> frozenset[int]:
    """The pins the projection keeps (rule pins past half the budget released)."""
    kept = kept_pins(case)
    assert kept <= pinned_seqs(case.items, case.config.pins)
    return frozenset(kept)


def test_overflow_message_carries_the_numbers() -> None:
    huge = {"role": "user", "content": "x" * 40_000}
    case = Case([], [huge], to_items([huge]), None, Budget(4000, 1000, 0), PolicyConfig())
    result = run(case)
    assert isinstance(result, ContextOverflow)
    text = str(result)
    assert "even after dropping all unpinned history the request needs" in text
    assert "3,000 input tokens (window 4,000 − max output 1,000)" in text
