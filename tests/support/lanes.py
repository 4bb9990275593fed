"""The test lanes. One setting, ``pytest --lane``, picks both which tests run and how hard each
hypothesis property searches:

- ``full`` (the default; the README's whole-suite command and CI): every test, and each property
  at the example count its test names (the ``ci`` profile).
- ``quick``: every test without one of the :data:`MARKS` below, each property capped at
  :data:`DEV_EXAMPLES` examples (the ``dev`` profile). It is the lane to run before a small
  commit; the whole suite still runs in CI.

A mark says why a test is long, so a lane can be cut differently (``-m "not agents"``).
"""

from __future__ import annotations

from hypothesis import settings

MARKS = {
    "slow": "drives real processes, restarts or timeouts for seconds (not in the quick lane)",
    "agents": "drives a real agent CLI or agent SDK (not in the quick lane)",
    "browser": "drives chromium (not in the quick lane)",
    "cluster": "starts a six-node Redis Cluster (not in the quick lane)",
    "soak": "long load, fault or benchmark runs (not in the quick lane)",
}
LANES = ("full", "quick")
DEV_EXAMPLES = 10

settings.register_profile("ci", settings())
settings.register_profile("dev", max_examples=DEV_EXAMPLES)


def load(lane: str) -> None:
    """Load the hypothesis profile of ``lane`` (``quick`` -> ``dev``, ``full`` -> ``ci``)."""
    settings.load_profile("dev" if lane == "quick" else "ci")


def examples(ci: int) -> int:
    """A property's example count: ``ci`` in the full lane, at most DEV_EXAMPLES in the quick one."""
    if settings.get_current_profile_name() == "dev":
        return min(ci, DEV_EXAMPLES)
    return ci


def long_marks(marks: set[str]) -> set[str]:
    """Which of a test's marks keep it out of the quick lane."""
    return marks & MARKS.keys()
