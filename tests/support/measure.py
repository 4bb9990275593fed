"""The measured suite's reporting: each row prints one `MEASURED <row>: k=v ...` line.

Run with `-rA` (or `-s`) to see them, e.g. `python3 -m pytest -q -rA tests/e2e/test_faults.py`.
`CTXPROXY_LONG=1` selects the long profile (`profile(ci, long)`).
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")


def long_profile() -> bool:
    return os.environ.get("CTXPROXY_LONG") == "1"


def profile(ci: T, long: T) -> T:
    """The CI-size value, or the long profile's one under `CTXPROXY_LONG=1`."""
    return long if long_profile() else ci


def report(row: str, **numbers: object) -> str:
    line = f"MEASURED {row}: " + " ".join(f"{k}={v}" for k, v in numbers.items())
    print(line)
    return line
