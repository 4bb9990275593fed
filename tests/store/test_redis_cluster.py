"""Redis Cluster specifics on top of the contract suite (which runs on the session's local cluster
too): the store URL, one slot per conversation, shards spread over the primaries, and WAIT."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy import identify
from proxy.config import Config
from proxy.config_file import load_config
from proxy.errors import StoreError
from proxy.store import make_store
from proxy.store.base import CallRecord, CheckpointCandidate, NewEvent, Position
from proxy.store.redis import RedisStore
from proxy.store.redis.keys import Layout
from tests.support.redis_server import RedisCluster, dump

pytestmark = pytest.mark.cluster

T1 = "t_tenant_one"
REPO = Path(__file__).resolve().parent.parent.parent


def events(n: int, tag: str = "") -> list[NewEvent]:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag}m{i}"} for i in range(n)]
    return [NewEvent(m["role"], m, h, "request") for m, h in zip(messages, identify.chain(T1, messages), strict=True)]


@pytest.fixture
async def cluster_store(redis_cluster: RedisCluster) -> AsyncIterator[Any]:
    opened: list[RedisStore] = []
    prefix = f"clt-{uuid.uuid4().hex[:8]}:"

    async def make(**options: Any) -> RedisStore:
        query = "&".join(f"{k}={v}" for k, v in {"prefix": prefix, **options}.items())
        store = make_store(f"{redis_cluster.url}/?{query}")
        assert isinstance(store, RedisStore)
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


def test_store_urls() -> None:
    store = make_store("redis+cluster://10.0.0.1:7000,10.0.0.2:7001/?prefix=team:&wait_replicas=1&wait_timeout_ms=50")
    assert isinstance(store, RedisStore) and store.cluster
    assert (store.prefix, store.wait_replicas, store.wait_timeout_ms, store.failover_wait) == ("team:", 1, 50, 10.0)
    assert store.location == "redis+cluster://10.0.0.1:7000,10.0.0.2:7001"
    secret = make_store("rediss+cluster://u:s3cret@h1:7000/?failover_wait_ms=0")
    assert isinstance(secret, RedisStore) and secret.cluster and secret.failover_wait == 0
    assert "s3cret" not in secret.location
    single = make_store("redis://127.0.0.1:6379/0")
    assert isinstance(single, RedisStore) and not single.cluster and single.failover_wait == 0
    for bad in ("?wait_replicas=x", "?wait_timeout_ms=-1", "?prefix={oops}:", "?failover_wait_ms=1.5"):
        with pytest.raises(StoreError):
            make_store("redis+cluster://h:1" + "/" + bad)
    base = {"routes": [{"name": "r", "match": {"model": "*"}, "upstream": {"base_url": "http://127.0.0.1:1/v1"}}]}
    assert Config.model_validate({**base, "store": "redis+cluster://h:1,h:2"}).store == "redis+cluster://h:1,h:2"


async def test_open_with_a_bad_seed_is_a_store_error() -> None:
    store = make_store("redis+cluster://127.0.0.1:notaport")
    with pytest.raises(StoreError):
        await store.open()


async def test_a_conversation_is_one_slot_and_conversations_spread(
    redis_cluster: RedisCluster, cluster_store: Any
) -> None:
    store = await cluster_store()
    convs = []
    for n in range(12):
        conv = await store.create_conversation(T1, None if n % 2 else f"ext-{n}")
        await store.append(Position(conv.id, conv.main_branch_id, 0), events(4, f"c{n}-"), "sys")
        fork = await store.append(Position(conv.id, conv.main_branch_id, 0), events(1, f"fork{n}-"), None)
        hashes = [e.chain_hash for e in events(4, f"c{n}-")]
        cp = CheckpointCandidate(conv.id, conv.main_branch_id, 0, 1, 2, hashes[1], "s", 3, None, 1)
        assert await store.commit_checkpoint(cp) is not None
        assert await store.acquire_lease(fork.branch_id, "replica-a", 30) is not None
        await store.record_call(
            CallRecord("call-" + conv.id, T1, "r", "m", "main", False, 1.0, conv.id, fork.branch_id)
        )
        convs.append(conv)
    homes: set[int] = set()
    for conv in convs:
        where = {port: keys for port, keys in redis_cluster.keys(f"{store.prefix}*{conv.id[2:]}*").items() if keys}
        assert len(where) == 1, where  # every key of the conversation on one primary...
        ((port, keys),) = where.items()
        client = next(n for n in redis_cluster.nodes if n.port == port).client()
        try:
            slots = {client.execute_command("CLUSTER", "KEYSLOT", k) for k in keys}
        finally:
            client.close()
        assert len(slots) == 1 and len(keys) == 11, keys  # ...in one slot
        homes.add(port)
    assert len(homes) >= 2  # 12 conversations over 3 primaries: all on one has odds of 3 in 177147
    listed = await store.list_conversations(100, None)
    assert sorted(c.id for c in listed) == sorted(c.id for c in convs)


async def test_wait_replicas_waits_for_an_ack(redis_cluster: RedisCluster, cluster_store: Any) -> None:
    store = await cluster_store(wait_replicas=1, wait_timeout_ms=400)
    conv = await store.create_conversation(T1, None)
    pos = await store.append(Position(conv.id, conv.main_branch_id, 0), events(2), None)
    # With the replica running, the write is on it when the append returns.
    primary = redis_cluster.node_of(Layout(store.prefix).one(conv.id, "events"))
    client = primary.client()
    try:
        replica_port = int(client.info("replication")["slave0"]["port"])
    finally:
        client.close()
    replica = next(n for n in redis_cluster.nodes if n.port == replica_port)
    more = events(3)
    pos = await store.append(pos, more[2:], None)
    reader = replica.client()
    try:
        reader.execute_command("READONLY")
        assert reader.hexists(Layout(store.prefix).one(conv.id, "events"), f"{conv.main_branch_id}:3")
    finally:
        reader.close()
    # With the replica stopped, no ack comes: the write waits the whole timeout, then goes on.
    assert replica.proc is not None
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        pos = await store.append(pos, events(4)[3:], None)
        waited = time.monotonic() - started
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    assert pos.seq == 4
    assert waited >= 0.4, f"the append came back after {waited:.3f} s without a replica's ack"


def test_the_cluster_deployment_config_is_valid() -> None:
    config = load_config(REPO / "deploy" / "config.cluster.yaml")
    store = make_store(config.store)
    assert isinstance(store, RedisStore) and store.cluster and store.wait_replicas == 1


async def test_a_connection_torn_down_inside_redis_py_is_a_store_error(cluster_store: Any) -> None:
    """redis-py can fail with an AttributeError when a concurrent disconnect tore its connection
    down (a failover); that is a StoreError (503), while an AttributeError of our own is a bug."""
    store = await cluster_store()
    namespace: dict[str, Any] = {"__name__": "redis.asyncio.connection"}
    exec("async def ping():\n    raise AttributeError(\"'NoneType' object has no attribute 'writelines'\")", namespace)
    real = store._r
    try:
        store._r = type("Torn", (), {"ping": staticmethod(namespace["ping"])})()
        with pytest.raises(StoreError, match="writelines"):
            await store.ping()

        async def ours() -> None:
            raise AttributeError("a bug of ours")

        store._r = type("Buggy", (), {"ping": staticmethod(ours)})()
        with pytest.raises(AttributeError):
            await store.ping()
    finally:
        store._r = real


async def test_a_retracted_request_leaves_no_key_or_field_behind(
    redis_cluster: RedisCluster, cluster_store: Any
) -> None:
    """A rejected request's unstamped append, retracted, leaves every node byte-identical: the
    conversation's fields, the shard's listing and the tenant-wide identity index outside the slot."""
    store = await cluster_store()
    other = await store.create_conversation(T1, None)
    await store.append(Position(other.id, other.main_branch_id, 0), events(3), "sys")  # shares hashes
    conv = await store.create_conversation(T1, "ext-retract")
    head = await store.append(Position(conv.id, conv.main_branch_id, 0), events(2), "sys")

    def snapshot() -> dict[str, str]:
        out = {}
        for node in redis_cluster.primaries():
            client = node.client()
            try:
                out |= {k: dump(client, k) for k in client.scan_iter(match=store.prefix + "*", count=1000)}
            finally:
                client.close()
        return out

    before = snapshot()
    longer = events(3)[2:]  # the same third message `other` holds
    end = await store.append(head, longer, None, stamp=False)
    fork_events = events(2, "edited-")
    fork = await store.append(Position(conv.id, conv.main_branch_id, 0), fork_events, None, stamp=False)
    assert fork.branch_id != conv.main_branch_id and snapshot() != before
    assert await store.retract(fork, [e.chain_hash for e in fork_events]) is True
    assert await store.retract(end, [e.chain_hash for e in longer]) is True
    assert snapshot() == before
    match = await store.find_longest([e.chain_hash for e in events(3)], T1, None)
    assert match is not None and match.position == Position(other.id, other.main_branch_id, 3)
    assert await store.find_longest([e.chain_hash for e in fork_events], T1, None) is None
