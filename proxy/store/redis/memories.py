"""Long-term memory records (proxy/store/memories.py) in their tenant's slot (keys.py).

Writes are one script each (memory_put.lua: insert, supersede, replace with compare-and-set on
the record's `updated_at`; memory_delete.lua); the request path's read of a tenant's scopes is one
read-only script (memory_read.lua). The admin listing reads the ids newest first (the tenant's
zset, or every tag's index scattered and merged), then the records in batches until a page of
matches is found.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ... import codec
from ..memories import Memory, MemoryQuery, memory_tag, newest_first, superseded_by, tag_of_memory
from .connection import BATCH, RedisConnection, guarded, num
from .keys import TAGS, scoped


def _json(memory: Memory) -> str:
    return codec.dumps_str(asdict(memory))


def _memory(payload: str) -> Memory:
    fields = codec.loads(payload)
    fields["confirmed_times"] = tuple(fields.get("confirmed_times") or ())
    return Memory(**fields)


def _group(memory: Memory, expect: str) -> list[str]:
    return [memory.id, _json(memory), num(memory.updated_at), expect]


class Memories(RedisConnection):
    @guarded
    async def save_memory(self, memory: Memory, supersedes: Memory | None = None) -> bool:
        args = _group(memory, "new")
        if supersedes is not None:
            if (supersedes.tenant, supersedes.scope) != (memory.tenant, memory.scope):
                return False
            args += _group(superseded_by(supersedes, memory), num(supersedes.updated_at))
        return bool(await self._run("memory_put", self.keys.memory(memory.tenant, memory.scope), *args))

    @guarded
    async def replace_memory(self, memory: Memory, expected_updated_at: float) -> bool:
        keys = self.keys.memory(memory.tenant, memory.scope)
        return bool(await self._run("memory_put", keys, *_group(memory, num(expected_updated_at))))

    @guarded
    async def get_memory(self, memory_id: str) -> Memory | None:
        tag = tag_of_memory(memory_id)
        if tag is None:
            return None
        payload = await self.r.hget(self.keys.tagged(tag, "memories"), memory_id)
        return None if payload is None else _memory(payload)

    @guarded
    async def delete_memory(self, memory_id: str) -> bool:
        memory = await self.get_memory(memory_id)
        if memory is None:
            return False
        return bool(await self._run("memory_delete", self.keys.memory(memory.tenant, memory.scope), memory_id))

    @guarded
    async def scope_memories(self, tenant: str, scopes: Sequence[str]) -> list[Memory]:
        if not scopes:
            return []
        rows = await self._run("memory_read", self.keys.memory_scopes(tenant, list(scopes)))
        return newest_first([_memory(row) for row in rows])

    @guarded
    async def list_memories(self, query: MemoryQuery, limit: int, offset: int) -> list[Memory]:
        if limit <= 0:
            return []
        if query.tenant is not None:
            tag = memory_tag(query.tenant)
            tenant_key = self.keys.tagged(tag, "mem-tenant", scoped(query.tenant, ""))
            pairs = await self.r.zrevrange(tenant_key, 0, -1, withscores=True)
            ordered = [(tag, pair) for pair in pairs]
        else:
            shards = await self.scatter(
                lambda pipe, tag: pipe.zrevrange(self.keys.tagged(tag, "mem-index"), 0, -1, withscores=True)
            )
            tagged = [[(tag, pair) for pair in shard] for tag, shard in zip(TAGS, shards, strict=True)]
            ordered = list(heapq.merge(*tagged, key=lambda t: (t[1][1], t[1][0]), reverse=True))
        found: list[Memory] = []
        wanted = offset + limit
        for start in range(0, len(ordered), BATCH):
            batch = ordered[start : start + BATCH]
            for memory in await self._memory_records(batch):
                if query.matches(memory):
                    found.append(memory)
            if len(found) >= wanted:
                break
        return newest_first(found)[offset:wanted]

    async def _memory_records(self, batch: list[tuple[str, tuple[str, float]]]) -> list[Memory]:
        """The records of (tag, (id, score)) pairs, in their order (gone ones skipped)."""
        async with self.r.pipeline(transaction=False) as pipe:
            for tag, (memory_id, _) in batch:
                pipe.hget(self.keys.tagged(tag, "memories"), memory_id)
            rows: list[Any] = await pipe.execute()
        return [_memory(row) for row in rows if row is not None]

    @guarded
    async def delete_memories_from(self, tenant: str, conversation_id: str) -> int:
        mine = [
            m
            for m in await self.list_memories(MemoryQuery(tenant=tenant), 1 << 30, 0)
            if m.source.get("conversation_id") == conversation_id
        ]
        removed = 0
        for memory in mine:
            keys = self.keys.memory(memory.tenant, memory.scope)
            removed += int(await self._run("memory_delete", keys, memory.id))
        return removed
