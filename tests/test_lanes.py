"""The test lanes (`tests/support/lanes.py`) and the ports the tests' servers get
(`tests/support/ports.py`), which is what lets the whole suite run on pytest-xdist workers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

from tests.support import lanes

REPO = Path(__file__).resolve().parent.parent


def _collect(*args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_the_quick_lane_leaves_out_every_long_mark_and_keeps_the_rest() -> None:
    paths = (
        "tests/agents/test_pi.py",
        "tests/e2e/test_ui_pages.py",
        "tests/e2e/test_quickstart.py",
        "tests/store/test_contract.py",
    )
    full, quick = _collect(*paths), _collect("--lane", "quick", *paths)
    assert any(t.startswith("tests/agents/") for t in full) and any("test_ui_pages" in t for t in full)
    assert any("[redis-cluster]" in t for t in full)
    assert not any(t.startswith("tests/agents/") or "test_ui_pages" in t or "[redis-cluster]" in t for t in quick)
    assert [t for t in full if "test_quickstart" in t] == [t for t in quick if "test_quickstart" in t] != []
    assert {t for t in full if "[sqlite]" in t} == {t for t in quick if "[sqlite]" in t} != set()


def test_a_misspelled_mark_fails_the_run(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text("import pytest\n\n@pytest.mark.slwo\ndef test_x():\n    pass\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(REPO),
            "-c",
            str(REPO / "pyproject.toml"),
            str(probe),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "'slwo' not found in `markers`" in proc.stdout + proc.stderr


def test_examples_are_capped_in_the_dev_profile_only() -> None:
    current = settings.get_current_profile_name()
    try:
        lanes.load("quick")
        assert lanes.examples(300) == lanes.DEV_EXAMPLES and lanes.examples(5) == 5
        lanes.load("full")
        assert lanes.examples(300) == 300
    finally:
        settings.load_profile(current)


_HAND_OUT = """
import json
from tests.support.ports import free_port
print(json.dumps([free_port() for _ in range(300)]))
"""


def test_each_worker_hands_out_its_own_ports_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    handed = {}
    for worker in ("gw0", "gw1", "gw3"):
        proc = subprocess.run(
            [sys.executable, "-c", _HAND_OUT],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env={
                "PATH": "/usr/bin:/bin",
                "PYTEST_XDIST_WORKER": worker,
                "PYTEST_XDIST_TESTRUNUID": "one-run",
                "PYTHONPATH": str(REPO),
            },
        )
        assert proc.returncode == 0, proc.stderr
        handed[worker] = json.loads(proc.stdout)
    for ports in handed.values():
        assert len(set(ports)) == len(ports) and all(p < low for p in ports)
    assert not set(handed["gw0"]) & set(handed["gw1"]) and not set(handed["gw1"]) & set(handed["gw3"])
