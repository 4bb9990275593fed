"""Each checker catches the violation it names."""

from __future__ import annotations

from policies.base import Budget, Checkpoint
from policies.invariants import coverage, latest_turn_verbatim, prefix_pinned, tool_pairing, within_budget
from policies.outcome import ProjectionRecord
from tests.policies.helpers import assistant, calls, items, result, user


def record(**kw: object) -> ProjectionRecord:
    base: dict[str, object] = dict(
        client_tokens=0,
        sent_tokens=0,
        checkpoint_generation=None,
        covered_through_seq=0,
        trimmed=(),
        pruned_seqs=(),
        over_trigger=False,
        compaction=None,
    )
    base.update(kw)
    return ProjectionRecord(**base)  # type: ignore[arg-type]


def test_tool_pairing() -> None:
    assert tool_pairing([user("u"), calls("a", "b"), result("b"), result("a"), assistant("x")]) == []
    assert tool_pairing([calls("a"), result("a"), calls("b")]) == []  # in flight at the end
    assert "without a matching tool call" in tool_pairing([user("u"), result("a")])[0]
    assert "have no result" in tool_pairing([calls("a", "b"), result("a"), user("u")])[0]
    assert "does not answer" in tool_pairing([calls("a"), result("a"), result("a")])[0]
    assert "duplicate tool call ids" in tool_pairing([calls("a", "a"), result("a"), result("a")])[0]


def test_prefix_pinned() -> None:
    system = {"role": "system", "content": "s"}
    assert prefix_pinned([system], [system, user("u")]) == []
    assert prefix_pinned([system], [user("u"), system]) != []
    assert prefix_pinned([system], [{"role": "system", "content": "s2"}]) != []


def test_latest_turn_verbatim() -> None:
    history = [user("old"), user("newest"), calls("a"), result("a", "full output")]
    assert latest_turn_verbatim(history, [user("newest"), calls("a"), result("a", "full output")]) == []
    assert "newest user message" in latest_turn_verbatim(history, [calls("a"), result("a", "full output")])[0]
    trimmed = [user("newest"), calls("a"), result("a", "full [trimmed]")]
    assert "in-flight tool group" in latest_turn_verbatim(history, trimmed)[0]
    assert "last message" in latest_turn_verbatim([user("q")], [user("q"), assistant("extra")])[0]


def test_coverage() -> None:
    history = items(user("a"), assistant("b"), user("c"), assistant("d"))
    checkpoint = Checkpoint(1, 2, "s", 1)
    assert coverage(history, checkpoint, record(covered_through_seq=2, sent_seqs=(3, 4))) == []
    assert "neither" in coverage(history, checkpoint, record(covered_through_seq=2, sent_seqs=(4,)))[0]
    assert "both" in coverage(history, checkpoint, record(covered_through_seq=2, sent_seqs=(2, 3, 4)))[0]
    pinned = record(covered_through_seq=2, sent_seqs=(1, 3, 4), pinned_seqs=(1,))
    assert coverage(history, checkpoint, pinned) == []
    assert coverage(history, None, record(sent_seqs=(3, 4), pruned_seqs=(1,), orphan_seqs=(2,))) == []
    assert "beyond the checkpoint" in coverage(history, checkpoint, record(covered_through_seq=3, sent_seqs=(4,)))[0]
    assert "no checkpoint" in coverage(history, None, record(covered_through_seq=2, sent_seqs=(3, 4)))[0]


def test_within_budget() -> None:
    budget = Budget(1_000, 200)
    assert within_budget(800, budget) == []
    assert "input budget is 800" in within_budget(801, budget)[0]
