"""Layout 1 -> 2: data a single-server ctxproxy wrote before cluster support, rewritten in place.

Layout 1 (up to the release before Redis Cluster support) kept one key per branch (``branch:``,
``events:``, ``chain:`` ...), one per checkpoint and call, global indexes (``convs``, ``calls``,
``tombstones``, ``cks-retired``) and the identity index as hashes (``hash:...`` -> {cid: "bid seq"}),
with branch ids unrelated to their conversation's. Layout 2 is keys.py's.

`migrate` runs at start-up on one server (never on a cluster: layout 1 never ran there) when the
prefix holds layout-1 data and no layout marker. It converts one conversation at a time in a
MULTI (its old keys deleted in the same transaction), so a crash leaves whole conversations of
either layout and a restart carries on; the marker ``meta:layout`` is set last. Branch ids are
renamed to layout 2's (they must name their conversation); conversation, checkpoint and call ids
stay, so ids clients hold (X-Conversation-Id echoes) keep working.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .connection import RedisConnection
from .keys import LAYOUT, main_branch_id, scoped, tag_of


async def migrate(conn: RedisConnection) -> int:
    """Convert layout-1 data under the prefix; how many conversations were converted."""
    r, keys = conn.r, conn.keys
    if await r.exists(keys.plain("meta", "layout")):
        return 0
    legacy = [keys.plain(name) for name in ("convs", "calls", "tombstones", "cks-retired")]
    if conn.cluster or not any([await r.type(k) == "zset" for k in legacy]):
        await r.set(keys.plain("meta", "layout"), LAYOUT, nx=True)
        return 0
    # The identity index changes type (hash -> set): drop the old hashes; each conversation's
    # entries are rebuilt from its own chain lists below.
    async for key in r.scan_iter(match=keys.plain("hash", "*"), count=1000):
        if await r.type(key) == "hash":
            await r.unlink(key)
    done = 0
    while ids := await r.zrange(keys.plain("convs"), 0, 99):
        for cid in ids:
            await _conversation(conn, cid)
            done += 1
    for cid, deleted_at in await r.zrange(keys.plain("tombstones"), 0, -1, withscores=True):
        await r.zadd(keys.tagged(tag_of(cid), "tombstones"), {cid: deleted_at})
    for call_id, started in await r.zrange(keys.plain("calls"), 0, -1, withscores=True):
        payload = await r.get(keys.plain("call", call_id))
        if payload is not None and json.loads(payload).get("conversation_id") is None:
            orphan, index, _ = keys.orphan(call_id)
            await r.hset(orphan, call_id, payload)
            await r.zadd(index, {"|" + call_id: started})
        await r.unlink(keys.plain("call", call_id))
    await r.unlink(*legacy)
    await r.set(keys.plain("meta", "layout"), LAYOUT)
    return done


async def _conversation(conn: RedisConnection, cid: str) -> None:
    r, keys = conn.r, conn.keys
    old = keys.plain
    conv = await r.hgetall(old("conv", cid))
    branch_ids = await r.lrange(old("conv-branches", cid), 0, -1)
    if not conv:  # listed but gone: drop the listing
        await r.zrem(old("convs"), cid)
        return
    rename = {bid: _new_branch_id(cid, bid, bid == conv["main_branch_id"]) for bid in branch_ids}
    k = {kind: keys.one(cid, kind) for kind in ("conv", "branches", "blist", "events", "chain")}
    k |= {kind: keys.one(cid, kind) for kind in ("cks", "cklist", "calls", "records", "last", "leases")}
    tag = tag_of(cid)
    shard = {kind: keys.tagged(tag, kind) for kind in ("convs", "call-index", "cks-retired")}
    owned = set(await r.smembers(old("conv-keys", cid)))
    owned |= {old(kind, cid) for kind in ("conv", "conv-keys", "conv-branches", "conv-cks", "conv-calls")}
    tenant = conv["tenant"]

    async with r.pipeline(transaction=True) as pipe:
        pipe.hset(k["conv"], mapping={**conv, "main_branch_id": rename[conv["main_branch_id"]]})
        if conv.get("external_id"):
            pipe.set(keys.ext(tenant, conv["external_id"]), cid)
            owned.add(old("ext", scoped(tenant, conv["external_id"])))
        pipe.zadd(shard["convs"], {cid: float(conv["updated_at"])})
        move = _Move(conn, pipe, cid, tenant, rename, k, owned)
        for bid in branch_ids:
            await move.branch(bid)
        await move.checkpoints(shard["cks-retired"])
        await move.calls(shard["call-index"])
        for key in owned:
            pipe.unlink(key)
        pipe.zrem(old("convs"), cid)
        await pipe.execute()


def _new_branch_id(cid: str, bid: str, main: bool) -> str:
    return main_branch_id(cid) if main else f"{main_branch_id(cid)}_{bid[2:].lower()}"


@dataclass
class _Move:
    """One conversation's conversion, written into its MULTI (`pipe`): its layout-2 keys (`k`), its
    branches' new ids (`rename`), and the layout-1 keys it owns, deleted in the same transaction."""

    conn: RedisConnection
    pipe: Any
    cid: str
    tenant: str
    rename: dict[str, str]
    k: dict[str, str]
    owned: set[str]

    async def branch(self, bid: str) -> None:
        conn, pipe, k = self.conn, self.pipe, self.k
        r, old, new = conn.r, conn.keys.plain, self.rename[bid]
        row = await r.hgetall(old("branch", bid))
        events = await r.lrange(old("events", bid), 0, -1)
        chain = await r.lrange(old("chain", bid), 0, -1)
        token = await r.get(old("lease-token", bid))
        self.owned |= {old(kind, bid) for kind in ("branch", "events", "chain", "branch-cks", "lease", "lease-token")}
        fields = {"fork": row["fork_seq"], "head": row["head_seq"], "created": row["created_at"]}
        fields |= {"updated": row["updated_at"]}
        if row.get("parent_id"):
            fields["parent"] = self.rename[row["parent_id"]]
        if row.get("system_hash"):
            fields["sys"] = row["system_hash"]
        if row.get("active_ck"):
            fields["active"] = row["active_ck"]
        pipe.hset(k["branches"], mapping={f"{new}:{name}": value for name, value in fields.items()})
        pipe.rpush(k["blist"], new)
        fork = int(row["fork_seq"])
        for n, (payload, h) in enumerate(zip(events, chain, strict=True)):
            at = f"{new}:{fork + n + 1}"
            pipe.hset(k["events"], at, payload)
            pipe.hset(k["chain"], mapping={at: h, f"h:{h}": f"{new} {fork + n + 1}"})
            pipe.sadd(conn.keys.identity(self.tenant, h), self.cid)
        if token is not None:
            pipe.hset(k["leases"], f"token:{new}", token)

    async def checkpoints(self, retired: str) -> None:
        pipe, k, rename, cid = self.pipe, self.k, self.rename, self.cid
        r, old = self.conn.r, self.conn.keys.plain
        for ckid in await r.lrange(old("conv-cks", cid), 0, -1):
            ck = await r.hgetall(old("ck", ckid))
            self.owned.add(old("ck", ckid))
            if not ck:
                continue
            record = json.loads(ck["json"])
            record["branch_id"] = rename.get(record["branch_id"], record["branch_id"])
            fields = {ckid: json.dumps(record), f"{ckid}:status": ck["status"], f"{ckid}:covered": ck["covered"]}
            fields |= {
                f"{ckid}:branch": rename.get(ck["branch"], ck["branch"]),
                f"{ckid}:created": record["created_at"],
            }
            if ck.get("generation"):
                fields[f"{ckid}:gen"] = ck["generation"]
            pipe.hset(k["cks"], mapping=fields)
            pipe.rpush(k["cklist"], ckid)
            if ck["status"] != "active":
                pipe.zadd(retired, {f"{cid}|{ckid}": float(record["created_at"])})

    async def calls(self, index: str) -> None:
        pipe, k, rename, cid = self.pipe, self.k, self.rename, self.cid
        r, old = self.conn.r, self.conn.keys.plain
        last: dict[str, tuple[float, str]] = {}
        for call_id, started in await r.zrange(old("conv-calls", cid), 0, -1, withscores=True):
            payload = await r.get(old("call", call_id))
            self.owned.add(old("call", call_id))
            if payload is None:
                continue
            record = json.loads(payload)
            if record.get("branch_id") in rename:
                record["branch_id"] = rename[record["branch_id"]]
                field = f"{record['branch_id']}|{record['purpose']}"
                if field not in last or last[field][0] <= started:
                    last[field] = (started, call_id)
            pipe.hset(k["records"], call_id, json.dumps(record))
            pipe.zadd(k["calls"], {call_id: started})
            pipe.zadd(index, {f"{cid}|{call_id}": started})
        for field, (started, call_id) in last.items():
            pipe.hset(k["last"], field, f"{started!r} {call_id}")
