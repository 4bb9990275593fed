"""Pin rules: first user message, roles, patterns over user/system text only."""

from __future__ import annotations

from policies.base import Budget
from policies.config import PinsConfig, PolicyConfig
from policies.pins import PROVIDER_STATE, latest_user_seq, pinned_seqs, pinned_texts, release_pins
from policies.projection import project
from tests.policies.helpers import assistant, calls, items, result, user
from tests.policies.strategies import fake_count

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


def test_rule_pins_beyond_half_the_budget_are_released_oldest_first() -> None:
    tokens = {2: 100, 4: 300, 6: 300, 8: 300, 9: 50}
    kept, released = release_pins(frozenset(tokens), frozenset({2, 9}), tokens.__getitem__, 700)
    assert kept == {2, 9, 8, 6} and released == (4,)
    assert release_pins(frozenset(tokens), frozenset({2, 9}), tokens.__getitem__, 900) == (frozenset(tokens), ())


def test_released_pins_are_summarized_like_other_history_and_the_record_says_so() -> None:
    big = "You MUST follow this. " + "rule " * 900  # about 1,150 tokens each
    history = items(user("the objective"), *[m for i in range(6) for m in (user(f"{i}: {big}"), assistant("ok"))])
    # late_trim at the trigger: the 6,951 tokens as sent fit the 7,000 budget, and would go as sent
    config = PolicyConfig(pins=PinsConfig(patterns=(r"\bMUST\b",)), late_trim=0.8)
    projection = project([], history, None, Budget(8_000, 1_000), config, fake_count)
    record = projection.record
    assert record.released_pins  # six pins of ~1,150 tokens exceed half of 7,000
    assert record.to_dict()["released_pins"] and record.summary_dict()["released_pins"]
    assert record.sent_tokens <= 7_000
    assert projection.messages[0] == user("the objective")  # the first user message stays pinned
    assert record.released_pins == (2, 4)  # the oldest; 6, 8, 10 fit in half the budget, 12 is the newest
    kept = [seq for seq in pinned_seqs(history, config.pins) if seq not in record.released_pins]
    assert sum(history[seq - 1].tokens for seq in kept if seq not in (1, 12)) <= 3_500
    plan = record.compaction
    assert plan is not None  # released pins are summarized like other history
    assert plan.released_pins == record.released_pins
    assert set(record.released_pins) <= {item.seq for chunk in plan.chunks for item in chunk}


def test_the_providers_compaction_is_pinned_never_released_and_sent_verbatim() -> None:
    """A message the wire marked PROVIDER_STATE (the provider's own compaction, sent back by the
    client) is the client's checkpoint: kept as it is however tight the budget, never released to
    the summarizer, while the tool results around it are trimmed, summarized or pruned."""
    checkpoint = {**assistant("[compacted]"), PROVIDER_STATE: True}
    big = "line of output " * 400  # about 1,200 tokens each
    turns = [m for i in range(12) for m in (calls(f"c{i}"), result(f"c{i}", f"{i}: {big}"))]
    history = items(user("the objective"), checkpoint, user("go on"), *turns, user("next?"))
    assert 2 in pinned_seqs(history, PinsConfig(first_user=False))
    projection = project([], history, None, Budget(6_000, 1_000), PolicyConfig(), fake_count)
    assert checkpoint in projection.messages
    assert 2 not in projection.record.released_pins
    assert projection.record.sent_tokens <= 5_000
