"""Long-term memory records (proxy/store/memories.py) in one table; every write one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import codec
from ..memories import Memory, MemoryQuery, superseded_by
from ..sqlite.rows import Select
from .connection import Conn, PostgresConnection, count


def _memory(
    id: str,
    tenant: str,
    scope: str,
    text: str,
    status: str,
    writer: str,
    source: str,
    created_at: float,
    updated_at: float,
    confirmed_at: float,
    confirmations: int,
    confirmed_times: str,
    listed_from: float | None,
    listed_until: float | None,
    superseded_by: str | None,
) -> Memory:
    return Memory(
        id,
        tenant,
        scope,
        text,
        status,
        writer,
        codec.loads(source),
        created_at,
        updated_at,
        confirmed_at,
        confirmations,
        tuple(codec.loads(confirmed_times)),
        listed_from,
        listed_until,
        superseded_by,
    )


_MEMORY = Select(_memory)
_COLUMNS = (*_MEMORY.names, "source_conversation")
_INSERT = (
    f"INSERT INTO memories ({', '.join(_COLUMNS)}) VALUES ({', '.join(f'${i + 1}' for i in range(len(_COLUMNS)))})"
)
_REPLACE = (
    f"UPDATE memories SET {', '.join(f'{name} = ${i + 1}' for i, name in enumerate(_COLUMNS[1:]))} "
    f"WHERE id = ${len(_COLUMNS)} AND tenant = ${len(_COLUMNS) + 1} AND scope = ${len(_COLUMNS) + 2} "
    f"AND updated_at = ${len(_COLUMNS) + 3}"
)


def _values(memory: Memory) -> tuple[Any, ...]:
    values = [getattr(memory, name) for name in _MEMORY.names]
    values[_MEMORY.names.index("source")] = codec.dumps_str(memory.source)
    values[_MEMORY.names.index("confirmed_times")] = codec.dumps_str(list(memory.confirmed_times))
    conversation = memory.source.get("conversation_id")
    return (*values, conversation if isinstance(conversation, str) else None)


async def _replace(conn: Conn, memory: Memory, expected: float) -> bool:
    status = await conn.execute(_REPLACE, *_values(memory)[1:], memory.id, memory.tenant, memory.scope, expected)
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
            await conn.execute(_INSERT, *_values(memory))
            return True

        return await self._write(save)

    async def replace_memory(self, memory: Memory, expected_updated_at: float) -> bool:
        return await self._write(_replace, memory, expected_updated_at)

    async def get_memory(self, memory_id: str) -> Memory | None:
        row = await self._read(
            lambda conn: conn.fetchrow(f"SELECT {_MEMORY.sql} FROM memories WHERE id = $1", memory_id)
        )
        return _MEMORY.one(row)

    async def delete_memory(self, memory_id: str) -> bool:
        status = await self._write(lambda conn: conn.execute("DELETE FROM memories WHERE id = $1", memory_id))
        return count(status) > 0

    async def scope_memories(self, tenant: str, scopes: Sequence[str]) -> list[Memory]:
        if not scopes:
            return []
        rows = await self._read(
            lambda conn: conn.fetch(
                f"SELECT {_MEMORY.sql} FROM memories WHERE tenant = $1 AND scope = ANY($2::text[])"
                " ORDER BY updated_at DESC, id DESC",
                tenant,
                list(scopes),
            )
        )
        return _MEMORY.all(rows)

    async def list_memories(self, query: MemoryQuery, limit: int, offset: int) -> list[Memory]:
        where, args = _where(query)
        n = len(args)
        rows = await self._read(
            lambda conn: conn.fetch(
                f"SELECT {_MEMORY.sql} FROM memories{where} ORDER BY updated_at DESC, id DESC "
                f"LIMIT ${n + 1} OFFSET ${n + 2}",
                *args,
                limit,
                offset,
            )
        )
        return _MEMORY.all(rows)

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
