"""Last-resort pruning: oldest unpinned groups first, cut, then a clear overflow."""

from __future__ import annotations

import pytest

from policies.base import Budget, ContextOverflow
from policies.config import PinsConfig, PolicyConfig
from policies.draft import Inputs, build_draft
from policies.invariants import check_all
from policies.projection import project
from policies.prune_groups import PRUNED_MARKER_START, prune_groups, pruned_marker
from tests.policies.helpers import assistant, calls, items, result, user
from tests.policies.strategies import fake_count

SYSTEM = [{"role": "system", "content": "be brief"}]


def turns(n: int, size: int = 2_000) -> list[dict[str, object]]:
    out: list[dict[str, object]] = [user("the objective")]
    for i in range(n):
        out += [calls(f"c{i}"), result(f"c{i}", "r" * size), assistant(f"step {i} done")]
    return out + [user("latest question")]


def test_drops_oldest_unpinned_groups_until_within_budget() -> None:
    history = items(*turns(10))
    budget = Budget(4_000, 500)
    config = PolicyConfig(order=("prune_groups",))
    projection = project(SYSTEM, history, None, budget, config, fake_count)
    record = projection.record
    assert record.sent_tokens <= budget.input_budget
    assert record.pruned_seqs[0] == 2  # the oldest group after the pinned objective
    assert record.pruned_seqs == tuple(range(2, record.pruned_seqs[-1] + 1))
    assert projection.messages[1] == user("the objective")
    assert PRUNED_MARKER_START in projection.messages[2]["content"]  # where the dropped groups were
    assert projection.messages[-1] == user("latest question")
    assert check_all(SYSTEM, history, None, budget, projection) == []


def test_no_pruning_when_it_fits() -> None:
    history = items(*turns(2, size=10))
    draft, ctx = build_draft(Inputs(SYSTEM, history, None, Budget(100_000, 1_000), PolicyConfig(), fake_count))
    assert prune_groups(draft, ctx) is draft


def test_a_kept_group_too_large_gets_its_tool_results_cut() -> None:
    history = items(user("goal"), calls("a"), result("a", "q" * 40_000), assistant("noted"), user("go on"))
    config = PolicyConfig(pins=PinsConfig(roles=("assistant",)), order=("prune_groups",))
    projection = project([], history, None, Budget(3_000, 500), config, fake_count)
    assert "[trimmed: tool result of bash, 40,000 chars" in projection.messages[2]["content"]
    assert [e.seq for e in projection.record.trimmed] == [3]
    assert projection.record.pruned_seqs == ()


def test_a_too_large_in_flight_result_is_cut_to_fit_not_refused() -> None:
    history = items(user("goal"), calls("a"), result("a", "x" * 60_000))
    projection = project(SYSTEM, history, None, Budget(8_000, 1_000), PolicyConfig(), fake_count)
    assert projection.record.sent_tokens <= 7_000
    assert projection.record.cut_to_fit == (3,)
    assert "[trimmed to fit the context window: tool result of bash" in projection.messages[-1]["content"]
    assert check_all(SYSTEM, history, None, Budget(8_000, 1_000), projection) == []


def test_overflow_when_the_newest_user_message_alone_does_not_fit() -> None:
    history = items(user("goal"), calls("a"), result("a", "x" * 6_000), user("y" * 60_000))
    with pytest.raises(ContextOverflow) as info:
        project(SYSTEM, history, None, Budget(8_000, 1_000), PolicyConfig(), fake_count)
    error = info.value
    assert error.input_budget == 7_000 and error.needed_tokens > 15_000
    assert "window 8,000 − max output 1,000" in str(error)
    assert "newest user message and in-flight turn" in error.detail


def test_dropped_groups_leave_a_marker_in_their_place_naming_them() -> None:
    history = items(*turns(10))
    budget = Budget(4_000, 500)
    config = PolicyConfig(order=("prune_groups",))
    projection = project(SYSTEM, history, None, budget, config, fake_count, recall_tool="ctxproxy_recall")
    record = projection.record
    (marker,) = [m for m in projection.messages if PRUNED_MARKER_START in str(m.get("content"))]
    first, last = record.pruned_seqs[0], record.pruned_seqs[-1]
    assert marker == pruned_marker(record.pruned_seqs, "ctxproxy_recall")
    assert f'events="e{first}-e{last}"' in marker["content"] and "ctxproxy_recall tool can search" in marker["content"]
    # in their place: after the pinned objective, before the first group kept after them
    position = projection.messages.index(marker)
    assert projection.messages[position - 1] == user("the objective")
    assert record.sent_tokens == budget.fixed_tokens + sum(fake_count(m) for m in projection.messages)
    assert record.sent_tokens <= budget.input_budget


def test_the_marker_names_ranges_split_by_a_pinned_group() -> None:
    assert pruned_marker((2, 3, 4, 7, 9, 10))["content"].startswith('<pruned_history events="e2-e4, e7, e9-e10">6 ')
    assert "recall" not in pruned_marker((2,))["content"]
