"""The orchestrator: layout with a checkpoint, boundaries, records, determinism."""

from __future__ import annotations

import json

from policies.base import Budget, Checkpoint
from policies.config import PinsConfig, PolicyConfig
from policies.invariants import check_all
from policies.projection import project
from policies.summary_prompt import summary_block
from proxy.token_counter import TokenCounter
from tests.policies.helpers import assistant, calls, items, result, user
from tests.policies.strategies import fake_count

SYSTEM = [{"role": "system", "content": "You are an agent."}]
BIG = Budget(200_000, 4_000, 100)
NOW = PolicyConfig(late_trim=0.8)
"""`late_trim` at the trigger: a checkpoint applies as soon as it exists (with the default, one
waits while the whole history still goes as sent: `test_a_checkpoint_waits_while_the_history_fits`)."""


def test_layout_prefix_pins_summary_tail() -> None:
    history = items(
        user("objective: fix it"),  # 1 pinned (first user)
        assistant("looking"),  # 2
        calls("a"),
        result("a", "out"),  # 3, 4
        user("MUST keep API"),  # 5 pinned by pattern
        assistant("ok"),  # 6
        calls("b"),
        result("b", "out2"),  # 7, 8
        user("latest"),  # 9
    )
    checkpoint = Checkpoint(3, 6, "## Goal\nfix it", 20)
    config = PolicyConfig(pins=PinsConfig(patterns=(r"MUST",)), late_trim=0.8)
    projection = project(SYSTEM, history, checkpoint, BIG, config, fake_count)
    assert projection.messages == [
        SYSTEM[0],
        user("objective: fix it"),
        user("MUST keep API"),
        summary_block("## Goal\nfix it", 6),
        history[6].message,
        history[7].message,
        user("latest"),
    ]
    record = projection.record
    assert record.covered_through_seq == 6 and record.checkpoint_generation == 3
    assert record.sent_seqs == (1, 5, 7, 8, 9) and record.pinned_seqs == (1, 5)
    assert record.client_tokens == 100 + fake_count(SYSTEM[0]) + sum(i.tokens for i in history)
    assert check_all(SYSTEM, history, checkpoint, BIG, projection) == []


def test_checkpoint_inside_a_group_keeps_the_group_whole() -> None:
    history = items(user("go"), assistant("x"), calls("a", "b"), result("a"), result("b"), user("next"))
    projection = project([], history, Checkpoint(1, 4, "s", 5), BIG, NOW, fake_count)
    assert projection.record.covered_through_seq == 2
    assert projection.messages[2:5] == [history[2].message, history[3].message, history[4].message]


def test_latest_user_message_is_kept_even_when_covered() -> None:
    history = items(user("first"), user("latest"), calls("a"), result("a"), calls("b"), result("b"))
    projection = project([], history, Checkpoint(1, 4, "s", 5), BIG, NOW, fake_count)
    assert projection.messages[:3] == [user("first"), user("latest"), summary_block("s", 4)]


def test_orphans_are_dropped_and_missing_results_repaired_with_records() -> None:
    history = items(user("go"), result("ghost"), calls("a", "b"), result("a"), user("next"))
    projection = project([], history, None, BIG, PolicyConfig(), fake_count)
    assert projection.record.orphan_seqs == (2,)
    assert projection.record.repaired == ((3, "b"),)
    assert {"role": "tool", "tool_call_id": "b", "content": "[no result recorded]"} in projection.messages
    assert all(m.get("tool_call_id") != "ghost" for m in projection.messages)


def test_deterministic_with_a_real_counter_and_output_is_read_only() -> None:
    counter = TokenCounter.for_model("gpt-4o")
    history = [*items(user("go"), *[m for i in range(30) for m in (calls(f"c{i}"), result(f"c{i}", "z" * 3000))])]
    config = PolicyConfig(keep_recent_tokens=1000, trigger=0.5, target=0.3)  # over the trigger even trimmed
    budget = Budget(16_000, 2_000, 50)
    first = project(SYSTEM, history, None, budget, config, counter)
    second = project(SYSTEM, history, None, budget, config, counter)
    assert json.dumps(first.messages) == json.dumps(second.messages)
    assert first.record.compaction is not None and first.record.over_trigger
    # the output is read-only: untouched messages are the input objects themselves (no copies)
    assert first.messages[0] is SYSTEM[0] and first.messages[1] is history[0].message
    assert SYSTEM[0]["content"] == "You are an agent."


def test_a_correction_in_the_summary_is_read_after_the_pin_it_corrects() -> None:
    """The pinned objective states "budget 150"; the user later said "budget 120" and that turn is
    now covered. The model must read the pin verbatim and, after it, the summary's correction."""
    history = items(
        user("Plan the offsite: budget 150, 12 people."),  # 1 pinned
        assistant("ok"),  # 2
        user("budget 120, not 150"),  # 3 covered
        assistant("noted"),  # 4 covered
        user("book the venue"),  # 5
    )
    summary = "## Goal\nPlan the offsite.\n## Corrections\n- budget: 120 (replaces 150 stated in e1; corrected in e3)"
    projection = project(SYSTEM, history, Checkpoint(2, 4, summary, 30), BIG, NOW, fake_count)
    assert projection.messages == [SYSTEM[0], history[0].message, summary_block(summary, 4), user("book the venue")]
    texts = [json.dumps(m) for m in projection.messages]
    stale = next(i for i, t in enumerate(texts) if "budget 150" in t)
    corrected = next(i for i, t in enumerate(texts) if "budget: 120 (replaces 150" in t)
    assert stale == 1 and corrected == 2


def test_a_checkpoint_waits_while_the_history_fits() -> None:
    """`late_trim` (default: the whole budget): while the whole history goes as sent (a branch
    forked from a compacted one), its checkpoint is deferred (the record names it) and nothing is
    planned; the first request that would not fit gets it."""
    turns = [m for i in range(6) for m in (calls(f"c{i}"), result(f"c{i}", "x" * 400))]
    history = items(user("go"), *turns, user("next"))
    checkpoint = Checkpoint(1, 9, "## Goal\ngo on", 12)
    as_sent = 100 + sum(item.tokens for item in history)
    fits = Budget(as_sent + 1_000, 1_000, 100)  # input budget = as sent: it fits, over the trigger
    waiting = project([], history, checkpoint, fits, PolicyConfig(), fake_count)
    assert waiting.messages == [item.message for item in history]
    assert waiting.record.deferred_generation == 1 and waiting.record.checkpoint_generation is None
    assert waiting.record.over_trigger and waiting.record.compaction is None
    tight = Budget(as_sent + 999, 1_000, 100)  # one token short: the checkpoint applies
    applied = project([], history, checkpoint, tight, PolicyConfig(), fake_count)
    assert applied.record.checkpoint_generation == 1 and applied.record.deferred_generation is None
    assert summary_block("## Goal\ngo on", 9) in applied.messages
    # with no checkpoint yet, the same request goes as sent and plans none: no summarizer is paid
    # for a session that may end before it stops fitting
    as_sent_alone = project([], history, None, fits, PolicyConfig(), fake_count)
    assert as_sent_alone.messages == [item.message for item in history]
    assert as_sent_alone.record.compaction is None
