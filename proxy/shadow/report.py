"""The shadow report: how often rewriting changed the next step, beside the A/A floor. Pure.

From the shadow call records (`Store.calls_of_purpose("shadow", ...)`), per route, model and
rewrite kind (a pair counts under each of its kinds, and under `any`): the pairs compared, how
many diverged, the divergence rate and its 95% bootstrap interval; beside each, the A/A floor of
the same route and model (unrewritten requests sent twice: the model's own noise). A rewrite
kind whose interval sits above the floor's changed what the agent did; one whose interval
overlaps it is indistinguishable from sending the same request again. Failed pairs (the shadow
call got no whole answer) are counted, never in a rate.

The interval resamples the pairs with replacement `RESAMPLES` times from a generator seeded with
`SEED`, so the same records give the same interval. Resampling n pairs of which d diverged
draws the diverged count from Binomial(n, d/n); each draw here is one uniform number through
that distribution's cumulative table, the same resampling without n draws per replicate.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..store.base import CallRecord
from .pairs import CONTROL

SEED = 37
RESAMPLES = 2000
LEVEL = 0.95


@dataclass
class Tally:
    pairs: int = 0
    diverged: int = 0
    failed: int = 0

    def add(self, outcome: str) -> None:
        if outcome == "failed":
            self.failed += 1
            return
        self.pairs += 1
        if outcome == "diverged":
            self.diverged += 1

    def to_dict(self) -> dict[str, Any]:
        rate = self.diverged / self.pairs if self.pairs else None
        return {
            "pairs": self.pairs,
            "diverged": self.diverged,
            "failed": self.failed,
            "rate": None if rate is None else round(rate, 4),
            "interval": interval(self.diverged, self.pairs),
        }


def pair_of(call: CallRecord) -> dict[str, Any] | None:
    """The pair a shadow call record carries (None: not a shadow record)."""
    described = (call.projection or {}).get("shadow")
    return described if isinstance(described, dict) else None


def report(calls: Iterable[CallRecord]) -> dict[str, Any]:
    """Divergence per route, model and kind, with the A/A floor beside it (module docstring)."""
    groups: dict[tuple[str, str, str], Tally] = {}
    floors: dict[tuple[str, str], Tally] = {}
    total = Tally()
    for call in calls:
        pair = pair_of(call)
        if pair is None:
            continue
        outcome = str(pair.get("outcome"))
        model = call.model or ""
        total.add(outcome)
        kinds = pair.get("kinds") or []
        if not kinds:
            floors.setdefault((call.route, model), Tally()).add(outcome)
            continue
        for kind in ["any", *kinds]:
            groups.setdefault((call.route, model, kind), Tally()).add(outcome)
    rows = []
    for (route, model, kind), tally in sorted(groups.items()):
        floor = floors.get((route, model), Tally())
        rows.append({"route": route, "model": model, "kind": kind, **tally.to_dict(), "floor": floor.to_dict()})
    for (route, model), floor in sorted(floors.items()):
        if not any(row["route"] == route and row["model"] == model for row in rows):
            rows.append({"route": route, "model": model, "kind": CONTROL, **floor.to_dict(), "floor": floor.to_dict()})
    return {"totals": total.to_dict(), "groups": rows}


def interval(diverged: int, pairs: int, seed: int = SEED) -> list[float] | None:
    """The `LEVEL` bootstrap interval of the rate `diverged / pairs` (None without pairs)."""
    if pairs == 0:
        return None
    rate = diverged / pairs
    if diverged in (0, pairs):
        return [rate, rate]  # every resample of a constant sample is that constant
    cumulative = _binomial_cdf(pairs, rate)
    rng = random.Random(seed)
    draws = sorted(min(bisect_left(cumulative, rng.random()), pairs) for _ in range(RESAMPLES))
    tail = (1 - LEVEL) / 2
    low, high = draws[int(tail * RESAMPLES)], draws[int((1 - tail) * RESAMPLES) - 1]
    return [round(low / pairs, 4), round(high / pairs, 4)]


def _binomial_cdf(n: int, p: float) -> list[float]:
    """P(X <= k) for k = 0..n, X ~ Binomial(n, p), 0 < p < 1."""
    log_p, log_q = math.log(p), math.log1p(-p)
    head = math.lgamma(n + 1)
    out, running = [], 0.0
    for k in range(n + 1):
        running += math.exp(head - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p + (n - k) * log_q)
        out.append(running)
    return out


def diverged(calls: list[CallRecord], limit: int) -> list[dict[str, Any]]:
    """The diverged pairs among `calls` (newest first), as the API and the inspector list them."""
    out = []
    for call in calls:
        pair = pair_of(call)
        if pair is None or pair.get("outcome") != "diverged":
            continue
        out.append(
            {
                "shadow_call": call.id,
                "of": pair.get("of"),
                "conversation_id": call.conversation_id,
                "tenant": call.tenant,
                "route": call.route,
                "model": call.model,
                "started_at": call.started_at,
                "kinds": pair.get("kinds") or [],
                "removed": pair.get("removed"),
                "difference": pair.get("difference"),
                "steps": pair.get("steps"),
            }
        )
        if len(out) >= limit:
            break
    return out
