"""The Store contract for client keys made through the admin API and for the counters of budgets
and rate limits (proxy/store/access.py), on every backend of the contract suite (SQLite, Redis,
Redis Cluster: `stores` is test_contract's parametrized fixture), and the atomic "delete while
still empty" of a failed first request's conversation."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from proxy.store.access import ApiKey, Count
from proxy.store.base import Store
from tests.store.conftest import Stores
from tests.store.test_contract import T1, U1, call_record, new_events, origin


def api_key(n: int, **kw: Any) -> ApiKey:
    fields: dict[str, Any] = dict(
        id=f"key_{n:012x}",
        digest=f"{n:064x}",
        name=f"bot-{n}",
        tenant="team-a",
        routes=("main",),
        limits={"usd_per_day": 1.5, "requests_per_minute": 10},
        hint="ab12",
        created_at=1_700_000_000.0 + n,
        expires_at=None,
    )
    fields.update(kw)
    return ApiKey(**fields)


async def test_keys_saved_found_by_digest_listed_and_deleted(store: Store) -> None:
    one, two = api_key(1), api_key(2, routes=None, expires_at=1_800_000_000.5, limits={})
    assert await store.list_api_keys() == []
    assert await store.save_api_key(two) is True
    assert await store.save_api_key(one) is True
    assert await store.api_key_by_digest(one.digest) == one
    assert await store.api_key_by_digest(two.digest) == two
    assert await store.api_key_by_digest("0" * 64) is None
    assert await store.list_api_keys() == [one, two]  # oldest first
    # an id or a digest is stored once
    assert await store.save_api_key(api_key(1, digest="f" * 64)) is False
    assert await store.save_api_key(api_key(3, digest=one.digest)) is False
    assert await store.delete_api_key(one.id) is True
    assert await store.api_key_by_digest(one.digest) is None
    assert await store.delete_api_key(one.id) is False
    assert await store.delete_api_key("key_unknown") is False
    assert await store.list_api_keys() == [two]


async def test_keys_are_shared_by_every_store_on_the_same_data(stores: Stores, store: Store) -> None:
    await store.save_api_key(api_key(7))
    other = await stores.open("main")  # another replica on the same data
    assert await other.api_key_by_digest(api_key(7).digest) == api_key(7)
    assert await other.delete_api_key(api_key(7).id) is True
    assert await store.api_key_by_digest(api_key(7).digest) is None


async def test_counters_add_read_and_stay_apart(store: Store) -> None:
    later = time.time() + 3600
    assert await store.add_counts([]) == []
    assert await store.add_counts([Count("tenant:a:usd:2026-12-05", 0.25, later)]) == [0.25]
    values = await store.add_counts(
        [Count("tenant:a:usd:2026-12-05", 0.5, later), Count("tenant:a:tokens:2026-12-05", 1200, later)]
    )
    assert values == [0.75, 1200.0]
    assert await store.add_counts([Count("tenant:a:usd:2026-12-05", 0, later)]) == [0.75]  # 0 reads
    assert await store.add_counts([Count("tenant:b:usd:2026-12-05", 0, later)]) == [0.0]


async def test_an_expired_counter_starts_again_at_zero(store: Store) -> None:
    soon = time.time() + 1.0
    assert await store.add_counts([Count("key:k:requests:m1", 3, soon)]) == [3.0]
    await asyncio.sleep(2.1)
    assert await store.add_counts([Count("key:k:requests:m1", 1, time.time() + 60)]) == [1.0]


async def test_concurrent_additions_are_exact(stores: Stores, store: Store) -> None:
    other = await stores.open("main")  # a second replica on the same data
    later = time.time() + 3600

    async def add(s: Store) -> None:
        for _ in range(25):
            await s.add_counts([Count("tenant:a:requests:m", 1, later), Count("tenant:a:usd:d", 0.01, later)])

    await asyncio.gather(add(store), add(other), add(store), add(other))
    requests, usd = await store.add_counts([Count("tenant:a:requests:m", 0, later), Count("tenant:a:usd:d", 0, later)])
    assert requests == 100.0
    assert abs(usd - 1.0) < 1e-9


async def test_delete_only_if_empty_keeps_a_continued_conversation(store: Store) -> None:
    empty = await store.create_conversation(T1, None)
    assert await store.delete_conversation(empty.id, only_if_empty=True) is True
    assert await store.get_conversation(empty.id) is None
    # continued by another request meanwhile: it has events
    continued = await store.create_conversation(T1, "ext-1")
    await store.append(origin(continued), new_events(T1, [U1]), "s")
    assert await store.delete_conversation(continued.id, only_if_empty=True) is False
    assert await store.get_conversation(continued.id) is not None
    # no events but a call record (a consumed recall round): the ledger keeps it
    recorded = await store.create_conversation(T1, None)
    await store.record_call(call_record(recorded.id, recorded.main_branch_id, "call-kept", 1.0))
    assert await store.delete_conversation(recorded.id, only_if_empty=True) is False
    assert len(await store.list_calls(recorded.id, 10, 0)) == 1
    assert await store.delete_conversation(continued.id) is True  # without the condition: deleted
