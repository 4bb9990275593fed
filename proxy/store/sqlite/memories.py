"""Long-term memory records (proxy/store/memories.py) in one table; every write one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..memories import Memory, MemoryQuery, superseded_by
from .connection import Db, SqliteConnection
from .records import MEMORY, MEMORY_COLUMNS, memory_values


def _insert(db: Db, memory: Memory) -> None:
    db.execute(
        f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS)}) VALUES ({', '.join('?' * len(MEMORY_COLUMNS))})",
        memory_values(memory),
    )


def _replace(db: Db, memory: Memory, expected: float) -> bool:
    assignments = ", ".join(f"{name} = ?" for name in MEMORY_COLUMNS[1:])
    cursor = db.execute(
        f"UPDATE memories SET {assignments} WHERE id = ? AND tenant = ? AND scope = ? AND updated_at = ?",
        (*memory_values(memory)[1:], memory.id, memory.tenant, memory.scope, expected),
    )
    return cursor.rowcount > 0


class Memories(SqliteConnection):
    async def save_memory(self, memory: Memory, supersedes: Memory | None = None) -> bool:
        def save(db: Db) -> bool:
            if db.execute("SELECT 1 FROM memories WHERE id = ?", (memory.id,)).fetchone() is not None:
                return False
            if supersedes is not None:
                superseded = superseded_by(supersedes, memory)
                if superseded.tenant != memory.tenant or not _replace(db, superseded, supersedes.updated_at):
                    return False
            _insert(db, memory)
            return True

        return self._write(save)

    async def replace_memory(self, memory: Memory, expected_updated_at: float) -> bool:
        return self._write(_replace, memory, expected_updated_at)

    async def get_memory(self, memory_id: str) -> Memory | None:
        row = self._read(
            lambda db: db.execute(f"SELECT {MEMORY.sql} FROM memories WHERE id = ?", (memory_id,)).fetchone()
        )
        return MEMORY.one(row)

    async def delete_memory(self, memory_id: str) -> bool:
        return self._write(lambda db: db.execute("DELETE FROM memories WHERE id = ?", (memory_id,)).rowcount > 0)

    async def scope_memories(self, tenant: str, scopes: Sequence[str]) -> list[Memory]:
        if not scopes:
            return []
        marks = ", ".join("?" * len(scopes))
        rows = self._read(
            lambda db: db.execute(
                f"SELECT {MEMORY.sql} FROM memories WHERE tenant = ? AND scope IN ({marks})"
                " ORDER BY updated_at DESC, id DESC",
                (tenant, *scopes),
            ).fetchall()
        )
        return MEMORY.all(rows)

    async def list_memories(self, query: MemoryQuery, limit: int, offset: int) -> list[Memory]:
        where, args = _where(query)
        rows = self._read(
            lambda db: db.execute(
                f"SELECT {MEMORY.sql} FROM memories{where} ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?",
                (*args, limit, offset),
            ).fetchall()
        )
        return MEMORY.all(rows)

    async def delete_memories_from(self, tenant: str, conversation_id: str) -> int:
        return self._write(
            lambda db: (
                db.execute(
                    "DELETE FROM memories WHERE tenant = ? AND source_conversation = ?", (tenant, conversation_id)
                ).rowcount
            )
        )


def _where(query: MemoryQuery) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (
        ("tenant", query.tenant),
        ("scope", query.scope),
        ("status", query.status),
        ("source_conversation", query.conversation_id),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            args.append(value)
    if query.text:
        # instr over lower(): a substring, not a LIKE pattern (no wildcards to escape)
        clauses.append("instr(lower(text), ?) > 0")
        args.append(query.text.lower())
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args
