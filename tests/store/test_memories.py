"""The Store contract for long-term memory records (proxy/store/memories.py), on every backend of
the contract suite (SQLite, Redis, Redis Cluster: `stores` is test_contract's parametrized
fixture): saving, superseding and replacing with compare-and-set, reading a tenant's scopes,
the admin listing with filters and pages, deletes that leave nothing, and tenants that never
cross."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from proxy.store.base import Store
from proxy.store.memories import Memory, MemoryQuery, new_memory_id, tag_of_memory
from proxy.store.postgres import PostgresStore
from proxy.store.redis import RedisStore
from tests.store.conftest import Stores
from tests.store.test_contract import T1, T2
from tests.support.postgres_server import session_postgres
from tests.support.redis_server import session_cluster, session_server

_CLOCK = [time.time()]


def memory(
    tenant: str = T1, scope: str = "project:/srv/app", text: str = "deploy target: staging-2", **kw: Any
) -> Memory:
    _CLOCK[0] += 1.25  # distinct, exactly representable steps: ordering never ties by accident
    now = kw.pop("now", _CLOCK[0])
    fields: dict[str, Any] = dict(
        id=new_memory_id(tenant),
        tenant=tenant,
        scope=scope,
        text=text,
        status="active",
        writer="model",
        source={
            "conversation_id": "c_0011223344556677",
            "branch_id": "b_x",
            "seq": 7,
            "role": "user",
            "seen_in": "text",
        },
        created_at=now,
        updated_at=now,
        confirmed_at=now,
        confirmed_times=(now,),
        listed_from=now,
    )
    fields.update(kw)
    return Memory(**fields)


def test_ids_carry_their_tenant_tag() -> None:
    one = new_memory_id(T1)
    assert one.startswith("m_") and len(one) == 18 and tag_of_memory(one) == new_memory_id(T1)[2:4]
    assert tag_of_memory("c_0123") is None and tag_of_memory("m_zz" + "0" * 14) is None


async def test_save_get_and_read_by_scope(store: Store) -> None:
    a = memory(text="deploy target: staging-2")
    b = memory(scope="user:alice", text="prefers tabs")
    c = memory(scope="tenant", text="company: Example Ltd")
    for m in (a, b, c):
        assert await store.save_memory(m) is True
    assert await store.get_memory(a.id) == a
    assert await store.get_memory(new_memory_id(T1)) is None
    assert await store.get_memory("not-an-id") is None
    assert await store.scope_memories(T1, ["project:/srv/app", "tenant"]) == [c, a]  # newest first
    assert await store.scope_memories(T1, ["user:alice"]) == [b]
    assert await store.scope_memories(T1, []) == []
    assert await store.save_memory(a) is False  # an id is saved once


async def test_tenants_never_cross(store: Store) -> None:
    mine = memory(T1, scope="project:/srv/app")
    theirs = memory(T2, scope="project:/srv/app", text="deploy target: prod")
    await store.save_memory(mine)
    await store.save_memory(theirs)
    assert await store.scope_memories(T1, ["project:/srv/app"]) == [mine]
    assert await store.scope_memories(T2, ["project:/srv/app"]) == [theirs]
    assert await store.scope_memories("t_nobody", ["project:/srv/app", "tenant"]) == []
    assert await store.list_memories(MemoryQuery(tenant=T2), 10, 0) == [theirs]
    # a superseded record of another tenant is refused, and so is a replace under another tenant
    assert await store.save_memory(memory(T2, text="x"), supersedes=mine) is False
    assert await store.replace_memory(dataclasses.replace(mine, tenant=T2, text="stolen"), mine.updated_at) is False
    assert await store.get_memory(mine.id) == mine
    # deleting a conversation's memories deletes only that tenant's
    assert await store.delete_memories_from(T2, "c_0011223344556677") == 1
    assert await store.scope_memories(T1, ["project:/srv/app"]) == [mine]


async def test_save_supersedes_in_one_write(store: Store) -> None:
    old = memory(text="deploy target: staging-2")
    await store.save_memory(old)
    new = memory(text="deploy target: staging-3")
    assert await store.save_memory(new, supersedes=old) is True
    stored = await store.get_memory(old.id)
    assert stored is not None
    assert (stored.status, stored.superseded_by, stored.listed_until, stored.updated_at) == (
        "superseded",
        new.id,
        new.created_at,
        new.created_at,
    )
    assert stored.listed_at(old.created_at) and not stored.listed_at(new.created_at)
    # the record changed since it was read: a second supersede of the same old record is refused
    late = memory(text="deploy target: staging-4")
    assert await store.save_memory(late, supersedes=old) is False
    assert await store.get_memory(late.id) is None
    assert {m.id for m in await store.scope_memories(T1, ["project:/srv/app"])} == {old.id, new.id}


async def test_replace_is_compare_and_set(store: Store) -> None:
    m = memory()
    await store.save_memory(m)
    confirmed = m.confirmed(m.updated_at + 1)
    assert (confirmed.confirmations, confirmed.confirmations_at(m.updated_at), confirmed.confirmations_at(1e12)) == (
        2,
        1,
        2,
    )
    assert await store.replace_memory(confirmed, m.updated_at) is True
    forgotten = dataclasses.replace(m, status="forgotten", text="", updated_at=m.updated_at + 2)
    assert await store.replace_memory(forgotten, m.updated_at) is False  # read before the confirmation
    assert await store.get_memory(m.id) == confirmed
    assert await store.replace_memory(dataclasses.replace(forgotten), confirmed.updated_at) is True
    assert await store.get_memory(m.id) == forgotten
    ghost = memory()
    assert await store.replace_memory(ghost, ghost.updated_at) is False
    assert await store.get_memory(ghost.id) is None


async def test_list_filters_and_pages(store: Store) -> None:
    saved = [
        memory(T1, "project:/a", "port: 5432"),
        memory(T1, "project:/b", "Port: 8080", status="unconfirmed"),
        memory(T2, "project:/a", "port: 1"),
        memory(T1, "tenant", "nothing to see"),
        memory(T1, "project:/a", "name: db", source={"conversation_id": "c_other"}),
    ]
    for m in saved:
        await store.save_memory(m)
    newest = list(reversed(saved))
    assert await store.list_memories(MemoryQuery(), 100, 0) == newest
    assert await store.list_memories(MemoryQuery(tenant=T1), 2, 0) == [saved[4], saved[3]]
    assert await store.list_memories(MemoryQuery(tenant=T1), 2, 2) == [saved[1], saved[0]]
    assert await store.list_memories(MemoryQuery(tenant=T1), 2, 4) == []
    assert await store.list_memories(MemoryQuery(scope="project:/a"), 10, 0) == [saved[4], saved[2], saved[0]]
    assert await store.list_memories(MemoryQuery(text="PORT"), 10, 0) == [saved[2], saved[1], saved[0]]
    assert await store.list_memories(MemoryQuery(status="unconfirmed"), 10, 0) == [saved[1]]
    assert await store.list_memories(MemoryQuery(conversation_id="c_other"), 10, 0) == [saved[4]]
    assert await store.list_memories(MemoryQuery(tenant=T1, text="port"), 1, 1) == [saved[0]]


async def test_delete_leaves_nothing(stores: Stores, store: Store) -> None:
    secret = "the staging password is hunter2-" + new_memory_id(T1)
    gone = memory(text=secret)
    kept = memory(text="kept")
    await store.save_memory(gone)
    await store.save_memory(kept)
    assert await store.delete_memory(gone.id) is True
    assert await store.delete_memory(gone.id) is False
    assert await store.get_memory(gone.id) is None
    assert await store.scope_memories(T1, ["project:/srv/app"]) == [kept]
    assert await store.list_memories(MemoryQuery(), 10, 0) == [kept]
    assert not _anywhere(store, gone.id) and not _anywhere(store, "hunter2")
    # deleting what came from a conversation
    assert await store.delete_memories_from(T1, "c_0011223344556677") == 1
    assert await store.list_memories(MemoryQuery(), 10, 0) == []
    assert not _anywhere(store, kept.id)
    reopened = await stores.reopen(store)
    assert await reopened.get_memory(gone.id) is None and await reopened.get_memory(kept.id) is None


def _anywhere(store: Store, needle: str) -> bool:
    """Whether `needle` is still in the backend's storage: any SQLite row, any Redis key name,
    field, member or value under the store's prefix, any row of the PostgreSQL store's schema."""
    if isinstance(store, RedisStore):
        return _in_redis(store, needle)
    if isinstance(store, PostgresStore):
        server = session_postgres()
        tables = server.psql(f"SELECT tablename FROM pg_tables WHERE schemaname = '{store.schema}'").split()
        return any(needle in server.psql(f'SELECT t::text FROM "{store.schema}"."{table}" t') for table in tables)
    db = store.db  # type: ignore[attr-defined]
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]
    return any(needle in repr(row) for table in tables for row in db.execute(f"SELECT * FROM {table}").fetchall())


def _in_redis(store: RedisStore, needle: str) -> bool:
    nodes = [n.client() for n in session_cluster().primaries()] if store.cluster else [session_server().client()]
    try:
        return any(needle in _dump(client, key) for client in nodes for key in client.scan_iter(store.prefix + "*"))
    finally:
        for client in nodes:
            client.close()


def _dump(client: Any, key: str) -> str:
    """A key's name and everything it holds, as text."""
    kind = client.type(key)
    read = {
        "hash": client.hgetall,
        "zset": lambda k: client.zrange(k, 0, -1),
        "set": client.smembers,
        "list": lambda k: client.lrange(k, 0, -1),
        "string": client.get,
    }[kind]
    return key + repr(read(key))
