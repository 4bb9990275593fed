"""The continuity bench runs end to end: planted facts, a real proxy, the scripted model.

A small run (three episodes at an 8k window on the chat wire) must send nothing over the window,
get no errors, and answer at least as many facts with recall as without; the reference run with
the whole history answers every one.
"""

from __future__ import annotations

from bench.continuity.run import run


def test_small_continuity_run():
    results = {r["mode"]: r for r in run([8000], ["chat"], episodes=3, steps=11, concurrency=3)}
    assert set(results) == {"recall", "plain", "whole"}
    for r in results.values():
        assert r["errors"] == 0, r["first_errors"]
        assert r["over_window"] == 0
        assert r["facts_asked"] > 0
    assert results["whole"]["recall_rate"] == 1.0, results["whole"]["wrong"]
    assert results["recall"]["facts_correct"] >= results["plain"]["facts_correct"]
    assert results["recall"]["tokens_saved"] > 0.3
