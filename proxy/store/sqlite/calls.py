"""Call records and the ledger over them (`/admin/usage`), summed in SQL."""

from __future__ import annotations

from typing import Any

from ...errors import ConversationGone
from ...usage import TOKEN_FIELDS
from ..base import LEDGER_FIELDS, USAGE_GROUP_COLUMNS, CallRecord, UsageCell, UsageQuery
from .connection import Db, SqliteConnection
from .records import call_record, call_values
from .rows import Select

# A CallRecord's columns: its fields, with `usage` stored as one column per token field.
_RECORD = Select(call_record, rest=TOKEN_FIELDS)


class Calls(SqliteConnection):
    async def record_call(self, call: CallRecord) -> None:
        self._write(insert_call, call)

    async def list_calls(self, conversation_id: str, limit: int, offset: int) -> list[CallRecord]:
        rows = self._read(
            lambda db: db.execute(
                f"SELECT {_RECORD.sql} FROM calls WHERE conversation_id = ? ORDER BY started_at, rowid "
                "LIMIT ? OFFSET ?",
                (conversation_id, limit, offset),
            ).fetchall()
        )
        return _RECORD.all(rows)

    async def calls_of_purpose(self, purpose: str, since: float, limit: int) -> list[CallRecord]:
        rows = self._read(
            lambda db: db.execute(
                f"SELECT {_RECORD.sql} FROM calls WHERE started_at >= ? AND purpose = ? "
                "ORDER BY started_at DESC, rowid DESC LIMIT ?",
                (since, purpose, limit),
            ).fetchall()
        )
        return _RECORD.all(rows)

    async def last_call(self, branch_id: str, purpose: str) -> CallRecord | None:
        row = self._read(
            lambda db: db.execute(
                f"SELECT {_RECORD.sql} FROM calls WHERE branch_id = ? AND purpose = ? "
                "ORDER BY started_at DESC, rowid DESC LIMIT 1",
                (branch_id, purpose),
            ).fetchone()
        )
        return _RECORD.one(row)

    async def usage_cells(self, query: UsageQuery) -> list[UsageCell]:
        return self._read(_usage_cells, query)

    async def purge_calls(self, before: float) -> int:
        return self._write(lambda db: db.execute("DELETE FROM calls WHERE started_at < ?", (before,)).rowcount)


def insert_call(db: Db, call: CallRecord) -> None:
    """Store (or replace) the record, unless its conversation was deleted."""
    if (
        call.conversation_id is not None
        and db.execute("SELECT 1 FROM tombstones WHERE conversation_id = ?", (call.conversation_id,)).fetchone()
    ):
        raise ConversationGone(f"conversation {call.conversation_id} was deleted")
    values = call_values(call)
    db.execute(
        f"INSERT OR REPLACE INTO calls ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
        tuple(values.values()),
    )


_GROUP_SQL = {"day": "strftime('%Y-%m-%d', started_at, 'unixepoch')"}
"""Group keys that are no column: the SQL computing them as `CallRecord` does."""


def _usage_cells(db: Db, query: UsageQuery) -> list[UsageCell]:
    where: list[str] = []
    args: list[Any] = []
    for column, value in (
        ("conversation_id", query.conversation_id),
        ("route", query.route),
        ("tenant", query.tenant),
        ("client", query.client),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if query.since is not None:
        where.append("started_at >= ?")
        args.append(query.since)
    if query.until is not None:
        where.append("started_at < ?")
        args.append(query.until)
    key = _GROUP_SQL.get(query.group_by or "", USAGE_GROUP_COLUMNS[query.group_by]) if query.group_by else "NULL"
    # SUM over only NULLs is NULL and COUNT(col) counts the known values: unknown stays unknown.
    fields = ", ".join(f"SUM({f}), COUNT({f})" for f in LEDGER_FIELDS)
    rows = db.execute(
        f"SELECT {key}, purpose, status, COUNT(*), {fields} FROM calls "
        + (f"WHERE {' AND '.join(where)} " if where else "")
        + f"GROUP BY {key}, purpose, status",
        args,
    ).fetchall()
    cells = []
    for key_value, purpose, status, calls, *values in rows:
        sums = {f: values[2 * i] for i, f in enumerate(LEDGER_FIELDS)}
        known = {f: values[2 * i + 1] for i, f in enumerate(LEDGER_FIELDS)}
        cells.append(UsageCell(key_value, purpose, status, calls, sums, known))
    return cells
