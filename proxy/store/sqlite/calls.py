"""Call records and the ledger over them (`/admin/usage`), summed in SQL."""

from __future__ import annotations

from typing import Any

from ... import codec
from ...errors import ConversationGone
from ...usage import TOKEN_FIELDS
from ..base import LEDGER_FIELDS, USAGE_GROUP_COLUMNS, CallRecord, UsageCell, UsageQuery, tokens_saved
from .connection import Db, SqliteConnection

# CallRecord's fields in column order; `usage` is stored as one column per token field.
_RECORD_COLS = (
    "id, tenant, route, model, purpose, stream, started_at, conversation_id, branch_id, status, upstream_status, "
    "error, latency_ms, ttfb_ms, response, finish_reason, usage_raw, "
    + ", ".join(TOKEN_FIELDS)
    + ", request_id, system_hash, tools_hash, projection, cost_usd"
)
_CALL_COLS = _RECORD_COLS + ", tokens_saved"  # derived, for the ledger
_USAGE_AT = slice(17, 17 + len(TOKEN_FIELDS))


class Calls(SqliteConnection):
    async def record_call(self, call: CallRecord) -> None:
        self._write(insert_call, call)

    async def list_calls(self, conversation_id: str, limit: int, offset: int) -> list[CallRecord]:
        rows = self._read(
            lambda db: db.execute(
                f"SELECT {_RECORD_COLS} FROM calls WHERE conversation_id = ? ORDER BY started_at, rowid "
                "LIMIT ? OFFSET ?",
                (conversation_id, limit, offset),
            ).fetchall()
        )
        return [_call(r) for r in rows]

    async def last_call(self, branch_id: str, purpose: str) -> CallRecord | None:
        row = self._read(
            lambda db: db.execute(
                f"SELECT {_RECORD_COLS} FROM calls WHERE branch_id = ? AND purpose = ? "
                "ORDER BY started_at DESC, rowid DESC LIMIT 1",
                (branch_id, purpose),
            ).fetchone()
        )
        return _call(row) if row else None

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
    row = (
        call.id,
        call.tenant,
        call.route,
        call.model,
        call.purpose,
        int(call.stream),
        call.started_at,
        call.conversation_id,
        call.branch_id,
        call.status,
        call.upstream_status,
        call.error,
        call.latency_ms,
        call.ttfb_ms,
        _dumps(call.response),
        call.finish_reason,
        _dumps(call.usage_raw),
        *(call.usage.get(k) for k in TOKEN_FIELDS),
        call.request_id,
        call.system_hash,
        call.tools_hash,
        _dumps(call.projection),
        call.cost_usd,
        tokens_saved(call.purpose, call.projection),
    )
    db.execute(f"INSERT OR REPLACE INTO calls ({_CALL_COLS}) VALUES ({', '.join('?' * len(row))})", row)


def _call(r: Any) -> CallRecord:
    return CallRecord(
        id=r[0],
        tenant=r[1],
        route=r[2],
        model=r[3],
        purpose=r[4],
        stream=bool(r[5]),
        started_at=r[6],
        conversation_id=r[7],
        branch_id=r[8],
        status=r[9],
        upstream_status=r[10],
        error=r[11],
        latency_ms=r[12],
        ttfb_ms=r[13],
        response=_loads(r[14]),
        finish_reason=r[15],
        usage_raw=_loads(r[16]),
        usage=dict(zip(TOKEN_FIELDS, r[_USAGE_AT], strict=True)),
        request_id=r[23],
        system_hash=r[24],
        tools_hash=r[25],
        projection=_loads(r[26]),
        cost_usd=r[27],
    )


def _usage_cells(db: Db, query: UsageQuery) -> list[UsageCell]:
    where: list[str] = []
    args: list[Any] = []
    for column, value in (
        ("conversation_id", query.conversation_id),
        ("route", query.route),
        ("tenant", query.tenant),
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
    key = USAGE_GROUP_COLUMNS[query.group_by] if query.group_by else "NULL"
    # SUM over only NULLs is NULL and COUNT(col) counts the known values: unknown stays unknown.
    fields = ", ".join(f"SUM({f}), COUNT({f})" for f in LEDGER_FIELDS)
    rows = db.execute(
        f"SELECT {key}, purpose, status, COUNT(*), {fields} FROM calls "
        + (f"WHERE {' AND '.join(where)} " if where else "")
        + f"GROUP BY {key}, purpose, status",
        args,
    ).fetchall()
    cells = []
    for row in rows:
        values = row[4:]
        sums = {f: values[2 * i] for i, f in enumerate(LEDGER_FIELDS)}
        known = {f: values[2 * i + 1] for i, f in enumerate(LEDGER_FIELDS)}
        cells.append(UsageCell(row[0], row[1], row[2], row[3], sums, known))
    return cells


def _dumps(value: Any) -> str | None:
    return None if value is None else codec.dumps_str(value)


def _loads(value: str | None) -> Any:
    return None if value is None else codec.loads(value)
