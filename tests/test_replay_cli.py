"""`ctxproxy replay`: a saved conversation through a policy, offline, with real numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import transcripts

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run many times the 16k window: the longest shared one, else one built from vendored runs."""
    return transcripts.write(transcripts.long_run(), tmp_path_factory.mktemp("transcripts"))


def run_replay(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "routes": [{"name": "r", "upstream": {"base_url": "http://127.0.0.1:9/v1"}, "policy": "small"}],
                "policies": {"small": {"context_window": 16000, "max_output_tokens": 2000, "keep_recent_tokens": 4000}},
            }
        )
    )
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "replay", "--config", str(config), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_replay_reports_savings_without_overflow(tmp_path: Path, long_run: Path) -> None:
    result = run_replay(tmp_path, str(long_run), "--json")
    assert result.returncode == 0, result.stderr
    (report,) = json.loads(result.stdout)
    messages = json.loads(long_run.read_text())["messages"]
    assert report["turns"] == sum(1 for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0)
    assert report["requests_over_window"] == 0
    assert report["max_request"] <= 16000 - 2000
    assert report["compactions"] >= 3
    assert report["client_tokens"] > 3 * report["sent_tokens"]  # a long run at a small window
    assert 0 < report["prefix_reuse"] <= 1 and 0 < report["baseline_prefix_reuse"] <= 1


def test_replay_text_output_and_errors(tmp_path: Path, long_run: Path) -> None:
    result = run_replay(tmp_path, str(long_run), "--per-turn", "--window", "32000")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("turn  events  client_tokens")
    assert "of window 32,000" in lines[-1] and "saved" in lines[-1]
    missing = run_replay(tmp_path, str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "cannot read a transcript" in missing.stderr
    bad_policy = run_replay(tmp_path, str(long_run), "--policy", "nope")
    assert bad_policy.returncode == 1 and "no policy named 'nope'" in bad_policy.stderr
