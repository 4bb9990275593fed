"""Pin rules: first user message, roles, patterns over user/system text only."""

from __future__ import annotations

from policies.base import PinsConfig
from policies.pins import latest_user_seq, pinned_seqs, pinned_texts
from tests.policies.helpers import assistant, calls, items, result, user

HISTORY = items(
    assistant("hello"),
    user("Fix the bug. Never push to main."),
    calls("a"),
    result("a", "Never push to main -- said the README"),
    user("also: Never delete tests"),
    assistant("ok"),
)


def test_first_user_is_pinned_by_default() -> None:
    assert pinned_seqs(HISTORY, PinsConfig()) == {2}
    assert pinned_seqs(HISTORY, PinsConfig(first_user=False)) == frozenset()


def test_role_rules() -> None:
    assert pinned_seqs(HISTORY, PinsConfig(first_user=False, roles=("user",))) == {2, 5}
    assert pinned_seqs(HISTORY, PinsConfig(first_user=False, roles=("tool",))) == {4}


def test_patterns_never_match_tool_output() -> None:
    config = PinsConfig(first_user=False, patterns=(r"Never \w+",))
    assert pinned_seqs(HISTORY, config) == {2, 5}


def test_latest_user_and_texts() -> None:
    assert latest_user_seq(HISTORY) == 5
    assert latest_user_seq(items(assistant("x"))) is None
    assert pinned_texts(HISTORY, PinsConfig(roles=("tool",))) == ["Fix the bug. Never push to main."]
