"""The continuity bench runs end to end: planted facts, a real proxy, the scripted model, and
upstreams that count tokens their own way (`tests.support.counting`).

A small run (three episodes at an 8k window on the chat wire) in two counting modes, `exact` and
`bias+5` (the upstream counts 5% more than `exact`), with a summarizer whose 16k window the proxy
is not told and which overshoots its length instruction. In both, nothing may reach the upstream
over its window (the summarizer's requests included), no error may reach the client, a summary
must commit, every request that pruned must carry the marker, and recall must answer every fact
the reference run with the whole history answers.
"""

from __future__ import annotations

import pytest

from bench.continuity.__main__ import record, shadow_table, summary, tables
from bench.continuity.run import run

pytestmark = pytest.mark.soak

OTHER = "bias+5"


def test_small_continuity_run():
    rows = run([8000], ["chat"], episodes=3, steps=11, concurrency=3, countings=["exact", OTHER])
    print("\n" + tables(rows))
    table = summary(rows).splitlines()
    assert len(table) == 2 + 2 and table[2].startswith("| exact | 8,000 | 0 |")  # a row per mode and window
    recorded = record(rows, 1.0, ["--windows", "8000"], ("an earlier tree", rows))
    assert recorded.count("| bias+5 | 8,000 |") == 2 and "### counting bias+5, window 8,000" in recorded
    results = {r["mode"]: r for r in rows if r["counting"] == "exact"}
    assert set(results) == {"recall", "plain", "whole"}
    other = [r for r in rows if r["counting"] == OTHER]
    assert [r["mode"] for r in other] == ["recall"]
    for r in [*results.values(), *other]:
        assert r["errors"] == 0, r["first_errors"]
        assert r["upstream_overflows"] == 0 and r["over_window"] == 0, r["overflow_messages"]
        assert r["summary_over_window"] == 0
        assert r["marked_requests"] == (r.get("pruned_requests") or 0)
        assert r["facts_asked"] > 0
    assert results["whole"]["recall_rate"] == 1.0, results["whole"]["wrong"]
    for r in (results["recall"], other[0]):
        assert r["checkpoints_committed"] >= 1 and r["checkpoints_failed"] == 0
        assert r["facts_correct"] == results["whole"]["facts_correct"], r["wrong"]
    assert results["recall"]["facts_correct"] >= results["plain"]["facts_correct"]
    assert results["recall"]["tokens_saved"] > 0.3
    for r in (results["recall"], results["plain"]):
        assert r["proxy_main_calls"] == r["requests"]  # the admin API saw the whole session
        assert r["estimate_samples"] > 0 and r["estimate_error_p50"] is not None


def test_shadow_pairs_measure_the_rewrites_against_the_a_a_floor():
    """With `--shadow`, every proxied request gets its unrewritten twin: without recall, the facts
    trimming and the summary took change some answers (diverged pairs); with recall, the model
    recovers them; the A/A floor of the deterministic scripted model is 0."""
    rows = run([8000], ["chat"], episodes=8, steps=11, concurrency=2, whole=False, countings=["exact"], shadow=1.0)
    modes = {r["mode"]: r for r in rows}
    assert all(r["errors"] == 0 and r["shadow_failed"] == 0 for r in rows), [r["first_errors"] for r in rows]
    plain, recall = modes["plain"], modes["recall"]
    assert plain["aa_pairs"] > 0 and plain["aa_rate"] == 0.0
    assert plain["shadow_pairs"] > 0 and "trimmed" in plain["shadow_kinds"]
    assert plain["shadow_diverged"] > 0  # a fact the rewrite removed changed the answer
    assert recall["shadow_pairs"] > 0 and "recall" in recall["shadow_kinds"]
    assert recall["shadow_diverged"] <= plain["shadow_diverged"]
    assert "| exact | 8,000 | chat | plain |" in shadow_table(rows)
