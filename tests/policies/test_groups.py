"""Protocol groups: positional pairing, orphans, repairs, boundaries."""

from __future__ import annotations

from collections.abc import Sequence

from policies.base import Checkpoint, Item
from policies.groups import (
    NO_RESULT,
    effective_boundary,
    group_items,
    normalize_boundary,
    render_group,
    split_prefix,
)
from tests.policies.helpers import assistant, calls, items, result, user


def kinds(history: Sequence[Item]) -> list[tuple[str, tuple[int, ...]]]:
    return [(g.kind, g.seqs) for g in group_items(history)]


def test_split_prefix_takes_leading_system_and_developer_only() -> None:
    system = {"role": "system", "content": "s"}
    developer = {"role": "developer", "content": "d"}
    prefix, rest = split_prefix([system, developer, user("u"), system])
    assert prefix == [system, developer]
    assert rest == [user("u"), system]


def test_parallel_calls_stay_in_one_group() -> None:
    history = items(user("go"), calls("a", "b", "c"), result("b"), result("a"), result("c"), assistant("done"))
    assert kinds(history) == [("user", (1,)), ("tool_call", (2, 3, 4, 5)), ("assistant", (6,))]


def test_pairing_is_positional_when_ids_are_reused() -> None:
    history = items(calls("call_0"), result("call_0"), user("again"), calls("call_0"), result("call_0"))
    assert kinds(history) == [("tool_call", (1, 2)), ("user", (3,)), ("tool_call", (4, 5))]


def test_orphans_become_their_own_groups_and_are_not_rendered() -> None:
    history = items(user("go"), result("x"), calls("a"), result("a"), result("a"), result("zz"))
    groups = group_items(history)
    assert [(g.kind, g.seqs) for g in groups] == [
        ("user", (1,)),
        ("orphan", (2,)),
        ("tool_call", (3, 4)),
        ("orphan", (5,)),  # a second result for an id already answered
        ("orphan", (6,)),
    ]
    assert render_group(groups[1], is_last=False) == []


def test_missing_results_are_repaired_unless_in_flight() -> None:
    history = items(calls("a", "b", "c"), result("b"), user("next"), calls("d", "e"), result("d"))
    groups = group_items(history)
    assert groups[0].missing_ids == ("a", "c")
    rendered = [m for _, m in render_group(groups[0], is_last=False)]
    assert rendered[2:] == [
        {"role": "tool", "tool_call_id": "a", "content": NO_RESULT},
        {"role": "tool", "tool_call_id": "c", "content": NO_RESULT},
    ]
    assert [seq for seq, _ in render_group(groups[0], is_last=False)] == [1, 2, None, None]
    in_flight = render_group(groups[2], is_last=True)
    assert [m for _, m in in_flight] == [history[3].message, history[4].message]


def test_content_none_and_empty_tool_calls() -> None:
    history = items({"role": "assistant", "content": None, "tool_calls": []}, user("x"))
    assert kinds(history) == [("assistant", (1,)), ("user", (2,))]


def test_boundary_inside_a_group_covers_through_the_groups_start() -> None:
    history = items(user("go"), calls("a", "b"), result("a"), result("b"), user("more"), assistant("ok"))
    groups = group_items(history)
    assert normalize_boundary(groups, 3) == 1
    assert normalize_boundary(groups, 4) == 4
    assert effective_boundary(groups, Checkpoint(1, 3, "s", 1)) == 1
    assert effective_boundary(groups, None) == 0


def test_checkpoint_never_covers_the_latest_turn() -> None:
    history = items(user("go"), assistant("a"), user("now"), calls("a"), result("a"))
    groups = group_items(history)
    assert effective_boundary(groups, Checkpoint(1, 99, "s", 1)) == 3


def test_interleaved_orphan_keeps_coverage_whole() -> None:
    history = items(user("go"), calls("a", "b"), result("a"), result("ghost"), result("b"), user("x"))
    groups = group_items(history)
    assert [(g.kind, g.seqs) for g in groups][1:3] == [("tool_call", (2, 3, 5)), ("orphan", (4,))]
    assert normalize_boundary(groups, 4) == 1
