"""Which route and model rejected the recall tool: remembered for a while, bounded, visible.

Only a rejection of the tool itself marks a (route, model): a 400 the provider's own error
classifies as a tool or schema rejection, or an unclassified 400 that the same request without
the tool did not get. A context overflow never does (the request was too long, the tool was not
the reason). A mark expires (`recall.rejected_seconds`), so an upstream that learned tools, or a
transient refusal, does not cost the route recall for the process's lifetime; `/metrics`
(`ctxproxy_recall_rejected`) and the admin API (`GET /admin/recall/rejected`) show the marks, and
`DELETE` lifts them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_PAIRS = 4096


@dataclass(frozen=True)
class Mark:
    reason: str
    since: float
    """wall-clock time of the rejection"""
    until: float
    """monotonic time the mark expires"""


class RejectedTool:
    """(route, model) pairs whose upstream rejected the recall tool; they are not offered it again
    until their mark expires. Model names come from clients, so at most `limit` pairs are kept
    (the oldest forgotten first: such a pair is offered the tool once more, and marked again if
    rejected again)."""

    def __init__(self, limit: int = MAX_PAIRS, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self._marks: dict[tuple[str, str], Mark] = {}

    def remember(self, route: str, model: str, reason: str, seconds: float) -> None:
        self._marks.pop((route, model), None)
        self._marks[(route, model)] = Mark(reason[:500], time.time(), self.clock() + seconds)
        while len(self._marks) > self.limit:
            del self._marks[next(iter(self._marks))]

    def forget(self) -> int:
        """Lift every mark; how many there were."""
        count = len(self._marks)
        self._marks.clear()
        return count

    def _expire(self) -> None:
        now = self.clock()
        for pair in [pair for pair, mark in self._marks.items() if mark.until <= now]:
            del self._marks[pair]

    def pairs(self) -> list[tuple[str, str]]:
        self._expire()
        return list(self._marks)

    def describe(self) -> list[dict[str, Any]]:
        """The marks for the admin API: route, model, why, since when, seconds left."""
        self._expire()
        now = self.clock()
        return [
            {"route": route, "model": model, "reason": mark.reason, "since": mark.since, "expires_in": mark.until - now}
            for (route, model), mark in self._marks.items()
        ]

    def __len__(self) -> int:
        self._expire()
        return len(self._marks)

    def __contains__(self, pair: object) -> bool:
        mark = self._marks.get(pair) if isinstance(pair, tuple) else None
        if mark is None:
            return False
        if mark.until <= self.clock():
            del self._marks[pair]  # type: ignore[arg-type]
            return False
        return True
