"""`proxy.eviction`: a full cache whose entries are all in use keeps those that hit (a plain LRU
smaller than the conversations taken in turn hits nothing); entries out of use go least recently
used first, so a cache follows the conversations in use when they change."""

from __future__ import annotations

from proxy import identify
from proxy.eviction import IN_USE, Eviction
from proxy.history_cache import HistoryCache, Remembered


def in_turn(order: Eviction[int], held: set[int], keys: range, capacity: int, rounds: int) -> list[int]:
    """Hits per round of `keys` used in turn by a cache of `capacity` (`held`) run by `order`."""
    hits = []
    for _ in range(rounds):
        n = 0
        for key in keys:
            if key in held:
                order.hit(key)
                n += 1
                continue
            held.add(key)
            order.touch(key)
            while len(held) > capacity:
                victim = order.evict(key)
                assert victim is not None and victim != key
                held.remove(victim)
        hits.append(n)
    return hits


def test_keys_in_turn_past_the_capacity_keep_hitting_while_in_use() -> None:
    assert in_turn(Eviction(), set(), range(8), 4, 5) == [0, 3, 3, 3, 3]  # a plain LRU: all 0
    assert in_turn(Eviction(), set(), range(12), 4, 4) == [0, 3, 3, 3]


def test_far_more_keys_than_room_is_an_lru_again() -> None:
    # each key's turn comes back after more than IN_USE x (4 + the one coming in) uses: none is
    # in use, none is kept; up to that, 3 are
    assert in_turn(Eviction(), set(), range(IN_USE * 5), 4, 3) == [0, 3, 3]
    assert in_turn(Eviction(), set(), range(IN_USE * 5 + 4), 4, 3) == [0, 0, 0]


def test_when_the_keys_in_use_change_the_cache_follows_them() -> None:
    order: Eviction[int] = Eviction()
    held: set[int] = set()
    assert in_turn(order, held, range(4), 4, 3) == [0, 4, 4]  # the old set, hitting
    new = range(100, 106)
    hits = in_turn(order, held, new, 4, 12)
    assert hits[-3:] == [3, 3, 3], hits  # as many as a set in use from the start keeps
    assert held <= set(new)  # the old set is gone


def test_a_hot_entry_is_never_the_victim_while_others_are_fresh() -> None:
    order: Eviction[str] = Eviction()
    for key in ("hot", "x", "y"):
        order.touch(key)
    order.hit("hot")
    assert order.evict("z") == "y"  # the newest that has not hit
    assert order.evict("z") == "x"
    assert order.evict("z") == "hot"  # nothing else left
    order.touch("z")
    assert order.evict("z") == "z"  # the only one
    assert Eviction().evict("z") is None


def test_the_history_cache_keeps_conversations_that_hit_when_all_are_in_use() -> None:
    cache = HistoryCache(max_bytes=400)
    histories = [[{"role": "user", "content": f"conversation {i}"}] for i in range(8)]
    hits = []
    for _ in range(4):
        n = 0
        for h in histories:
            n += cache.lookup("t", h) is not None
            cache.remember("t", Remembered(h, identify.chain("t", h), 100))
            assert cache._bytes <= 400
        hits.append(n)
    assert hits == [0, 3, 3, 3]
