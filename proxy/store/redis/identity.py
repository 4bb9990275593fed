"""Which stored conversation a chain of hashes continues: the tenant-wide index, then the
conversation's own.

The tenant-wide index (``P hash:{tenant}:{chain}``, a set of conversation ids) lives outside any
conversation's slot, so it is only a pointer: the conversation's own ``chain`` hash (``h:{chain}``
-> branch and seq, read by probe.lua in its slot) says whether and where it holds the event. An
index entry whose conversation does not hold the hash -- an append that crashed after writing it,
a write a failover lost -- is skipped, and the next append of that history writes it again.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConversationGone, StoreError
from ..base import HashMatch, Position
from .connection import BATCH, RedisConnection, guarded
from .keys import is_conversation_id

TAIL = 4
TENANT_CACHE = 100_000


class Identity(RedisConnection):
    @guarded
    async def find_longest(self, hashes: list[str], tenant: str, conversation_id: str | None) -> HashMatch | None:
        if not hashes:
            return None
        if conversation_id is not None and not is_conversation_id(conversation_id):
            return None
        # Most requests continue the stored history by one or two messages: the tail first, then
        # the rest from the end backwards in batches, stopping at the first batch with a hit.
        end, size = len(hashes), TAIL
        while end > 0:
            start = max(0, end - size)
            if conversation_id is None:
                match = await self._probe_index(hashes, start, end, tenant)
            else:
                match = await self._probe_one(conversation_id, hashes, start, end)
            if match is not None:
                if conversation_id is None or await self._tenant(conversation_id) == tenant:
                    self._remember(match.position.conversation_id, tenant)
                    return match
                return None
            end, size = start, BATCH
        return None

    async def _probe_one(self, cid: str, hashes: list[str], start: int, end: int) -> HashMatch | None:
        batch = hashes[start:end][::-1]
        reply = await self._run("probe", self.keys.conversation(cid), *batch)
        if not reply:
            return None
        index = end - int(reply[0])  # reply[0] is 1-based in the reversed batch
        return HashMatch(Position(cid, reply[1], int(reply[2])), index + 1, reply[3] or None)

    async def _probe_index(self, hashes: list[str], start: int, end: int, tenant: str) -> HashMatch | None:
        indices = range(end - 1, start - 1, -1)
        async with self.r.pipeline(transaction=False) as pipe:
            for i in indices:
                pipe.smembers(self.keys.identity(tenant, hashes[i]))
            found = await pipe.execute()
        for i, cids in zip(indices, found, strict=True):
            if not cids:
                continue
            best: tuple[float, HashMatch] | None = None
            for cid in sorted(cids):
                if not is_conversation_id(cid):
                    continue
                reply = await self._run("probe", self.keys.conversation(cid), hashes[i])
                if not reply:
                    continue  # an entry the conversation does not hold (deleted, or never appended)
                match = HashMatch(Position(cid, reply[1], int(reply[2])), i + 1, reply[3] or None)
                if best is None or float(reply[4]) > best[0]:
                    best = (float(reply[4]), match)
            if best is not None:
                return best[1]
        return None

    async def _index(self, tenant: str, cid: str, hashes: list[str], add: bool) -> None:
        """Add or remove `cid` under each hash, retried through a failover like the scripts (an
        answer's entry is written after the client has it: a 503 would come too late)."""
        if hashes:
            await self._through_failover(lambda: self._index_once(tenant, cid, hashes, add))

    async def _index_once(self, tenant: str, cid: str, hashes: list[str], add: bool) -> None:
        async with self.r.pipeline(transaction=False) as pipe:
            for h in hashes:
                key = self.keys.identity(tenant, h)
                if add:
                    pipe.sadd(key, cid)
                else:
                    pipe.srem(key, cid)
            await pipe.execute()

    async def _tenant(self, cid: str) -> str | None:
        tenant = self._tenants.get(cid)
        if tenant is None:
            tenant = await self.r.hget(self.keys.one(cid, "conv"), "tenant")
            if tenant is not None:
                self._remember(cid, tenant)
        return tenant

    def _remember(self, cid: str, tenant: str) -> None:
        # A conversation's tenant never changes: remembered per process, bounded.
        if len(self._tenants) >= TENANT_CACHE:
            self._tenants.clear()
        self._tenants[cid] = tenant

    async def _refused(self, tenant: str | None, cid: str, hashes: list[str], reply: list[Any]) -> StoreError | None:
        """What an append.lua reply refused, with the index entries written for its events taken back."""
        if reply[0] == "OK":
            return None
        if reply[0] != "GONE":
            return StoreError(f"append refused: {reply[0]} {reply[1:]}")
        if tenant is not None:
            await self._index(tenant, cid, hashes, add=False)
        return ConversationGone(f"conversation {cid} no longer exists")
