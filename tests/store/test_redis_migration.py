"""Layout 1 -> 2 (proxy/store/redis/migrate.py): data a ctxproxy wrote on one Redis server before
cluster support is converted at start-up, and reads, continues and deletes like data written now.

The layout-1 keys are written here by hand, as layout 1's scripts wrote them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis as sync_redis

from proxy import identify
from proxy.store.base import CheckpointCandidate, Position, UsageQuery
from proxy.store.redis import RedisStore
from proxy.store.redis.keys import main_branch_id, scoped
from tests.support.redis_server import RedisServer

T1 = "t_tenant_one"
CID, MAIN, FORK = "c_0123456789abcdef", "b_fedcba9876543210", "b_aaaabbbbccccdddd"


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[sync_redis.Redis]:
    client = redis_server.client()
    yield client
    keys = list(client.scan_iter(match="mig:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


HISTORY = [user("u1"), assistant("a1"), user("u2")]
FORKED = [user("u1"), assistant("a1"), user("u2-edited")]


def write_layout_1(r: sync_redis.Redis) -> None:
    P = "mig:"
    now = 1000.0
    r.set(P + "meta:tenant_salt", "ab" * 32)
    r.set(P + "blob:d1", "system text")
    conv_keys: set[str] = set()
    r.hset(
        P + f"conv:{CID}",
        mapping={
            "id": CID,
            "tenant": T1,
            "main_branch_id": MAIN,
            "external_id": "sess-1",
            "created_at": now,
            "updated_at": now + 5,
        },
    )
    r.set(P + f"ext:{scoped(T1, 'sess-1')}", CID)
    r.zadd(P + "convs", {CID: now + 5})
    r.rpush(P + f"conv-branches:{CID}", MAIN, FORK)
    hashes, forked = identify.chain(T1, HISTORY), identify.chain(T1, FORKED)
    r.hset(
        P + f"branch:{MAIN}",
        mapping={
            "conversation_id": CID,
            "fork_seq": 0,
            "head_seq": 3,
            "system_hash": "s1",
            "created_at": now,
            "updated_at": now + 5,
        },
    )
    r.hset(
        P + f"branch:{FORK}",
        mapping={
            "conversation_id": CID,
            "parent_id": MAIN,
            "fork_seq": 2,
            "head_seq": 3,
            "created_at": now + 1,
            "updated_at": now + 4,
        },
    )
    for bid, messages, chain, start in ((MAIN, HISTORY, hashes, 0), (FORK, FORKED, forked, 2)):
        for seq, (m, h) in enumerate(zip(messages[start:], chain[start:], strict=True), start=start + 1):
            event = {
                "role": m["role"],
                "message": m,
                "source": "request",
                "tokens": 2,
                "call_id": None,
                "created_at": now,
            }
            r.rpush(P + f"events:{bid}", json.dumps(event))
            r.rpush(P + f"chain:{bid}", h)
            r.hset(P + f"hash:{scoped(T1, h)}", CID, f"{bid} {seq}")
        conv_keys |= {P + f"branch:{bid}", P + f"events:{bid}", P + f"chain:{bid}"}
    # a superseded and an active checkpoint on main
    for ckid, gen, status, covered in (("ck_old", 1, "superseded", 1), ("ck_new", 2, "active", 2)):
        record = {
            "id": ckid,
            "conversation_id": CID,
            "branch_id": MAIN,
            "generation": gen,
            "from_seq": 1,
            "covered_through_seq": covered,
            "source_hash": hashes[covered - 1],
            "summary": f"sum {gen}",
            "tokens": 5,
            "model": None,
            "format_version": 1,
            "created_at": now + gen,
            "error": None,
        }
        r.hset(
            P + f"ck:{ckid}",
            mapping={
                "json": json.dumps(record),
                "status": status,
                "generation": gen,
                "covered": covered,
                "branch": MAIN,
            },
        )
        r.zadd(P + f"branch-cks:{MAIN}", {ckid: gen})
        r.rpush(P + f"conv-cks:{CID}", ckid)
        conv_keys.add(P + f"ck:{ckid}")
    r.hset(P + f"branch:{MAIN}", "active_ck", "ck_new")
    r.zadd(P + "cks-retired", {"ck_old": now + 1})
    for call_id, bid, purpose, started in (("call-1", MAIN, "main", 10.0), ("call-2", FORK, "summary", 20.0)):
        record = {
            "id": call_id,
            "tenant": T1,
            "route": "main",
            "model": "m",
            "purpose": purpose,
            "stream": False,
            "started_at": started,
            "conversation_id": CID,
            "branch_id": bid,
            "status": "complete",
            "usage": {"input_total": 3, "output": 1},
        }
        r.set(P + f"call:{call_id}", json.dumps(record))
        r.zadd(P + "calls", {call_id: started})
        r.zadd(P + f"conv-calls:{CID}", {call_id: started})
        last = P + f"last-call:{len(purpose)}:{purpose}:{bid}"
        r.zadd(last, {call_id: started})
        conv_keys |= {P + f"call:{call_id}", last}
    orphan = {
        "id": "call-orphan",
        "tenant": T1,
        "route": "side",
        "model": None,
        "purpose": "main",
        "stream": False,
        "started_at": 30.0,
        "conversation_id": None,
        "branch_id": None,
        "status": "error",
        "usage": {},
    }
    r.set(P + "call:call-orphan", json.dumps(orphan))
    r.zadd(P + "calls", {"call-orphan": 30.0})
    r.set(P + f"lease-token:{MAIN}", 7)
    conv_keys |= {P + f"lease-token:{MAIN}", P + f"ext:{scoped(T1, 'sess-1')}", P + f"branch-cks:{MAIN}"}
    r.sadd(P + f"conv-keys:{CID}", *conv_keys)
    r.zadd(P + "tombstones", {"c_00000000deadbeef": now})


async def test_layout_1_is_converted_at_start_up(redis_server: RedisServer, raw: sync_redis.Redis) -> None:
    write_layout_1(raw)
    store = RedisStore(redis_server.url, prefix="mig:")
    await store.open()
    try:
        assert await store.tenant_salt() == bytes.fromhex("ab" * 32)
        assert await store.get_blob("d1") == "system text"
        conv = await store.find_conversation(T1, "sess-1")
        assert conv is not None and conv.id == CID and conv.main_branch_id == main_branch_id(CID)
        main = conv.main_branch_id
        branches = await store.list_branches(CID)
        assert [b.id for b in branches][0] == main and len(branches) == 2
        fork = branches[1]
        assert (fork.parent_id, fork.fork_seq, fork.head_seq) == (main, 2, 3)
        assert [e.message for e in await store.lineage_events(fork.id, 0, 10)] == FORKED
        assert [e.message for e in await store.lineage_events(main, 0, 10)] == HISTORY
        # identity: the stored history is found again, by the tenant-wide index and by id
        match = await store.find_longest(identify.chain(T1, [*HISTORY, assistant("a2")]), T1, None)
        assert match is not None and match.position == Position(CID, main, 3) and match.system_hash == "s1"
        match = await store.find_longest(identify.chain(T1, FORKED), T1, CID)
        assert match is not None and match.position == Position(CID, fork.id, 3)
        # checkpoints, calls, the ledger, leases keep their meaning
        active = await store.active_checkpoint(main)
        assert active is not None and (active.id, active.generation, active.branch_id) == ("ck_new", 2, main)
        assert [c.status for c in await store.list_checkpoints(CID)] == ["superseded", "active"]
        last = await store.last_call(fork.id, "summary")
        assert last is not None and last.id == "call-2" and last.branch_id == fork.id
        assert [c.id for c in await store.list_calls(CID, 10, 0)] == ["call-1", "call-2"]
        assert sum(c.calls for c in await store.usage_cells(UsageQuery())) == 3
        token = await store.acquire_lease(main, "replica-a", 30)
        assert token is not None and token > 7
        # and it carries on like any conversation
        pos = await store.append(Position(CID, main, 3), [], None)
        hashes = identify.chain(T1, HISTORY)
        nxt = await store.commit_checkpoint(CheckpointCandidate(CID, main, 2, 1, 3, hashes[2], "s3", 5, None, 1))
        assert pos == Position(CID, main, 3) and nxt is not None and nxt.generation == 3
        assert await store.purge_checkpoints(10_000.0) == 2
        # nothing of layout 1 is left; a second start converts nothing
        layout_1 = [
            k
            for k in raw.scan_iter(match="mig:*")
            if "{" not in k and not k.startswith(("mig:meta:", "mig:blob:", "mig:hash:"))
        ]
        assert layout_1 == []
        assert all(raw.type(k) == "set" for k in raw.scan_iter(match="mig:hash:*"))
        assert raw.get("mig:meta:layout") == "2"
        assert await store.delete_conversation(CID) is True
        assert [k for k in raw.scan_iter(match="mig:*") if CID[2:] in k or "sess-1" in k] == []
        assert list(raw.scan_iter(match="mig:hash:*")) == []
    finally:
        await store.close()
    again = RedisStore(redis_server.url, prefix="mig:")
    await again.open()
    try:
        assert await again.get_conversation(CID) is None
    finally:
        await again.close()
