"""Shadow sampling, pair kinds, what a rewrite removed, and the divergence report (pure)."""

from __future__ import annotations

from typing import Any

from proxy.shadow.pairs import kinds_of, ranges, removed, sampled
from proxy.shadow.report import interval, report
from proxy.store.base import CallRecord


def test_sampling_is_a_reproducible_hash_at_the_rate() -> None:
    hashes = [f"h{i}" for i in range(4000)]
    chosen = [h for h in hashes if sampled(0.25, "default", "c_1", h)]
    assert chosen == [h for h in hashes if sampled(0.25, "default", "c_1", h)]  # the same again
    assert 800 < len(chosen) < 1200
    assert not any(sampled(0.0, "default", "c_1", h) for h in hashes)
    assert all(sampled(1.0, "default", "c_1", h) for h in hashes)
    assert chosen != [h for h in hashes if sampled(0.25, "other", "c_1", h)]  # each policy its own sample


def test_kinds_of_a_projection() -> None:
    assert kinds_of({"trimmed": 0, "pruned_seqs": [], "checkpoint_generation": None}, False, False, False) == []
    record = {"trimmed": 2, "pruned_seqs": [[1, 4]], "checkpoint_generation": 3}
    assert kinds_of(record, True, False, True) == ["trimmed", "summarized", "pruned", "recall"]
    assert kinds_of({"repaired": 1}, False, False, True) == ["other"]
    assert kinds_of(None, False, True, True) == ["memory"]


def test_removed_names_missing_and_cut_events() -> None:
    history = [
        {"role": "user", "content": "deploy"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "t1", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "a long result"},
        {"role": "user", "content": "go"},
    ]
    sent = [history[0], history[1], {"role": "tool", "tool_call_id": "t1", "content": "[trimmed]"}, history[3]]
    assert removed(history, 10, sent) == {"missing": [], "cut": [[12, 12]]}
    assert removed(history, 10, [history[3]]) == {"missing": [[10, 12]], "cut": []}
    assert removed(history, 10, history) == {"missing": [], "cut": []}
    assert ranges([7, 1, 2, 3]) == [[1, 3], [7, 7]]


def shadow(route: str, model: str, kinds: list[str], outcome: str) -> CallRecord:
    call = CallRecord("s", "t", route, model, "shadow", False, 1.0)
    call.projection = {"shadow": {"kinds": kinds, "control": not kinds, "outcome": outcome}}
    return call


def test_report_puts_the_a_a_floor_beside_each_kind() -> None:
    calls = [
        *[shadow("main", "gpt-4o", ["trimmed"], "diverged") for _ in range(3)],
        *[shadow("main", "gpt-4o", ["trimmed", "recall"], "equivalent") for _ in range(5)],
        shadow("main", "gpt-4o", ["trimmed"], "failed"),
        *[shadow("main", "gpt-4o", [], "equivalent") for _ in range(9)],
        shadow("main", "gpt-4o", [], "diverged"),
        CallRecord("m", "t", "main", "gpt-4o", "main", False, 1.0),  # not a pair: ignored
    ]
    out: dict[str, Any] = report(calls)
    by_kind = {row["kind"]: row for row in out["groups"]}
    assert list(by_kind) == ["any", "recall", "trimmed"]
    trimmed = by_kind["trimmed"]
    assert (trimmed["pairs"], trimmed["diverged"], trimmed["failed"], trimmed["rate"]) == (8, 3, 1, 0.375)
    assert trimmed["floor"]["pairs"] == 10 and trimmed["floor"]["rate"] == 0.1
    assert by_kind["recall"]["rate"] == 0.0 and by_kind["recall"]["interval"] == [0.0, 0.0]
    assert out["totals"]["pairs"] == 18 and out["totals"]["failed"] == 1


def test_a_route_with_only_a_a_pairs_reports_its_floor() -> None:
    out = report([shadow("main", "m", [], "equivalent")])
    assert [(row["kind"], row["pairs"]) for row in out["groups"]] == [("aa", 1)]


def test_the_bootstrap_interval_is_seeded_and_brackets_the_rate() -> None:
    assert interval(0, 0) is None
    assert interval(30, 100) == interval(30, 100)
    low, high = interval(30, 100) or [0.0, 0.0]
    assert 0.18 < low < 0.3 < high < 0.42
    narrow = interval(3000, 10_000) or [0.0, 0.0]
    assert narrow[1] - narrow[0] < high - low  # more pairs, a narrower interval
    assert interval(100, 100) == [1.0, 1.0]
