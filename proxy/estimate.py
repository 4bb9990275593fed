"""What an upstream will count: our estimate corrected by what it billed (DESIGN invariant 5).

Problem: ctxproxy counts tokens with tiktoken; an upstream counts its own way (another
tokenizer, other framing, its own tool rendering), often 10-20% apart and not by the same
factor from request to request. A projection packed to an estimated budget overflows whenever
the estimate runs low. So every budget is set against a prediction of the upstream's own count
plus a margin for what is still estimated, both learned from what the upstream billed.

Rules (seed 000, "usage 怎么增量计数"):
- Carried: when a request's messages start with the very messages of the branch's last billed
  call (same tools), the upstream's count of that part is known: that call's bill. Only what
  changed is estimated: `predicted = last bill + ratio x (estimate - last estimate)`.
- Otherwise (a branch's first call here, a new checkpoint, a moved trim boundary):
  `predicted = ratio x estimate`.
- `ratio`: the median of billed / estimated over the recent calls of the same (route, model),
  whichever way they err, kept across conversations and checkpoint generations.
- `margin = spread x ratio x (the estimated part) + jitter x predicted`: `spread` is how far a
  whole call's ratio strays above the median (its 99th percentile), `jitter` how far a carried
  prediction fell short of the bill (likewise): what the estimate misses on fresh content, and
  what the upstream's own count varies by. Never zero: `spread` is at least the policy's
  `safety_margin`; until a (route, model) has `MIN_SAMPLES` bills it is `PRIOR_SPREAD` (the
  ratio is the median of the bills there are from the first one on).
- Overflow errors teach too: the provider's own count of the rejected request is a sample like
  a bill, and the window it names replaces the configured one when smaller (`window`).

Example: the last call on a branch was estimated at 10,000 and billed 10,800; the next request
adds 600 estimated tokens, the route's ratio is 1.08 and its spread 0.03: predicted 10,800 +
648 = 11,448, margin 0.03 x 648 = 19 (+ jitter x 11,448).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from operator import is_
from typing import Any

from .eviction import Eviction

Key = tuple[str, str]
"""(route name, model): whose counting a statistic describes."""

SAMPLES = 256
MIN_SAMPLES = 8
PRIOR_SPREAD = 0.10
QUANTILE = 0.99
CARRIED_SHARE = 0.5
"""A prediction at least this much carried from the last bill is a sample of the upstream's jitter."""
REFRESH = 8
"""Statistics are recomputed after this many new samples (a sort of at most `SAMPLES` floats)."""
PLAUSIBLE = (0.25, 4.0)
"""Counts further than this from our estimate are no tokenizer's: a broken usage report, not a sample."""


@dataclass(frozen=True)
class Correction:
    """How one (route, model) counts against our estimate, as learned so far."""

    ratio: float = 1.0
    spread: float = PRIOR_SPREAD
    jitter: float = 0.0
    samples: int = 0


@dataclass(frozen=True)
class Prediction:
    """What the upstream will count for one request, and the margin kept for the error."""

    key: Key
    branch: str | None
    estimated: int
    predicted: int
    margin: int
    carried: int
    """tokens of `predicted` taken from the branch's last bill (0: none)"""
    fixed: int
    messages: Sequence[Any]

    @property
    def total(self) -> int:
        return self.predicted + self.margin

    def summary(self) -> dict[str, int]:
        """The fields kept with the call record's projection."""
        return {"predicted_tokens": self.predicted, "margin_tokens": self.margin, "carried_tokens": self.carried}


@dataclass(frozen=True)
class _Baseline:
    messages: Sequence[Any]
    fixed: int
    estimated: int
    billed: int


