"""`proxy.eviction`: a full cache whose entries are all in use keeps those that hit (a plain LRU
smaller than the conversations taken in turn hits nothing); idle entries go least recent first."""

from __future__ import annotations

from proxy import identify
from proxy.eviction import Eviction
from proxy.history_cache import HistoryCache, Remembered


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def in_turn(order: Eviction[int], keys: int, capacity: int, rounds: int, clock: Clock, step: float) -> list[int]:
    """Hits per round of `keys` keys used in turn by a cache of `capacity` managed by `order`."""
    held: set[int] = set()
    hits = []
    for _ in range(rounds):
        n = 0
        for key in range(keys):
            clock.now += step
            if key in held:
                order.hit(key)
                n += 1
                continue
            held.add(key)
            order.touch(key)
            while len(held) > capacity:
                victim = order.victim(key)
                assert victim is not None and victim != key
                order.forget(victim)
                held.remove(victim)
        hits.append(n)
    return hits


def test_keys_in_turn_past_the_capacity_keep_hitting_while_in_use() -> None:
    clock = Clock()
    hits = in_turn(Eviction(300, clock), keys=8, capacity=4, rounds=5, clock=clock, step=1)
    assert hits == [0, 3, 3, 3, 3]  # the first 3 stay; a plain LRU: [0, 0, 0, 0, 0]


def test_idle_entries_go_least_recently_used_first() -> None:
    clock = Clock()
    hits = in_turn(Eviction(300, clock), keys=8, capacity=4, rounds=3, clock=clock, step=400)
    assert hits == [0, 0, 0]  # every entry idle at each eviction: LRU, as before
    order: Eviction[str] = Eviction(300, clock)
    for key in "abc":
        clock.now += 400
        order.touch(key)
    order.hit("a")
    assert order.victim("d") == "b"  # idle since the longest


def test_a_hot_entry_is_never_the_victim_while_in_use() -> None:
    clock = Clock()
    order: Eviction[str] = Eviction(300, clock)
    for key in ("hot", "x", "y"):
        order.touch(key)
    order.hit("hot")
    assert order.victim("z") == "y"  # the newest that has not hit, not the hot one
    order.forget("y")
    assert order.victim("z") == "x"
    order.forget("x")
    assert order.victim("z") == "hot"  # nothing else left
    assert Eviction(300, clock).victim("z") is None


def test_the_history_cache_keeps_conversations_that_hit_when_all_are_in_use() -> None:
    clock = Clock()
    cache = HistoryCache(max_bytes=400, in_use_seconds=300, clock=clock)
    histories = [[{"role": "user", "content": f"conversation {i}"}] for i in range(8)]
    hits = []
    for _ in range(4):
        n = 0
        for h in histories:
            clock.now += 1
            n += cache.lookup("t", h) is not None
            cache.remember("t", Remembered(h, identify.chain("t", h), 100))
            assert cache._bytes <= 400
        hits.append(n)
    assert hits == [0, 3, 3, 3]
