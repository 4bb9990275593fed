"""Call records and the ledger over them (`/admin/usage`), summed in SQL; retention's purges in
bounded batches (each its own short transaction, so a sweep of millions of old rows never holds
one long transaction or lock)."""

from __future__ import annotations

from typing import Any

from ...errors import ConversationGone
from ...usage import TOKEN_FIELDS
from ..base import LEDGER_FIELDS, USAGE_GROUP_COLUMNS, CallRecord, UsageCell, UsageQuery
from ..sqlite.records import call_record, call_values
from ..sqlite.rows import Select
from .connection import Conn, PostgresConnection, count

PURGE_BATCH = 1000
"""Rows a retention purge deletes per transaction."""


# A CallRecord's columns: its fields, with `usage` stored as one column per token field.
_RECORD = Select(call_record, rest=TOKEN_FIELDS)
_COLUMNS = (*_RECORD.names, "tokens_saved")


def _insert_sql(first: int) -> str:
    """The record's upsert, its values numbered from `$first`."""
    marks = ", ".join(f"${i}" for i in range(first, first + len(_COLUMNS)))
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _COLUMNS[1:])
    return f"INSERT INTO calls ({', '.join(_COLUMNS)}) VALUES ({marks}) ON CONFLICT (id) DO UPDATE SET {updates}"


_INSERT = _insert_sql(1)


class Calls(PostgresConnection):
    async def record_call(self, call: CallRecord) -> None:
        await self._write(insert_call, call)

    async def list_calls(self, conversation_id: str, limit: int, offset: int) -> list[CallRecord]:
        rows = await self._read(
            lambda conn: conn.fetch(
                f"SELECT {_RECORD.sql} FROM calls WHERE conversation_id = $1 ORDER BY started_at, ord "
                "LIMIT $2 OFFSET $3",
                conversation_id,
                limit,
                offset,
            )
        )
        return _RECORD.all(rows)

    async def calls_of_purpose(self, purpose: str, since: float, limit: int) -> list[CallRecord]:
        rows = await self._read(
            lambda conn: conn.fetch(
                f"SELECT {_RECORD.sql} FROM calls WHERE purpose = $1 AND started_at >= $2 "
                "ORDER BY started_at DESC, ord DESC LIMIT $3",
                purpose,
                since,
                limit,
            )
        )
        return _RECORD.all(rows)

    async def last_call(self, branch_id: str, purpose: str) -> CallRecord | None:
        row = await self._read(
            lambda conn: conn.fetchrow(
                f"SELECT {_RECORD.sql} FROM calls WHERE branch_id = $1 AND purpose = $2 "
                "ORDER BY started_at DESC, ord DESC LIMIT 1",
                branch_id,
                purpose,
            )
        )
        return _RECORD.one(row)

    async def usage_cells(self, query: UsageQuery) -> list[UsageCell]:
        return await self._read(_usage_cells, query)

    async def purge_calls(self, before: float) -> int:
        return await self._purge(
            "DELETE FROM calls WHERE id IN (SELECT id FROM calls WHERE started_at < $1 LIMIT $2)", before
        )

    async def _purge(self, sql: str, before: float) -> int:
        """Run `sql` (a DELETE of at most $2 rows older than $1) until it deletes a short batch."""
        total = 0
        while True:
            deleted = count(await self._write(lambda conn: conn.execute(sql, before, PURGE_BATCH)))
            total += deleted
            if deleted < PURGE_BATCH:
                return total


async def insert_call(conn: Conn, call: CallRecord) -> None:
    """Store (or replace) the record, unless its conversation was deleted. The share lock on the
    conversation's row waits for a delete in progress, which then leaves its tombstone to see."""
    if call.conversation_id is not None:
        await conn.fetchval("SELECT 1 FROM conversations WHERE id = $1 FOR SHARE", call.conversation_id)
        if await conn.fetchval("SELECT 1 FROM tombstones WHERE conversation_id = $1", call.conversation_id):
            raise ConversationGone(f"conversation {call.conversation_id} was deleted")
    sql, values = call_insert(call, first=1)
    await conn.execute(sql, *values)


def call_insert(call: CallRecord, first: int) -> tuple[str, list[Any]]:
    """The record's upsert with its values numbered from `$first`, and those values."""
    values = call_values(call)
    return (_INSERT if first == 1 else _insert_sql(first)), [values[c] for c in _COLUMNS]


_GROUP_SQL = {"day": "to_char(to_timestamp(started_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"}
"""Group keys that are no column: the SQL computing them as `CallRecord` does."""


async def _usage_cells(conn: Conn, query: UsageQuery) -> list[UsageCell]:
    where: list[str] = []
    args: list[Any] = []
    for condition, value in (
        ("conversation_id = ", query.conversation_id),
        ("route = ", query.route),
        ("tenant = ", query.tenant),
        ("started_at >= ", query.since),
        ("started_at < ", query.until),
    ):
        if value is not None:
            args.append(value)
            where.append(f"{condition}${len(args)}")
    key = _GROUP_SQL.get(query.group_by, USAGE_GROUP_COLUMNS[query.group_by]) if query.group_by else None
    # SUM over only NULLs is NULL and COUNT(col) counts the known values: unknown stays unknown.
    # SUM of a bigint is numeric: cast back, so the cells hold ints as the other backends' do.
    sums = ", ".join(f"SUM({f}){'' if f == 'cost_usd' else '::bigint'}, COUNT({f})" for f in LEDGER_FIELDS)
    rows = await conn.fetch(
        f"SELECT {key or 'NULL::text'}, purpose, status, COUNT(*), {sums} FROM calls "
        + (f"WHERE {' AND '.join(where)} " if where else "")
        + f"GROUP BY {key + ', ' if key else ''}purpose, status",
        *args,
    )
    cells = []
    for key_value, purpose, status, calls, *values in rows:
        totals = {f: values[2 * i] for i, f in enumerate(LEDGER_FIELDS)}
        known = {f: values[2 * i + 1] for i, f in enumerate(LEDGER_FIELDS)}
        cells.append(UsageCell(key_value, purpose, status, calls, totals, known))
    return cells
