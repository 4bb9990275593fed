"""The code as STYLE.md asks for it: `ruff format` applied and `ruff check` clean over everything
Python in the repository, and `mypy` clean over the product in the strict mode pyproject.toml
sets (`[tool.mypy] strict = true`). Run as tests so a change that breaks them fails CI rather
than waiting for a reviewer to notice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYTHON = ("proxy", "policies", "tests", "bench")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    "command",
    [("ruff", "format", "--check", *PYTHON), ("ruff", "check", *PYTHON)],
    ids=["ruff-format", "ruff-check"],
)
def test_ruff(command: tuple[str, ...]) -> None:
    done = _run(*command)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict(tmp_path: Path) -> None:
    done = _run("mypy", "--cache-dir", str(tmp_path), "proxy", "policies")
    assert done.returncode == 0, done.stdout + done.stderr