class _Stats:
    def __init__(self) -> None:
        self.ratios: deque[float] = deque(maxlen=SAMPLES)
        self.residuals: deque[float] = deque(maxlen=SAMPLES)
        self.window: int | None = None
        self.fresh = 0
        self.correction = Correction()

    def refresh(self) -> Correction:
        if self.fresh == 0 or (self.fresh < REFRESH and self.correction.samples >= MIN_SAMPLES):
            return self.correction
        self.fresh = 0
        ratios = sorted(self.ratios)
        if not ratios:
            return self.correction
        ratio = ratios[len(ratios) // 2]
        if len(ratios) < MIN_SAMPLES:  # a first bill already says which way the count leans
            self.correction = Correction(ratio, samples=len(ratios))
            return self.correction
        spread = max(0.0, _quantile(ratios, QUANTILE) / ratio - 1.0)
        residuals = sorted(self.residuals)
        jitter = max(0.0, _quantile(residuals, QUANTILE)) if len(residuals) >= MIN_SAMPLES else 0.0
        self.correction = Correction(ratio, spread, jitter, len(ratios))
        return self.correction


def _quantile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _starts_with(messages: Sequence[Any], prefix: Sequence[Any]) -> bool:
    """Whether `messages` begins with `prefix`, message for message (the same objects in the
    common case, equal dicts otherwise)."""
    if len(messages) < len(prefix):
        return False
    if all(map(is_, messages, prefix)):
        return True
    return all(a is b or a == b for a, b in zip(messages, prefix, strict=False))


class Estimator:
    """Per-process statistics per (route, model) and each branch's last bill; bounded."""

    def __init__(self, branches: int = 256) -> None:
        self.branches = branches
        """Branches whose last bill is kept. Each holds that call's messages, the history cache's
        objects while it holds the branch's history, a whole parsed history of its own after."""
        self._stats: dict[Key, _Stats] = {}
        self._baselines: dict[str, _Baseline] = {}
        self._order: Eviction[str] = Eviction()
        """Which baseline goes when there are more than `branches` (`proxy.eviction`: with more
        branches in use than fit, those that keep being billed stay)."""
        self._lock = threading.Lock()

    def _of(self, key: Key) -> _Stats:
        stats = self._stats.get(key)
        if stats is None:
            stats = self._stats[key] = _Stats()
        return stats

    def correction(self, key: Key, floor: float) -> Correction:
        """The (route, model)'s correction, its spread at least `floor`."""
        with self._lock:
            learned = self._of(key).refresh()
        return Correction(learned.ratio, max(floor, learned.spread), learned.jitter, learned.samples)

    def window(self, key: Key) -> int | None:
        """The smallest window the upstream named in an overflow error for this (route, model)."""
        stats = self._stats.get(key)
        return stats.window if stats is not None else None

    def _baseline(self, branch: str | None, fixed: int) -> _Baseline | None:
        if branch is None:
            return None
        with self._lock:
            baseline = self._baselines.get(branch)
        return baseline if baseline is not None and baseline.fixed == fixed else None

    def limit(self, key: Key, branch: str | None, fixed: int, limit: int, floor: float) -> int:
        """The largest estimate whose prediction plus margin fits `limit` upstream tokens, for a
        request that carries the branch's last bill (when there is one with the same tools)."""
        c = self.correction(key, floor)
        slope = c.ratio * (1.0 + c.spread + c.jitter)
        baseline = self._baseline(branch, fixed)
        if baseline is None:
            return math.floor(limit / slope)
        # predicted + margin = offset (1 + jitter) - spread ratio e_last + slope e, where the offset
        # is what the last bill says beyond the ratio: billed - ratio e_last
        offset = baseline.billed - c.ratio * baseline.estimated
        fixed_part = offset * (1.0 + c.jitter) - c.spread * c.ratio * baseline.estimated
        return math.floor((limit - fixed_part) / slope)

    def predict(
        self, key: Key, branch: str | None, messages: Sequence[Any], estimated: int, fixed: int, floor: float
    ) -> Prediction:
        """The upstream's count of a projection of `estimated` tokens sending `messages`."""
        c = self.correction(key, floor)
        baseline = self._baseline(branch, fixed)
        if baseline is not None and _starts_with(messages, baseline.messages):
            fresh = max(0, estimated - baseline.estimated)
            predicted = baseline.billed + c.ratio * (estimated - baseline.estimated)
            carried = baseline.billed
        else:
            fresh, predicted, carried = estimated, c.ratio * estimated, 0
        margin = c.spread * c.ratio * fresh + c.jitter * predicted
        return Prediction(key, branch, estimated, math.ceil(predicted), math.ceil(margin), carried, fixed, messages)

    def observe(self, prediction: Prediction, billed: int | None, *, baseline: bool = True) -> None:
        """The upstream billed `billed` input tokens for the predicted request; with `baseline`,
        the request becomes its branch's last bill."""
        if billed is None or billed <= 0 or prediction.estimated <= 0:
            return
        with self._lock:
            self._sample(prediction, billed)
            branch = prediction.branch
            if baseline and branch is not None:
                if branch in self._baselines:
                    self._order.hit(branch)
                else:
                    self._order.touch(branch)
                self._baselines[branch] = _Baseline(prediction.messages, prediction.fixed, prediction.estimated, billed)
                while len(self._baselines) > self.branches:
                    victim = self._order.evict(branch)
                    if victim is None:
                        break
                    self._baselines.pop(victim, None)

    def overflowed(self, prediction: Prediction, counted: int | None, window: int | None) -> None:
        """The upstream refused the predicted request as too long; `counted` is its own count of
        the request's input, `window` the window it named (each when its error said)."""
        with self._lock:
            if counted is not None and counted > 0 and prediction.estimated > 0:
                self._sample(prediction, counted)
            if window is not None and window > 0:
                stats = self._of(prediction.key)
                stats.window = window if stats.window is None else min(stats.window, window)

    def _sample(self, prediction: Prediction, counted: int) -> None:
        ratio = counted / prediction.estimated
        if not PLAUSIBLE[0] <= ratio <= PLAUSIBLE[1]:
            return
        stats = self._of(prediction.key)
        stats.ratios.append(ratio)
        if prediction.carried >= CARRIED_SHARE * prediction.predicted and prediction.predicted > 0:
            stats.residuals.append((counted - prediction.predicted) / prediction.predicted)
        stats.fresh += 1

    def describe(self) -> list[dict[str, Any]]:
        """Per (route, model): the correction in use, its samples and the window learned."""
        with self._lock:
            stats = [(key, s.refresh(), s.window) for key, s in self._stats.items()]
        return [
            {
                "route": route,
                "model": model,
                "ratio": round(c.ratio, 4),
                "spread": round(c.spread, 4),
                "jitter": round(c.jitter, 4),
                "samples": c.samples,
                "learned_window": window,
            }
            for (route, model), c, window in stats
        ]

    def sizes(self) -> dict[str, int]:
        with self._lock:
            return {"calibrations": len(self._baselines)}
