"""Conversations, branches and their events: appends and forks, listings, deletes."""

from __future__ import annotations

import heapq
import itertools
import re
import secrets
import time
from typing import Any

from ... import codec
from ...errors import ConversationGone, StoreError
from ..base import Branch, Conversation, NewEvent, Position, StoredEvent
from .connection import guarded, num
from .identity import Identity
from .keys import conversation_of, ext_tag, is_conversation_id, main_branch_id, new_conversation_id

LINEAGE_ALL = 1 << 40
"""A limit no lineage reaches: every event of it."""


class History(Identity):
    @guarded
    async def find_conversation(self, tenant: str, ref: str) -> Conversation | None:
        if is_conversation_id(ref):
            conv = await self._conversation(ref)
            if conv is not None and conv.tenant == tenant:
                return conv
        cid = await self.r.get(self.keys.ext(tenant, ref))
        if cid is None or not is_conversation_id(cid):
            return None
        conv = await self._conversation(cid)
        return conv if conv is not None and conv.tenant == tenant else None

    @guarded
    async def conversations_with_external_id(self, external_id: str) -> list[Conversation]:
        # Admin-only: the external-id keys are tenant-scoped and sharded by their own tag, so this
        # scans them (SCAN, not KEYS; on a cluster every primary).
        pattern = f"{_glob_escape(self.prefix)}{{??}}:ext:*:{_glob_escape(external_id)}"
        ids = {str(cid) async for key in self.r.scan_iter(match=pattern, count=1000) if (cid := await self.r.get(key))}
        found = [c for c in await self._conversations(sorted(ids)) if c.external_id == external_id]
        return sorted(found, key=lambda c: (c.created_at, c.id))

    @guarded
    async def create_conversation(self, tenant: str, external_id: str | None) -> Conversation:
        now = time.time()
        cid = new_conversation_id(None if external_id is None else ext_tag(tenant, external_id))
        keys = self.keys.conversation(cid)
        if external_id is not None:
            keys.append(self.keys.ext(tenant, external_id))
        bid = main_branch_id(cid)
        status, found = await self._run("create", keys, cid, bid, tenant, num(now), external_id or "")
        if status == "EXISTS":
            existing = await self._conversation(found)
            if existing is None:
                raise StoreError("conversation creation raced with a delete; retry")
            return existing
        self._remember(cid, tenant)
        return Conversation(cid, tenant, external_id, now, now, bid)

    @guarded
    async def append(
        self, start: Position, events: list[NewEvent], system_hash: str | None, stamp: bool = True
    ) -> Position:
        cid = start.conversation_id
        tenant = await self._tenant(cid) if is_conversation_id(cid) else None
        if tenant is None:
            raise ConversationGone(f"conversation {cid} no longer exists")
        # The tenant-wide index first (identity.py): a crash after it leaves an entry the
        # conversation does not hold, which lookups skip; never a stored event nobody can find.
        hashes = [e.chain_hash for e in events]
        await self._index(tenant, cid, hashes, add=True)
        args = append_args(start, events, system_hash, stamp)
        reply = await self._run("append", self.keys.conversation(cid), *args)
        refused = await self._refused(tenant, cid, hashes, reply)
        if refused is not None:
            raise refused
        return Position(cid, reply[1], int(reply[2]))

    @guarded
    async def extend(self, head: Position, head_hash: str, events: list[NewEvent]) -> Position | None:
        cid = head.conversation_id
        tenant = await self._tenant(cid) if events and is_conversation_id(cid) else None
        if tenant is None:
            return None
        hashes = [e.chain_hash for e in events]
        # What `find_longest` would read from the tenant-wide index: the head's hash held by this
        # conversation alone, the first new hash by none. Read before append's entries are
        # written, so this refusal leaves none.
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.smembers(self.keys.identity(tenant, head_hash))
            pipe.exists(self.keys.identity(tenant, hashes[0]))
            holders, taken = await pipe.execute()
        if set(holders) != {cid} or taken:
            return None
        # Then as `append`: the entries first.
        await self._index(tenant, cid, hashes, add=True)
        args = append_args(head, events, None, False, head_hash)
        reply = await self._run("append", self.keys.conversation(cid), *args)
        if reply[0] != "OK":
            # Refused (GONE, STALE): the entries go again, or a conversation deleted before the
            # lookup's append lands elsewhere would keep them. Should an entry removed here be a
            # concurrent append's own (the same event, into this conversation, meanwhile), the
            # next append of that history writes it again: lookups stop short of it, so it is
            # sent again.
            await self._index(tenant, cid, hashes, add=False)
            return None
        return Position(cid, reply[1], int(reply[2]))

    @guarded
    async def retract(self, end: Position, hashes: list[str]) -> bool:
        cid = end.conversation_id
        if not hashes or not is_conversation_id(cid):
            return False
        keys = self.keys.conversation(cid)
        if not int(await self._run("retract", keys, cid, end.branch_id, end.seq, *hashes)):
            return False
        # The events are gone from the conversation; now their entries in the tenant-wide index
        # (a crash in between leaves entries it does not hold, which lookups skip).
        tenant = await self._tenant(cid)
        if tenant is not None:
            await self._index(tenant, cid, hashes, add=False)
        return True

    # -- blobs -------------------------------------------------------------------------------
    @guarded
    async def put_blob(self, digest: str, data: str) -> None:
        await self.r.set(self.keys.plain("blob", digest), data, nx=True)

    @guarded
    async def get_blob(self, digest: str) -> str | None:
        value = await self.r.get(self.keys.plain("blob", digest))
        return None if value is None else str(value)

    # -- admin -------------------------------------------------------------------------------
    async def _conversation(self, cid: str) -> Conversation | None:
        return _conversation(await self.r.hgetall(self.keys.one(cid, "conv")))

    async def _conversations(self, ids: list[str]) -> list[Conversation]:
        if not ids:
            return []
        async with self.r.pipeline(transaction=False) as pipe:
            for cid in ids:
                pipe.hgetall(self.keys.one(cid, "conv"))
            rows = await pipe.execute()
        return [c for c in (_conversation(row) for row in rows) if c is not None]

    @guarded
    async def list_conversations(self, limit: int, before: float | None) -> list[Conversation]:
        if limit <= 0:
            return []
        top = "+inf" if before is None else f"({num(before)}"
        shards = await self.scatter(
            lambda pipe, tag: pipe.zrevrangebyscore(
                self.keys.tagged(tag, "convs"), top, "-inf", start=0, num=limit, withscores=True
            )
        )
        # Every shard is newest first; the merge is too (ties by id, descending, like one zset).
        merged = heapq.merge(*shards, key=lambda pair: (pair[1], pair[0]), reverse=True)
        return await self._conversations([cid for cid, _ in itertools.islice(merged, limit)])

    @guarded
    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        if not is_conversation_id(conversation_id):
            return None
        return await self._conversation(conversation_id)

    @guarded
    async def list_branches(self, conversation_id: str) -> list[Branch]:
        if not is_conversation_id(conversation_id):
            return []
        ids = await self.r.lrange(self.keys.one(conversation_id, "blist"), 0, -1)
        if not ids:
            return []
        fields = ("parent", "fork", "head", "created", "updated")
        rows = await self.r.hmget(
            self.keys.one(conversation_id, "branches"), [f"{bid}:{f}" for bid in ids for f in fields]
        )
        out = []
        for n, bid in enumerate(ids):
            parent, fork, head, created, updated = rows[n * 5 : n * 5 + 5]
            if head is not None:
                out.append(Branch(bid, conversation_id, parent, int(fork), int(head), float(created), float(updated)))
        return out

    @guarded
    async def lineage_events(self, branch_id: str, after_seq: int, limit: int) -> list[StoredEvent]:
        cid = conversation_of(branch_id)
        if limit <= 0 or cid is None:
            return []
        flat = await self._run("lineage", self.keys.conversation(cid), branch_id, int(after_seq), int(limit))
        out: list[StoredEvent] = []
        for i in range(0, len(flat), 4):
            payload = codec.loads(flat[i + 3])
            out.append(
                StoredEvent(
                    flat[i],
                    int(flat[i + 1]),
                    payload["role"],
                    payload["message"],
                    flat[i + 2],
                    payload["source"],
                    payload["tokens"],
                    payload["created_at"],
                    payload.get("call_id"),
                )
            )
        return out

    async def lineage_counts(self, branch_id: str) -> dict[str, int]:
        # An event's count is inside its payload: read with the events.
        events = await self.lineage_events(branch_id, 0, LINEAGE_ALL)
        return {e.chain_hash: e.tokens for e in events if e.tokens is not None}

    @guarded
    async def delete_conversation(self, conversation_id: str, only_if_empty: bool = False) -> bool:
        if not is_conversation_id(conversation_id):
            return False
        for _ in range(3):  # the external id read first names the key; a changed one retries
            conv = await self._conversation(conversation_id)
            if conv is None:
                return False
            keys = self.keys.conversation(conversation_id)
            if conv.external_id is not None:
                keys.append(self.keys.ext(conv.tenant, conv.external_id))
            empty = "1" if only_if_empty else "0"
            reply = await self._run("delete", keys, conversation_id, num(time.time()), conv.external_id or "", empty)
            if reply[0] in ("NONE", "KEPT"):
                return False
            if reply[0] == "OK":
                # The conversation is gone and fenced; now its entries in the tenant-wide index.
                await self._index(reply[1], conversation_id, reply[2:], add=False)
                self._tenants.pop(conversation_id, None)
                return True
        raise StoreError(f"conversation {conversation_id} kept changing while it was deleted; retry")

    @guarded
    async def stale_conversations(self, before: float, limit: int) -> list[str]:
        if limit <= 0:
            return []
        shards = await self.scatter(
            lambda pipe, tag: pipe.zrangebyscore(
                self.keys.tagged(tag, "convs"), "-inf", f"({num(before)}", start=0, num=limit, withscores=True
            )
        )
        merged = heapq.merge(*shards, key=lambda pair: (pair[1], pair[0]))
        return [str(cid) for cid, _ in itertools.islice(merged, limit)]


def append_args(
    start: Position, events: list[NewEvent], system_hash: str | None, stamp: bool, expect: str = ""
) -> list[Any]:
    """append.lua's ARGV (record_answered.lua's from its seventh on); `expect`: `extend`'s guard."""
    now = time.time()
    mode = ("1" if system_hash is not None else "0") if stamp else "quiet"
    fork_base = secrets.token_hex(4)
    args: list[Any] = [start.conversation_id, start.branch_id, start.seq, mode, system_hash or "", num(now)]
    args += [fork_base, expect]
    for event in events:
        payload = {
            "role": event.role,
            "message": event.message,
            "source": event.source,
            "tokens": event.tokens,
            "call_id": event.call_id,
            "created_at": now,
        }
        args.append(event.chain_hash)
        args.append(codec.dumps_str(payload))
    return args


def _glob_escape(text: str) -> str:
    """`text` matched literally by a SCAN pattern."""
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


def _conversation(row: dict[str, str]) -> Conversation | None:
    if not row or "tenant" not in row:
        return None
    return Conversation(
        row["id"],
        row["tenant"],
        row.get("external_id"),
        float(row["created_at"]),
        float(row["updated_at"]),
        row["main_branch_id"],
    )
