"""Small statistics helpers."""

from __future__ import annotations

from collections.abc import Sequence


def pct(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no data."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)
