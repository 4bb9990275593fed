"""The replay stand-in summarizer carries corrections of pinned values, as the real prompt asks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.base import Checkpoint
from policies.projection import project
from proxy import identify
from proxy.catalog import ModelCatalog
from proxy.policy_settings import Policy
from proxy.projector import Projector
from proxy.replay import extractive_summary, key_values, replay
from tests.policies.helpers import assistant, items, user

OBJECTIVE = "Plan the team offsite for 12 people. Constraint: budget 150 per person, venue within 30 km."


def test_key_values_are_conservative() -> None:
    assert key_values(OBJECTIVE) == {"budget": "150", "within": "30"}
    assert key_values("port: 8080, retries=3; the budget is 120") == {"port": "8080", "retries": "3", "budget": "120"}
    assert key_values("budget 120 or budget 130") == {}  # ambiguous: neither
    assert key_values("and 12 people, for 3 days") == {}  # function words are not keys


def test_extractive_summary_names_the_correction_and_keeps_it() -> None:
    history = items(user(OBJECTIVE), assistant("ok"), user("Correction: budget 120 per person."), assistant("noted"))
    pinned = history[:1]
    first = extractive_summary(None, history, pinned=pinned)
    assert first.endswith("## Corrections\n- budget: 120 (replaces 150 stated in e1; corrected in e3)")
    # a later chunk without the key keeps the correction, and the progress bound never cuts it
    later = items(*(user(f"step {i}: " + "filler " * 30) for i in range(60)))
    later = [type(i)(i.seq + 4, i.message, i.tokens) for i in later]
    second = extractive_summary(first, later, max_chars=2000, pinned=pinned)
    assert second.count("## Corrections") == 1
    assert second.endswith("## Corrections\n- budget: 120 (replaces 150 stated in e1; corrected in e3)")
    # corrected again: only the latest value; restating the pinned value drops the correction
    again = [type(history[0])(70, user("make it budget 110"), 5)]
    assert "- budget: 110 (replaces 150 stated in e1; corrected in e70)" in extractive_summary(
        second, again, pinned=pinned
    )
    back = [type(history[0])(71, user("back to budget 150 after all"), 5)]
    assert "## Corrections" not in extractive_summary(second, back, pinned=pinned)
    # assistant or unpinned restatements are not corrections
    assert "## Corrections" not in extractive_summary(
        None, items(user(OBJECTIVE), assistant("budget 99")), pinned=pinned
    )
    assert "## Corrections" not in extractive_summary(None, history)


def corrected_session(follow_up: Callable[[int], str]) -> list[dict[str, Any]]:
    """The objective, its correction, then 200 planning steps, each followed by `follow_up(i)`."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a planner."},
        {"role": "user", "content": OBJECTIVE},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Correction: budget 120 per person, the finance team said so."},
    ]
    for i in range(200):
        messages += [
            {"role": "assistant", "content": f"step {i}: " + "plan " * 60},
            {"role": "user", "content": follow_up(i)},
        ]
    messages.append({"role": "assistant", "content": "done"})
    return messages


def test_offline_replay_shows_the_corrected_value_after_compaction() -> None:
    messages = corrected_session(lambda i: "go on")
    policy = Policy(context_window=8000, max_output_tokens=1000, keep_recent_tokens=1500)
    projector = Projector(ModelCatalog())
    report = replay(messages, None, policy, "gpt-4o", projector, name="correction")
    assert report.compactions >= 2 and report.over_window == 0
    assert report.summary is not None
    assert "- budget: 120 (replaces 150 stated in e1; corrected in e3)" in report.summary
    # what the next request would send: the pinned objective verbatim, then the correction
    counter = projector.counter("gpt-4o")
    prefix, history = messages[:1], messages[1:]
    stored = projector.items(history, identify.chain("replay", history), counter)
    budget, _ = projector.budget(policy, "gpt-4o", {"model": "gpt-4o"}, counter)
    checkpoint = Checkpoint(1, len(history) - 4, report.summary, counter.count({"content": report.summary}))
    sent = project(prefix, stored, checkpoint, budget, policy, counter).messages
    assert sent[1] == history[0]
    assert "budget: 120 (replaces 150" in sent[2]["content"] and "<conversation_summary" in sent[2]["content"]
    assert history[2] not in sent


def test_the_stand_in_summary_is_no_longer_than_the_proxy_accepts() -> None:
    """The proxy commits no summary over `summary_max_tokens`; neither does the replay's stand-in
    (its bill would otherwise count output the proxy never pays for), and the bound keeps the
    correction."""
    messages = corrected_session(lambda i: f"go on with item {i} " + "detail " * 20)
    policy = Policy(context_window=8000, max_output_tokens=1000, summarizer={"summary_max_tokens": 300})
    projector = Projector(ModelCatalog())
    report = replay(messages, None, policy, "gpt-4o", projector, name="bounded")
    outputs = [out for turn in report.turns for _, out in turn.summarizer_calls]
    assert report.compactions >= 2 and outputs
    counter = projector.counter("gpt-4o")
    assert counter.count_text(extractive_summary(None, items(*messages[1:101]))) > 300  # unbounded: longer
    assert max(outputs) <= 300
    assert report.summary is not None and counter.count_text(report.summary) <= 300
    assert "- budget: 120 (replaces 150 stated in e1; corrected in e3)" in report.summary
