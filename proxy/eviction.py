"""Which entry a full per-process cache gives up: least recently used, unless all are in use.

Agents take their turns side by side, so a proxy sees its conversations in turn, over and over.
A plain LRU smaller than the conversations in use then evicts each one just before its next
turn and hits nothing: one conversation more than it holds and every request derives everything
again (`python -m bench --only active`). So when even the least recently used entry was used
within the last `IN_USE` x (entries held) uses of the cache (every entry is in use), the victim
is the newest entry that has not hit since it came in, other than the one coming in now: the
entries that hit keep hitting, and a cache holding C of N conversations in use hits about
(C - 1) / N of their turns instead of none (for N up to `IN_USE` x C; past that it is an LRU
again, whose hits there would be few anyway). An entry unused for longer goes first, least
recently used: once the conversations in use change, the ones that stopped are all evicted
within a few times the cache's size in uses.

Time is counted in uses, not seconds, so the rule needs no setting and the same load gives the
same choices however fast it runs.

Used by the history cache (`proxy/history_cache.py`: its histories, and the histories and bodies
it indexes under one first message or one credential) and the branch memos
(`proxy/projector.py`); the owner serializes calls (each holds its own lock).

Example::

    order = Eviction()
    order.touch("a"); order.touch("b"); order.hit("a")
    order.evict(newest="c")    # "b": "a" hit, and both were used a moment ago
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

IN_USE = 4
"""An entry used within the last IN_USE x (entries held) uses of its cache is in use."""


class Eviction(Generic[K]):
    def __init__(self) -> None:
        self._uses = 0
        self._used: OrderedDict[K, int] = OrderedDict()
        """Every key with the count of uses at its last use, least recent first."""
        self._fresh: dict[K, None] = {}
        """Keys that have not hit since they came in, in the order they came in."""

    def touch(self, key: K) -> None:
        """`key` was used (stored, or stored again): it becomes the most recent."""
        if key not in self._used:
            self._fresh[key] = None
        self._uses += 1
        self._used[key] = self._uses
        self._used.move_to_end(key)

    def hit(self, key: K) -> None:
        """`key` was found and used: the most recent, and no longer fresh."""
        self.touch(key)
        self._fresh.pop(key, None)

    def discard(self, key: K) -> None:
        """`key` is gone by the owner's own choice (superseded, or dropped from an index)."""
        self._used.pop(key, None)
        self._fresh.pop(key, None)

    def __len__(self) -> int:
        return len(self._used)

    def evict(self, newest: K | None = None) -> K | None:
        """The key the caller must now drop, no longer tracked here: `newest` (the one coming
        in) only when it is the only one; None when there is none."""
        key = self._victim(newest)
        if key is not None:
            del self._used[key]
            self._fresh.pop(key, None)
        return key

    def _victim(self, newest: K | None) -> K | None:
        if not self._used:
            return None
        if self._uses - next(iter(self._used.values())) < IN_USE * len(self._used):
            for key in reversed(self._fresh):
                if key != newest:
                    return key
        for key in self._used:
            if key != newest:
                return key
        return newest
