"""Which route and model rejected the recall tool: remembered for the process's lifetime."""

from __future__ import annotations


class RejectedTool:
    """(route, model) pairs whose upstream answered a request carrying the recall tool with a 400
    and accepted the same request without it; they are not offered the tool again."""

    def __init__(self) -> None:
        self._pairs: set[tuple[str, str]] = set()

    def remember(self, route: str, model: str) -> None:
        self._pairs.add((route, model))

    def __contains__(self, pair: object) -> bool:
        return pair in self._pairs
