"""The team-load phase (`bench.team_load`) runs end to end at a small size on both stores and
reports every figure it promises: eight agent sessions, a fast model, ten turns each, the two
that open near the window crossing it during the run and waiting for their summary.

No timing is asserted: numbers depend on the machine. The full size is in BENCHMARKS.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.team_load import lag_p99, run_team_load, ttft_of
from bench.team_report import section


@pytest.mark.soak
def test_small_team_load_on_sqlite_and_redis(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    report = run_team_load(tmp_path, env, 8, 10, print, ttft_s=(0.05, 0.2), rate=(300.0, 600.0))
    assert report["crossing_sessions"] == 2
    assert [row["backend"] for row in report["rows"]] == ["sqlite", "redis"]
    for row in report["rows"]:
        assert row["errors"] == 0, row["error_examples"]
        assert row["requests"] == 8 * 10
        assert row["cpu_ms_per_request"] > 0 and row["rss_peak_mb"] >= row["rss_end_mb"] > 0
        assert row["loop_lag_samples"] > 0 and row["loop_lag_p99_ms"] >= 0
        assert 0 <= row["runqueue_wait_s"] <= row["wall_s"] + 5
        # both sessions that open near the window cross it in the run and wait for their summary
        assert row["sessions_compacted"] == 2 and row["compactions"] >= 2
        assert row["summary_waits"] == row["waited_by_logs"] == 2
        assert row["recall_rounds"] == row["detours_by_logs"] > 0 and row["forks"] == 0
        groups = row["added_ttft"]
        assert groups["all"]["n"] == row["requests"]
        assert sum(groups[k]["n"] for k in ("plain", "detour", "waited")) >= row["requests"]
        assert groups["all"]["p50_ms"] is not None and groups["waited"]["p50_ms"] is not None
    text = "\n".join(section({"team_load": report}))
    assert (
        text.startswith("\n## A realistic team load") and "| sqlite | 80 | 0 |" in text and "| redis | 80 | 0 |" in text
    )


def test_ttft_counts_a_detours_recall_round_as_upstream_time() -> None:
    first = {"arrival": 10.0, "first": 11.5, "end": 13.0}
    follow_up = {"arrival": 13.01, "first": 14.0, "end": 15.0}
    assert ttft_of([first]) == pytest.approx(1.5)
    assert ttft_of([follow_up, first]) == pytest.approx(3.0 + 0.99)


def test_lag_p99_interpolates_within_the_bucket_it_falls_in() -> None:
    name = "ctxproxy_event_loop_lag_seconds_bucket"
    delta = {f'{name}{{le="0.001"}}': 90.0, f'{name}{{le="0.01"}}': 100.0, f'{name}{{le="+Inf"}}': 100.0}
    assert lag_p99(delta) == pytest.approx(0.001 + 0.009 * 0.9)
    assert lag_p99({f'{name}{{le="+Inf"}}': 0.0}) is None
