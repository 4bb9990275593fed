"""Long-term memory records (proxy/store/memories.py) in one table; every write one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..memories import Memory, MemoryQuery, superseded_by
from ..sqlite.records import MEMORY, MEMORY_COLUMNS, memory_values
from .connection import Conn, PostgresConnection, count

_MARKS = ", ".join(f"${i + 1}" for i in range(len(MEMORY_COLUMNS)))
_INSERT = f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS)}) VALUES ({_MARKS})"
_REPLACE = (
    f"UPDATE memories SET {', '.join(f'{name} = ${i + 1}' for i, name in enumerate(MEMORY_COLUMNS[1:]))} "
    f"WHERE id = ${len(MEMORY_COLUMNS)} AND tenant = ${len(MEMORY_COLUMNS) + 1} AND scope = ${len(MEMORY_COLUMNS) + 2} "
    f"AND updated_at = ${len(MEMORY_COLUMNS) + 3}"
)


async def _replace(conn: Conn, memory: Memory, expected: float) -> bool:
    status = await conn.execute(_REPLACE, *memory_values(memory)[1:], memory.id, memory.tenant, memory.scope, expected)
    return count(status) > 0


class Memories(PostgresConnection):
    async def save_memory(self, memory: Memory, supersedes: Memory | None = None) -> bool:
        async def save(conn: Conn) -> bool:
            if await conn.fetchval("SELECT 1 FROM memories WHERE id = $1", memory.id) is not None:
                return False
            if supersedes is not None:
                superseded = superseded_by(supersedes, memory)
                if superseded.tenant != memory.tenant or not await _replace(conn, superseded, supersedes.updated_at):
                    return False
            await conn.execute(_INSERT, *memory_values(memory))
            return True

        return await self._write(save)

    async def replace_memory(self, memory: Memory, expected_updated_at: float) -> bool:
        return await self._write(_replace, memory, expected_updated_at)

    async def get_memory(self, memory_id: str) -> Memory | None:
        row = await self._read(
            lambda conn: conn.fetchrow(f"SELECT {MEMORY.sql} FROM memories WHERE id = $1", memory_id)
        )
        return MEMORY.one(row)

    async def delete_memory(self, memory_id: str) -> bool:
        status = await self._write(lambda conn: conn.execute("DELETE FROM memories WHERE id = $1", memory_id))
        return count(status) > 0

    async def scope_memories(self, tenant: str, scopes: Sequence[str]) -> list[Memory]:
        if not scopes:
            return []
        rows = await self._read(
            lambda conn: conn.fetch(
                f"SELECT {MEMORY.sql} FROM memories WHERE tenant = $1 AND scope = ANY($2::text[])"
                " ORDER BY updated_at DESC, id DESC",
                tenant,
                list(scopes),
            )
        )
        return MEMORY.all(rows)

    async def list_memories(self, query: MemoryQuery, limit: int, offset: int) -> list[Memory]:
        where, args = _where(query)
        n = len(args)
        rows = await self._read(
            lambda conn: conn.fetch(
                f"SELECT {MEMORY.sql} FROM memories{where} ORDER BY updated_at DESC, id DESC "
                f"LIMIT ${n + 1} OFFSET ${n + 2}",
                *args,
                limit,
                offset,
            )
        )
        return MEMORY.all(rows)

    async def delete_memories_from(self, tenant: str, conversation_id: str) -> int:
        status = await self._write(
            lambda conn: conn.execute(
                "DELETE FROM memories WHERE tenant = $1 AND source_conversation = $2", tenant, conversation_id
            )
        )
        return count(status)


def _where(query: MemoryQuery) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    for condition, value in (
        ("tenant = ", query.tenant),
        ("scope = ", query.scope),
        ("status = ", query.status),
        ("source_conversation = ", query.conversation_id),
        ("strpos(lower(text), ", None if not query.text else query.text.lower()),
    ):
        if value is not None:
            args.append(value)
            # strpos over lower(): a substring, not a LIKE pattern (no wildcards to escape)
            clauses.append(f"{condition}${len(args)}" + (") > 0" if condition.startswith("strpos") else ""))
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args
