"""Redis-only guarantees on top of the contract: delete leaves no key behind, appends and checkpoint
commits stay atomic under concurrency (several clients = several replicas), and a Redis outage is a
fast StoreError that heals by itself."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis as sync_redis

from proxy import identify
from proxy.errors import ConversationGone, StoreError
from proxy.ledger import cells_from_calls
from proxy.store import make_store
from proxy.store.base import (
    CallRecord,
    CheckpointCandidate,
    NewEvent,
    Position,
    UsageCell,
    UsageQuery,
)
from proxy.store.redis import RedisStore
from proxy.store.redis.keys import Layout as store_keys
from proxy.store.redis.keys import tag_of
from proxy.store.sqlite import SqliteStore
from proxy.types import Message
from tests.support.redis_server import RedisServer, dump

T1 = "t_tenant_one"


def msg(i: int, tag: str = "") -> Message:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag}m{i}"}


def history(n: int, tag: str = "") -> list[Message]:
    return [msg(i, tag) for i in range(n)]


def events_of(messages: list[Message], start: int = 0) -> list[NewEvent]:
    hashes = identify.chain(T1, messages)
    return [NewEvent(m["role"], m, h, "request") for m, h in list(zip(messages, hashes, strict=True))[start:]]


def origin(conv: Any) -> Position:
    return Position(conv.id, conv.main_branch_id, 0)


def call(conv_id: str, branch_id: str, call_id: str, purpose: str = "main") -> CallRecord:
    return CallRecord(
        id=call_id,
        tenant=T1,
        route="main",
        model="m",
        purpose=purpose,
        stream=False,
        started_at=time.time(),
        conversation_id=conv_id,
        branch_id=branch_id,
        status="complete",
        response={"role": "assistant", "content": "r"},
    )


@pytest.fixture
def prefix() -> str:
    return f"rtest:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def raw(redis_server: RedisServer, prefix: str) -> Iterator[sync_redis.Redis]:
    client = redis_server.client()
    yield client
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
async def open_stores(redis_server: RedisServer, prefix: str, raw: sync_redis.Redis) -> AsyncIterator[Any]:
    """open_stores(n) -> n independent clients (own connection pools) on the same prefix."""
    opened: list[RedisStore] = []

    async def make(n: int = 1) -> list[RedisStore]:
        out = []
        for _ in range(n):
            store = RedisStore(redis_server.url, prefix=prefix)
            await store.open()
            opened.append(store)
            out.append(store)
        return out

    yield make
    for store in opened:
        await store.close()


# -- delete ---------------------------------------------------------------------------------------


async def test_delete_leaves_no_key_or_index_entry_behind(open_stores: Any, raw: sync_redis.Redis, prefix: str) -> None:
    (store,) = await open_stores()
    await store.tenant_salt()
    keep = await store.create_conversation(T1, "keep")
    await store.append(origin(keep), events_of(history(2)), "sys")
    await store.record_call(call(keep.id, keep.main_branch_id, "call-keep"))
    before = {k: dump(raw, k) for k in raw.scan_iter(match=prefix + "*")}

    conv = await store.create_conversation(T1, "doomed-external")
    main = conv.main_branch_id
    shared = history(3)  # shares its first two messages with `keep`
    await store.append(origin(conv), events_of(shared), "sys")
    child = await store.append(origin(conv), events_of(history(2) + [msg(2, "edited-")]), "sys")
    grand = await store.append(origin(conv), events_of(history(2) + [msg(2, "edited-"), msg(3, "x-")]), None)
    await store.append(child, events_of(history(2) + [msg(2, "edited-"), msg(3, "y-")], start=3), None)
    await store.record_call(call(conv.id, main, "call-doomed-1"))
    await store.record_call(call(conv.id, child.branch_id, "call-doomed-2", purpose="summary"))
    hashes = identify.chain(T1, shared)
    first = await store.commit_checkpoint(CheckpointCandidate(conv.id, main, 0, 1, 2, hashes[1], "sum", 5, None, 1))
    assert first is not None
    await store.record_failed_checkpoint(CheckpointCandidate(conv.id, main, 1, 1, 3, hashes[2], "x", 5, None, 1), "bad")
    assert await store.acquire_lease(main, "replica-a", 30) is not None
    assert await store.acquire_lease(child.branch_id, "replica-a", 30) is not None
    branches = [b.id for b in await store.list_branches(conv.id)]
    assert len(branches) >= 3 and grand.branch_id in branches
    owned = [conv.id, *branches, first.id, "call-doomed-1", "call-doomed-2", "doomed-external"]
    assert any(conv.id in k for k in raw.scan_iter(match=prefix + "*"))

    assert await store.delete_conversation(conv.id) is True

    after = {k: dump(raw, k) for k in raw.scan_iter(match=prefix + "*")}
    for ident in owned:
        assert list(raw.scan_iter(match=f"*{ident}*")) == [], ident
    # Exactly the keys that existed before, plus the tombstone set (of the conversation's shard)
    # that fences late writes.
    tombstones = store.keys.tagged(tag_of(conv.id), "tombstones")
    assert set(after) == set(before) | {tombstones}
    assert raw.zrange(tombstones, 0, -1) == [conv.id]
    # The shared entries (chain hash -> conversations, the conversation list) are back to what they were.
    for key, value in after.items():
        if key != tombstones:
            assert value == before[key], key
            assert not any(ident in value for ident in owned), key
    # The other conversation still answers its prefix; the deleted one stays deleted.
    match = await store.find_longest(hashes, T1, None)
    assert match is not None and match.position == Position(keep.id, keep.main_branch_id, 2)
    with pytest.raises(ConversationGone):
        await store.append(Position(conv.id, main, 3), events_of(history(4), start=3), None)
    with pytest.raises(ConversationGone):
        await store.record_call(call(conv.id, main, "late"))
    assert {k for k in raw.scan_iter(match=prefix + "*")} == set(after)


async def test_late_writes_from_another_replica_do_not_recreate_keys(
    open_stores: Any, raw: sync_redis.Redis, prefix: str
) -> None:
    one, two = await open_stores(2)
    conv = await one.create_conversation(T1, None)
    hashes = identify.chain(T1, history(4))
    pos = await one.append(origin(conv), events_of(history(4)), None)
    assert await two.delete_conversation(conv.id) is True
    with pytest.raises(ConversationGone):
        await one.append(pos, events_of(history(5), start=4), "sys")
    with pytest.raises(ConversationGone):
        await one.commit_checkpoint(
            CheckpointCandidate(conv.id, conv.main_branch_id, 0, 1, 2, hashes[1], "s", 1, None, 1)
        )
    with pytest.raises(ConversationGone):
        await one.record_failed_checkpoint(
            CheckpointCandidate(conv.id, conv.main_branch_id, 0, 1, 2, hashes[1], "s", 1, None, 1), "late"
        )
    assert list(raw.scan_iter(match=f"*{conv.id}*")) == []
    assert list(raw.scan_iter(match=f"*{conv.main_branch_id}*")) == []


# -- concurrency ----------------------------------------------------------------------------------


async def test_concurrent_identical_appends_store_one_set_of_events(
    open_stores: Any, raw: sync_redis.Redis, prefix: str
) -> None:
    stores = await open_stores(8)
    conv = await stores[0].create_conversation(T1, None)
    messages = history(120)
    results = await asyncio.gather(*(s.append(origin(conv), events_of(messages), "sys") for s in stores))
    assert set(results) == {Position(conv.id, conv.main_branch_id, 120)}
    events = await stores[3].lineage_events(conv.main_branch_id, 0, 1000)
    assert [(e.branch_id, e.seq, e.message) for e in events] == [
        (conv.main_branch_id, i + 1, m) for i, m in enumerate(messages)
    ]
    assert len(await stores[5].list_branches(conv.id)) == 1
    assert raw.hlen(store_keys(prefix).one(conv.id, "events")) == 120
    assert raw.hlen(store_keys(prefix).one(conv.id, "chain")) == 240  # position -> hash, hash -> position


async def test_concurrent_growing_appends_keep_a_total_order(open_stores: Any) -> None:
    stores = await open_stores(8)
    conv = await stores[0].create_conversation(T1, None)
    messages = history(160)
    # Eight replicas each see a longer prefix of the same conversation, all at once, from the root.
    results = await asyncio.gather(
        *(s.append(origin(conv), events_of(messages[: 20 * (k + 1)]), None) for k, s in enumerate(stores))
    )
    assert results == [Position(conv.id, conv.main_branch_id, 20 * (k + 1)) for k in range(8)]
    events = await stores[1].lineage_events(conv.main_branch_id, 0, 1000)
    assert [e.seq for e in events] == list(range(1, 161))
    assert [e.message for e in events] == messages
    assert len(await stores[0].list_branches(conv.id)) == 1


async def test_concurrent_diverging_appends_fork_and_lose_nothing(open_stores: Any) -> None:
    stores = await open_stores(8)
    conv = await stores[0].create_conversation(T1, None)
    common = history(10)
    await stores[0].append(origin(conv), events_of(common[:4]), None)
    tails = [history(15, tag=f"r{k}-")[10:] for k in range(8)]
    results = await asyncio.gather(
        *(s.append(origin(conv), events_of(common + tails[k]), None) for k, s in enumerate(stores))
    )
    assert all(p.seq == 15 and p.conversation_id == conv.id for p in results)
    assert len({p.branch_id for p in results}) == 8
    branches = {b.id: b for b in await stores[2].list_branches(conv.id)}
    assert set(branches) == {p.branch_id for p in results}  # main plus seven forks at seq 10
    forks = [b for b in branches.values() if b.parent_id is not None]
    assert len(forks) == 7
    assert all((b.parent_id, b.fork_seq, b.head_seq) == (conv.main_branch_id, 10, 15) for b in forks)
    for k, pos in enumerate(results):
        events = await stores[k].lineage_events(pos.branch_id, 0, 100)
        assert [e.message for e in events] == common + tails[k]
        assert [e.seq for e in events] == list(range(1, 16))
    # Every event is findable again, on its own branch.
    for k, pos in enumerate(results):
        match = await stores[0].find_longest(identify.chain(T1, common + tails[k] + [msg(99)]), T1, None)
        assert match is not None and (match.position, match.count) == (pos, 15)


async def test_checkpoint_commit_race_has_exactly_one_winner(open_stores: Any) -> None:
    one, two = await open_stores(2)
    conv = await one.create_conversation(T1, None)
    main = conv.main_branch_id
    messages = history(30)
    hashes = identify.chain(T1, messages)
    await one.append(origin(conv), events_of(messages), None)
    for generation in range(12):
        through = generation + 2
        a = CheckpointCandidate(
            conv.id, main, generation, 1, through, hashes[through - 1], f"a{generation}", 9, None, 1
        )
        b = CheckpointCandidate(
            conv.id, main, generation, 1, through, hashes[through - 1], f"b{generation}", 9, None, 1
        )
        results = await asyncio.gather(one.commit_checkpoint(a), two.commit_checkpoint(b))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        assert winners[0].generation == generation + 1
        assert await two.active_checkpoint(main) == winners[0]
    checkpoints = await one.list_checkpoints(conv.id)
    assert [c.generation for c in checkpoints] == list(range(1, 13))
    assert [c.status for c in checkpoints] == ["superseded"] * 11 + ["active"]


# -- identity lookups -----------------------------------------------------------------------------


async def test_find_longest_reads_the_tail_first(open_stores: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (store,) = await open_stores()
    conv = await store.create_conversation(T1, None)
    messages = history(3000)
    await store.append(origin(conv), events_of(messages), None)
    probes: list[tuple[int, int]] = []
    by_index, by_conversation = store._probe_index, store._probe_one

    async def counting_index(hashes: list[str], start: int, end: int, tenant: str) -> Any:
        probes.append((start, end))
        return await by_index(hashes, start, end, tenant)

    async def counting_one(cid: str, hashes: list[str], start: int, end: int) -> Any:
        probes.append((start, end))
        return await by_conversation(cid, hashes, start, end)

    monkeypatch.setattr(store, "_probe_index", counting_index)
    monkeypatch.setattr(store, "_probe_one", counting_one)
    match = await store.find_longest(identify.chain(T1, messages + [msg(3000)]), T1, None)
    assert match is not None and match.count == 3000
    assert probes == [(2997, 3001)]  # one pipelined round trip for the usual continuing request
    probes.clear()
    edited = messages[:2500] + history(501, tag="e-")
    match = await store.find_longest(identify.chain(T1, edited), T1, conv.id)
    assert match is not None and match.count == 2500
    assert len(probes) == 2


# -- ledger ---------------------------------------------------------------------------------------


def _cells(cells: list[UsageCell]) -> dict[Any, Any]:
    out = {}
    for c in cells:
        sums = {k: (round(v, 9) if isinstance(v, float) else v) for k, v in c.sums.items()}
        out[(c.key, c.purpose, c.status)] = (c.calls, sums, dict(c.known))
    return out


async def test_usage_cells_agree_with_the_reference_and_sqlite(open_stores: Any, tmp_path: Any) -> None:
    (store,) = await open_stores()
    sqlite = SqliteStore(str(tmp_path / "ledger.db"))
    await sqlite.open()
    try:
        conv = await store.create_conversation(T1, None)
        other = await store.create_conversation("t_two", None)
        records = []
        for i in range(40):
            n = i % 37  # three ids are recorded twice (new status, usage, cost): the last write wins
            conv_id = [conv.id, other.id, None][n % 3]
            usage = {
                "input_total": 100 + i,
                "input_uncached": None if i % 4 == 0 else 10 + i,
                "cache_read": 90,
                "cache_write": None,
                "output": i,
                "reasoning": None if i % 2 else 0,
            }
            records.append(
                CallRecord(
                    id=f"call-{n}",
                    tenant=T1 if conv_id != other.id else "t_two",
                    route=["main", "side"][n % 2],
                    model=["gpt-a", None, "gpt-b"][n % 3],
                    purpose="summary" if n % 5 == 0 else "main",
                    stream=bool(i % 2),
                    started_at=1000.0 + n,
                    conversation_id=conv_id,
                    branch_id=None,
                    status=["complete", "partial", "error"][i % 3],
                    usage=usage,
                    cost_usd=None if i % 7 == 0 else 0.001 * i,
                    projection={"client_tokens": 500 + i, "sent_tokens": 300} if i % 6 else None,
                )
            )
        for record in records:
            await store.record_call(record)
            await sqlite.record_call(record)
        (got,) = [c for c in await store.list_calls(conv.id, 100, 0) if c.id == "call-3"]
        assert got.cost_usd == pytest.approx(0.003)
        queries = [
            UsageQuery(),
            UsageQuery(group_by="route"),
            UsageQuery(group_by="model"),
            UsageQuery(group_by="conversation"),
            UsageQuery(conversation_id=conv.id),
            UsageQuery(route="side", since=1005.0, until=1030.0),
            UsageQuery(tenant="t_two", group_by="route"),
            UsageQuery(until=1000.0),
            UsageQuery(conversation_id="c_unknown"),
        ]
        for query in queries:
            reference = _cells(cells_from_calls(records, query))
            assert _cells(await store.usage_cells(query)) == reference, query
            assert _cells(await sqlite.usage_cells(query)) == reference, query
        # Deleting a conversation takes its calls out of the ledger too.
        await store.delete_conversation(conv.id)
        left = [r for r in records if r.conversation_id != conv.id]
        assert _cells(await store.usage_cells(UsageQuery())) == _cells(cells_from_calls(left, UsageQuery()))
    finally:
        await sqlite.close()


# -- URLs, prefix, scripts ------------------------------------------------------------------------


async def test_url_prefix_and_every_key_under_it(redis_server: RedisServer, raw: sync_redis.Redis, prefix: str) -> None:
    store = make_store(f"{redis_server.url}?prefix={prefix}")
    assert isinstance(store, RedisStore) and store.prefix == prefix
    await store.open()
    try:
        before = set(raw.scan_iter(match="*"))
        conv = await store.create_conversation(T1, "ext")
        await store.append(origin(conv), events_of(history(3)), "s")
        await store.record_call(call(conv.id, conv.main_branch_id, "c1"))
        await store.put_blob("digest", "blob")
        await store.tenant_salt()
        new = set(raw.scan_iter(match="*")) - before
        assert new and all(k.startswith(prefix) for k in new)
    finally:
        await store.close()


async def test_default_prefix_and_rediss_scheme() -> None:
    store = make_store("redis://:secret@127.0.0.1:6390/3")
    assert isinstance(store, RedisStore) and store.prefix == "ctxproxy:"
    assert "secret" not in store.location
    tls = make_store("rediss://cache.example:6380/0")
    assert isinstance(tls, RedisStore) and tls.url.startswith("rediss://")
    broken = make_store("redis://127.0.0.1:not-a-port/0")
    with pytest.raises(StoreError):
        await broken.open()


async def test_password_url(tmp_path: Any) -> None:
    server = RedisServer(password="s3cr3t-pw").start()
    try:
        good = RedisStore(f"redis://:s3cr3t-pw@127.0.0.1:{server.port}/2", prefix="pw:")
        await good.open()
        try:
            conv = await good.create_conversation(T1, None)
            assert await good.get_conversation(conv.id) == conv
        finally:
            await good.close()
        bad = RedisStore(f"redis://:wrong@127.0.0.1:{server.port}/2", prefix="pw:")
        with pytest.raises(StoreError):
            await bad.open()
        # TLS against a plain server fails as a StoreError, quickly, instead of hanging.
        tls = RedisStore(f"rediss://:s3cr3t-pw@127.0.0.1:{server.port}/2", prefix="pw:")
        await _fails_fast(tls.open())
    finally:
        server.stop()


async def test_scripts_survive_a_flushed_script_cache(open_stores: Any, raw: sync_redis.Redis) -> None:
    (store,) = await open_stores()
    conv = await store.create_conversation(T1, None)
    pos = await store.append(origin(conv), events_of(history(2)), None)
    raw.script_flush()
    assert await store.append(pos, events_of(history(3), start=2), None) == Position(conv.id, conv.main_branch_id, 3)
    assert len(await store.lineage_events(conv.main_branch_id, 0, 10)) == 3


# -- outages --------------------------------------------------------------------------------------


HANG = 30.0
"""How long a store operation may take before the tests call it hung. The store's own socket
timeouts (1.5 s) answer long before; "fast" is under half of this, a wide margin on a loaded CI."""


async def _fails_fast(coro: Any) -> float:
    started = time.monotonic()
    with pytest.raises(StoreError):
        await asyncio.wait_for(coro, timeout=HANG)
    elapsed = time.monotonic() - started
    assert elapsed < HANG / 2, f"took {elapsed:.2f}s to fail"
    return elapsed


async def test_redis_stopped_is_a_fast_store_error_and_restart_recovers() -> None:
    server = RedisServer().start()
    store = RedisStore(server.url, prefix="outage:")
    try:
        await store.open()
        conv = await store.create_conversation(T1, None)
        assert await store.ping() is True
        server.stop()
        await _fails_fast(store.ping())
        await _fails_fast(store.append(origin(conv), events_of(history(2)), None))
        await _fails_fast(store.get_conversation(conv.id))
        server.start()  # same port; a fresh, empty server (--save '')
        assert await store.ping() is True
        fresh = await store.create_conversation(T1, None)
        assert await store.append(origin(fresh), events_of(history(2)), None) == Position(
            fresh.id, fresh.main_branch_id, 2
        )
    finally:
        await store.close()
        server.stop()


async def test_redis_hanging_is_a_fast_store_error_and_resume_recovers() -> None:
    server = RedisServer().start()
    store = RedisStore(server.url, prefix="hang:")
    try:
        await store.open()
        conv = await store.create_conversation(T1, None)
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGSTOP)  # the server stops answering, sockets stay open
        try:
            await _fails_fast(store.append(origin(conv), events_of(history(2)), None))
            await _fails_fast(store.ping())
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        # The append may or may not have landed before the pause; either way it is idempotent.
        assert await store.append(origin(conv), events_of(history(2)), None) == Position(
            conv.id, conv.main_branch_id, 2
        )
        assert len(await store.lineage_events(conv.main_branch_id, 0, 10)) == 2
    finally:
        await store.close()
        server.stop()


async def test_open_against_no_server_fails_fast() -> None:
    server = RedisServer()  # never started: nothing listens on its port
    store = RedisStore(server.url, prefix="none:")
    await _fails_fast(store.open())
    with pytest.raises(StoreError):
        await store.ping()  # not open


# -- the proxy on Redis -----------------------------------------------------------------------------


def test_proxy_serves_records_and_deletes_on_redis(
    proxy: Any, upstream: Any, api_key: str, redis_server: RedisServer, raw: sync_redis.Redis, prefix: str
) -> None:
    from tests.support.upstream_server import Reply

    p = proxy(fresh=True, store=f"{redis_server.url}?prefix={prefix}")
    client = p.client(api_key)
    history: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    conv_ids = set()
    for turn in range(3):
        history.append({"role": "user", "content": f"question {turn}"})
        upstream.push(Reply(content=f"answer {turn}"))
        raw_response = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
        conv_ids.add(raw_response.headers["x-conversation-id"])
        history.append({"role": "assistant", "content": raw_response.parse().choices[0].message.content})
    (conv_id,) = conv_ids
    events = p.events(conv_id)
    assert [e["message"]["content"] for e in events] == [m["content"] for m in history[1:]]
    p.wait_calls(conv_id, 3)
    assert any(conv_id in k for k in raw.scan_iter(match=prefix + "*"))
    assert p.admin(f"conversations/{conv_id}", method="DELETE").status_code == 200
    assert p.admin(f"conversations/{conv_id}").status_code == 404
    assert list(raw.scan_iter(match=f"*{conv_id}*")) == []
    # The same history now starts a new conversation.
    upstream.push(Reply(content="again"))
    again = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history[:2])
    assert again.headers["x-conversation-id"] != conv_id


def test_proxy_answers_503_fast_while_redis_is_down(proxy: Any, upstream: Any, api_key: str) -> None:
    import httpx

    from tests.support.upstream_server import Reply

    server = RedisServer().start()
    try:
        p = proxy(fresh=True, store=server.url)
        assert httpx.get(f"{p.url}/healthz", timeout=10).status_code == 200
        server.stop()
        started = time.monotonic()
        assert httpx.get(f"{p.url}/healthz", timeout=HANG).status_code == 503
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        response = p.post_chat(api_key, body, timeout=HANG)
        assert response.status_code == 503, response.text
        elapsed = time.monotonic() - started
        assert elapsed < HANG / 2, f"two 503s took {elapsed:.1f} s: the proxy waited on the dead Redis"
        server.start()
        assert httpx.get(f"{p.url}/healthz", timeout=10).status_code == 200
        upstream.push(Reply(content="back"))
        response = p.post_chat(api_key, {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 200, response.text
    finally:
        server.stop()


async def test_more_concurrent_commands_than_connections_wait_for_one(
    redis_server: RedisServer, raw: sync_redis.Redis, prefix: str
) -> None:
    """A team's agents issue more concurrent commands than a replica has connections: they queue
    for a free one instead of failing (redis-py's default pool refuses the one over its size)."""
    store = make_store(f"{redis_server.url}?prefix={prefix}&max_connections=4")
    assert isinstance(store, RedisStore)
    await store.open()
    try:
        conv = await store.create_conversation(T1, None)
        await store.append(origin(conv), events_of(history(2)), "sys")
        results = await asyncio.gather(*(store.lineage_events(conv.main_branch_id, 0, 10) for _ in range(60)))
        assert all(len(events) == 2 for events in results)
    finally:
        await store.close()
