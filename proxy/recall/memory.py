"""Which route and model rejected the recall tool: remembered for the process's lifetime, bounded."""

from __future__ import annotations

MAX_PAIRS = 4096


class RejectedTool:
    """(route, model) pairs whose upstream answered a request carrying the recall tool with a 400
    and accepted the same request without it; they are not offered the tool again. Model names
    come from clients, so at most `limit` pairs are kept (the oldest forgotten first: such a pair
    is offered the tool once more, and remembered again if rejected again)."""

    def __init__(self, limit: int = MAX_PAIRS) -> None:
        self.limit = limit
        self._pairs: dict[tuple[str, str], None] = {}

    def remember(self, route: str, model: str) -> None:
        self._pairs.pop((route, model), None)
        self._pairs[(route, model)] = None
        while len(self._pairs) > self.limit:
            del self._pairs[next(iter(self._pairs))]

    def __len__(self) -> int:
        return len(self._pairs)

    def __contains__(self, pair: object) -> bool:
        return pair in self._pairs
