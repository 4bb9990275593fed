"""Rows decoded by column name, never by position.

A `Select` writes the column list of a SELECT once, as the parameters of the function that decodes
its rows: `sql` is that list for the statement, so each column's value reaches the parameter of its
name. No decoder says `row[1]`, and a column added, removed or moved cannot shift the others. A
record whose fields are its table's columns is its own decoder; trailing columns a decoder gathers
in `*rest` are named by `rest=` (a call record's token fields). A row costs one call of its decoder,
nothing more: no mapping or namedtuple per row (`sqlite3.Row` would look each name up per access),
since rows are decoded on the request path (the active checkpoint) and by the thousand (lineages).

    CONVERSATION = Select(Conversation)   # id, tenant, external_id, created_at, updated_at, ...
    row = db.execute(f"SELECT {CONVERSATION.sql} FROM conversations WHERE id = ?", (id,)).fetchone()
    CONVERSATION.one(row)                 # Conversation(id=..., tenant=..., ...)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from ... import codec
from ...usage import TOKEN_FIELDS
from ..base import CallRecord

R = TypeVar("R")


class Select(Generic[R]):
    def __init__(self, decode: Callable[..., R], rest: Sequence[str] = ()) -> None:
        parameters = inspect.signature(decode).parameters.values()
        named = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        if any(p.kind is p.VAR_POSITIONAL for p in parameters) != bool(rest):
            raise TypeError(f"{decode.__name__}: name the columns its *rest gathers, and only those, in rest=")
        self.names: tuple[str, ...] = (*named, *rest)
        self.sql = ", ".join(self.names)
        self._decode = decode

    def one(self, row: Sequence[Any] | None) -> R | None:
        return None if row is None else self._decode(*row)

    def all(self, rows: Iterable[Sequence[Any]]) -> list[R]:
        decode = self._decode
        return [decode(*row) for row in rows]


def call_record(
    id: str,
    tenant: str,
    route: str,
    model: str | None,
    purpose: str,
    stream: int,
    started_at: float,
    conversation_id: str | None,
    branch_id: str | None,
    status: str,
    upstream_status: int | None,
    error: str | None,
    latency_ms: float | None,
    ttfb_ms: float | None,
    response: str | None,
    finish_reason: str | None,
    usage_raw: str | None,
    request_id: str | None,
    system_hash: str | None,
    tools_hash: str | None,
    projection: str | None,
    cost_usd: float | None,
    wire: str | None,
    saved_usd: float | None,
    client: str | None,
    *usage: int | None,
) -> CallRecord:
    """A `CallRecord` from its row: its fields in this order, `usage` as one column per token
    field (`TOKEN_FIELDS`); the SQLite and PostgreSQL `calls` tables share the layout."""
    return CallRecord(
        id=id,
        tenant=tenant,
        route=route,
        model=model,
        purpose=purpose,
        stream=bool(stream),
        started_at=started_at,
        conversation_id=conversation_id,
        branch_id=branch_id,
        status=status,
        upstream_status=upstream_status,
        error=error,
        latency_ms=latency_ms,
        ttfb_ms=ttfb_ms,
        response=_loads(response),
        finish_reason=finish_reason,
        usage_raw=_loads(usage_raw),
        usage=dict(zip(TOKEN_FIELDS, usage, strict=True)),
        request_id=request_id,
        system_hash=system_hash,
        tools_hash=tools_hash,
        projection=_loads(projection),
        cost_usd=cost_usd,
        wire=wire,
        saved_usd=saved_usd,
        client=client,
    )


def _loads(value: str | None) -> Any:
    return None if value is None else codec.loads(value)
