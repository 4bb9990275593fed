"""Conversations, branches and their events: identity lookups, appends and forks, deletes."""

from __future__ import annotations

import re
import secrets
import time
from typing import Any

from ... import codec
from ...errors import ConversationGone, StoreError
from ..base import Branch, Conversation, HashMatch, NewEvent, Position, StoredEvent, new_id
from .connection import BATCH, RedisConnection, guarded, num, scoped

TAIL = 4


class History(RedisConnection):
    # -- identity ----------------------------------------------------------------------------
    @guarded
    async def find_longest(self, hashes: list[str], tenant: str, conversation_id: str | None) -> HashMatch | None:
        if not hashes:
            return None
        # Most requests continue the stored history by one or two messages: the tail first, then
        # the rest from the end backwards in pipelined batches, stopping at the first batch with a hit.
        end = len(hashes)
        size = TAIL
        while end > 0:
            start = max(0, end - size)
            match = await self._probe(hashes, start, end, tenant, conversation_id)
            if match is not None:
                return match
            end, size = start, BATCH
        return None

    async def _probe(
        self, hashes: list[str], start: int, end: int, tenant: str, conversation_id: str | None
    ) -> HashMatch | None:
        indices = range(end - 1, start - 1, -1)
        async with self.r.pipeline(transaction=False) as pipe:
            for i in indices:
                key = self._k("hash", scoped(tenant, hashes[i]))
                if conversation_id is None:
                    pipe.hgetall(key)
                else:
                    pipe.hget(key, conversation_id)
            results = await pipe.execute()
        for i, found in zip(indices, results, strict=True):
            if not found:
                continue
            hits: dict[str, str] = found if conversation_id is None else {conversation_id: found}
            async with self.r.pipeline(transaction=False) as pipe:
                for cid, where in hits.items():
                    pipe.hget(self._k("conv", cid), "updated_at")
                    pipe.hget(self._k("branch", where.split(" ")[0]), "system_hash")
                details = await pipe.execute()
            best: tuple[float, str, str | None] | None = None
            for n, cid in enumerate(hits):
                updated, system_hash = details[2 * n], details[2 * n + 1]
                if updated is None:
                    continue  # deleted meanwhile
                if best is None or float(updated) > best[0]:
                    best = (float(updated), cid, system_hash)
            if best is None:
                continue
            branch_id, seq = hits[best[1]].split(" ")
            return HashMatch(Position(best[1], branch_id, int(seq)), i + 1, best[2])
        return None

    @guarded
    async def find_conversation(self, tenant: str, ref: str) -> Conversation | None:
        conv = _conversation(await self.r.hgetall(self._k("conv", ref)))
        if conv is not None and conv.tenant == tenant:
            return conv
        cid = await self.r.get(self._k("ext", scoped(tenant, ref)))
        if cid is None:
            return None
        conv = _conversation(await self.r.hgetall(self._k("conv", cid)))
        return conv if conv is not None and conv.tenant == tenant else None

    @guarded
    async def conversations_with_external_id(self, external_id: str) -> list[Conversation]:
        # Admin-only: the external-id keys are tenant-scoped, so this scans them (SCAN, not KEYS).
        pattern = self._k("ext", "*:" + re.sub(r"([\\*?\[\]])", r"\\\1", external_id))
        ids = [str(cid) async for key in self.r.scan_iter(match=pattern, count=1000) if (cid := await self.r.get(key))]
        found = [c for c in await self._conversations(ids) if c.external_id == external_id]
        return sorted(found, key=lambda c: (c.created_at, c.id))

    @guarded
    async def create_conversation(self, tenant: str, external_id: str | None) -> Conversation:
        now = time.time()
        conv_id, branch_id = new_id("c"), new_id("b")
        ext_key = self._k("ext", scoped(tenant, external_id)) if external_id is not None else ""
        status, cid = await self._run(
            "create",
            conv_id,
            branch_id,
            tenant,
            "1" if external_id is not None else "0",
            ext_key,
            num(now),
            external_id or "",
        )
        if status == "EXISTS":
            existing = _conversation(await self.r.hgetall(self._k("conv", cid)))
            if existing is None:
                raise StoreError("conversation creation raced with a delete; retry")
            return existing
        return Conversation(conv_id, tenant, external_id, now, now, branch_id)

    @guarded
    async def append(
        self, start: Position, events: list[NewEvent], system_hash: str | None, stamp: bool = True
    ) -> Position:
        now = time.time()
        args: list[Any] = [
            start.conversation_id,
            start.branch_id,
            start.seq,
            ("1" if system_hash is not None else "0") if stamp else "quiet",
            system_hash or "",
            num(now),
            secrets.token_hex(8),
        ]
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
        reply = await self._run("append", *args)
        if reply[0] == "GONE":
            raise ConversationGone(f"conversation {start.conversation_id} no longer exists")
        if reply[0] != "OK":
            raise StoreError(f"append refused: {reply[0]} {reply[1:]}")
        return Position(start.conversation_id, reply[1], int(reply[2]))

    @guarded
    async def retract(self, end: Position, hashes: list[str]) -> bool:
        if not hashes:
            return False
        return bool(await self._run("retract", end.conversation_id, end.branch_id, end.seq, *hashes))

    # -- blobs -------------------------------------------------------------------------------
    @guarded
    async def put_blob(self, digest: str, data: str) -> None:
        await self.r.set(self._k("blob", digest), data, nx=True)

    @guarded
    async def get_blob(self, digest: str) -> str | None:
        value = await self.r.get(self._k("blob", digest))
        return None if value is None else str(value)

    # -- admin -------------------------------------------------------------------------------
    async def _conversations(self, ids: list[str]) -> list[Conversation]:
        if not ids:
            return []
        async with self.r.pipeline(transaction=False) as pipe:
            for cid in ids:
                pipe.hgetall(self._k("conv", cid))
            rows = await pipe.execute()
        return [c for c in (_conversation(row) for row in rows) if c is not None]

    @guarded
    async def list_conversations(self, limit: int, before: float | None) -> list[Conversation]:
        if limit <= 0:
            return []
        top = "+inf" if before is None else f"({num(before)}"
        ids = await self.r.zrevrangebyscore(self._k("convs"), top, "-inf", start=0, num=limit)
        return await self._conversations(ids)

    @guarded
    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        return _conversation(await self.r.hgetall(self._k("conv", conversation_id)))

    @guarded
    async def list_branches(self, conversation_id: str) -> list[Branch]:
        ids = await self.r.lrange(self._k("conv-branches", conversation_id), 0, -1)
        if not ids:
            return []
        async with self.r.pipeline(transaction=False) as pipe:
            for bid in ids:
                pipe.hgetall(self._k("branch", bid))
            rows = await pipe.execute()
        return [
            Branch(
                bid,
                row["conversation_id"],
                row.get("parent_id"),
                int(row["fork_seq"]),
                int(row["head_seq"]),
                float(row["created_at"]),
                float(row["updated_at"]),
            )
            for bid, row in zip(ids, rows, strict=True)
            if row
        ]

    @guarded
    async def lineage_events(self, branch_id: str, after_seq: int, limit: int) -> list[StoredEvent]:
        if limit <= 0:
            return []
        flat = await self._run("lineage", branch_id, int(after_seq), int(limit))
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
                )
            )
        return out

    @guarded
    async def delete_conversation(self, conversation_id: str) -> bool:
        return bool(await self._run("delete", conversation_id, num(time.time())))

    @guarded
    async def stale_conversations(self, before: float, limit: int) -> list[str]:
        if limit <= 0:
            return []
        ids = await self.r.zrangebyscore(self._k("convs"), "-inf", f"({num(before)}", start=0, num=limit)
        return [str(i) for i in ids]


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
