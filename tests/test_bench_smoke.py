"""The benchmark runs end to end in its quick configuration and writes a report of the right shape.

No timing is asserted: numbers depend on the machine. `python -m bench` (full) is in BENCHMARKS.md.
It reads only the transcripts vendored in tests/data/transcripts/ unless the shared set is present.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak

ROOT = Path(__file__).resolve().parent.parent


def test_bench_quick_runs_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--no-litellm", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a hang, not a speed limit: the quick run takes a minute or two on a busy machine
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").read_text().startswith("# ctxproxy benchmarks")
    assert report["meta"]["mode"] == "quick"

    rows = report["overhead"]["rows"]
    targets = {r["target"] for r in rows}
    assert {"direct", "passthrough", "ctxproxy"} <= targets
    cells = {r["cell"] for r in rows}
    assert {"non-stream c=1", "stream c=1", "non-stream c=16", "stream c=16"} <= cells
    for row in rows:
        assert row["requests"] > 0 and row["errors"] == 0, row
        for key in ("p50_ms", "p99_ms", "added_p50_ms", "throughput_rps"):
            assert isinstance(row[key], (int, float)), (key, row)
        if row["target"] != "direct":
            assert isinstance(row["cpu_ms_per_request"], (int, float)) and isinstance(row["rss_mb"], float), row
        if row["stream"]:
            assert isinstance(row["ttft_p50_ms"], (int, float)), row

    scaling = report["scaling"]["rows"]
    assert {r["stored_events"] for r in scaling if r["target"] == "ctxproxy"} == {50, 500, 2000}
    assert all(r["errors"] == 0 for r in scaling), scaling

    compaction = report["compaction"]
    assert "error" not in compaction, compaction
    assert compaction["rows"] and compaction["rows"][0]["compactions"] > 0

    summary = report["savings"]["summary"]
    assert summary and {
        "client_tokens",
        "sent_tokens",
        "savings",
        "requests_over_window",
        "prefix_reuse",
        "baseline_prefix_reuse",
    } <= set(summary[0])
    money = report["savings"]["money"]
    assert {r["model"] for r in money} == {"gpt-4.1", "claude-sonnet-4"}
    assert all(r["bill_with"] > 0 and r["bill_without"] > 0 and r["reuse_ratio"] for r in money), money
    assert all(r["bill_with_text"] > 0 and r["bill_ratio_text"] for r in money), money  # the text-mode variant
    workers = report["workers"]["rows"]
    assert {r["target"] for r in workers} == {"ctxproxy", "ctxproxy-2w"}
    assert all(r["requests"] > 0 and r["errors"] == 0 for r in workers), workers
    assert set(report["workers"]["ratios"]) == {"non-stream c=16", "stream c=16"}

    memory = report["memory"]
    assert memory["ok"] == memory["conversations"] > 0 and memory["errors"] == 0, memory
    assert memory["rss_after_mb"] > 0

    assert all(t["met"] in (True, False, None) for t in report["targets"])

    active = report["active"]["rows"]
    assert [(r["caches"], r["conversations"]) for r in active] == [
        ("defaults", 16),
        ("defaults", 64),
        ("sized for 64", 16),
        ("sized for 64", 64),
    ]
    assert all(r["requests"] == r["conversations"] * 2 and r["errors"] == 0 for r in active), active
    assert all(r["cpu_ms_per_request"] > 0 and r["rss_mb"] > 0 for r in active), active
    one_key = report["active"]["one_key"]
    assert [(r["conversations"], r["openings"]) for r in one_key] == [(64, "distinct"), (64, "alike")]
    assert all(r["requests"] == 64 * 2 and r["errors"] == 0 and r["cpu_ms_per_request"] > 0 for r in one_key)
    assert "## Active conversations" in (out / "report.md").read_text()
    assert "under one API key" in (out / "report.md").read_text()

    store = report["store_calls"]["rows"]
    assert [r["variant"] for r in store] == [
        "shipped",
        "one transaction",
        "no WAL checkpoints",
        "in memory",
        "beside 10,000 compacted conversations",
        "with budgets and a rate limit",
        "with budgets",
    ]
    assert all(r["cpu_us_per_request"] > 0 and len(r["rounds_us"]) == 1 for r in store), store
    assert "## Store calls per request" in (out / "report.md").read_text()
