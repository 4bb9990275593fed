"""Tool result trimming: batch boundary, marker, exclusions, protection."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest

from policies.base import Budget, Item, PinsConfig, PolicyConfig, ToolResultsConfig
from policies.draft import Draft, StepContext, build_draft
from policies.trim_tool_results import trim_boundary, trim_message, trim_tool_results
from tests.policies.helpers import calls, items, result, user
from tests.policies.strategies import fake_count


@pytest.mark.parametrize(
    ("n_groups", "expected"),
    [(0, 0), (4, 0), (7, 0), (8, 4), (9, 4), (11, 4), (12, 8), (13, 8)],
)
def test_boundary_advances_in_batches(n_groups: int, expected: int) -> None:
    assert trim_boundary(n_groups, ToolResultsConfig(keep_recent_groups=4, clear_at_least=4)) == expected


def test_marker_names_tool_size_kept_chars_and_event() -> None:
    text = "H" * 200 + "x" * 47_810 + "T" * 200
    trimmed, entry = trim_message(result("c1", text), max_chars=400, head_ratio=0.5, tool_name="grep", seq=57) or (
        None,
        None,
    )
    assert trimmed is not None and entry is not None
    assert trimmed["content"] == (
        "H" * 200
        + "\n[trimmed: tool result of grep, 48,210 chars; first 200 and last 200 kept; event 57]\n"
        + "T" * 200
    )
    assert (entry.seq, entry.tool_call_id, entry.original_chars, entry.kept_chars) == (57, "c1", 48_210, 400)


def test_small_results_and_useless_trims_are_left_alone() -> None:
    assert trim_message(result("c", "x" * 400), max_chars=400, head_ratio=0.5, tool_name="t", seq=1) is None
    assert trim_message(result("c", "x" * 450), max_chars=400, head_ratio=0.5, tool_name="t", seq=1) is None


def _draft(history: Sequence[Item], config: PolicyConfig) -> tuple[Draft, StepContext]:
    return build_draft([], history, None, Budget(200_000, 1000), config, fake_count)


def test_old_trimmed_recent_capped_excluded_and_latest_untouched() -> None:
    big = "y" * 20_000
    history = items(
        user("task"),
        calls("a", name="bash"),
        result("a", big),
        calls("b", name="search"),
        result("b", big),
        calls("c", name="bash"),
        result("c", big),
        calls("d", name="bash"),
        result("d", big),
    )
    before = copy.deepcopy([i.message for i in history])
    config = PolicyConfig(
        tool_results=ToolResultsConfig(keep_recent_groups=2, clear_at_least=1, exclude_tools=("search",))
    )
    draft, ctx = _draft(history, config)
    out = trim_tool_results(draft, ctx)
    contents = [str(m.get("content")) for m in out.messages()]
    assert len(contents[2]) < 500  # old: 400 chars + marker
    assert contents[4] == big  # excluded tool
    assert len(contents[6]) < 8_200 and "first 4,000 and last 4,000 kept; event 7" in contents[6]  # recent cap
    assert contents[8] == big  # in-flight group
    assert [e.seq for e in out.trimmed] == [3, 7]
    assert [i.message for i in history] == before


def test_pinned_tool_results_are_never_trimmed() -> None:
    history = items(user("task"), calls("a"), result("a", "z" * 5000), user("next"))
    config = PolicyConfig(pins=PinsConfig(roles=("tool",)), tool_results=ToolResultsConfig(keep_recent_groups=0))
    draft, ctx = _draft(history, config)
    out = trim_tool_results(draft, ctx)
    assert out.messages()[2]["content"] == "z" * 5000
