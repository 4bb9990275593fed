"""How call records and long-term memories become rows and back, for the two SQL backends
(SQLite, PostgreSQL), whose `calls` and `memories` tables share their columns: one decoder and
one encoder per record, so a column added is written once."""

from __future__ import annotations

from typing import Any

from ... import codec
from ...usage import TOKEN_FIELDS
from ..base import CallRecord, tokens_saved
from ..memories import Memory
from .rows import Select


def call_record(
    id: str,
    tenant: str,
    route: str,
    model: str | None,
    purpose: str,
    stream: int | bool,
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


def call_values(call: CallRecord) -> dict[str, Any]:
    """The row of `call` by column: its fields, `usage` as one column per token field, and the
    tokens the rewriting saved (derived, for the ledger)."""
    return {
        "id": call.id,
        "tenant": call.tenant,
        "route": call.route,
        "model": call.model,
        "purpose": call.purpose,
        "stream": bool(call.stream),
        "started_at": call.started_at,
        "conversation_id": call.conversation_id,
        "branch_id": call.branch_id,
        "status": call.status,
        "upstream_status": call.upstream_status,
        "error": call.error,
        "latency_ms": call.latency_ms,
        "ttfb_ms": call.ttfb_ms,
        "response": _dumps(call.response),
        "finish_reason": call.finish_reason,
        "usage_raw": _dumps(call.usage_raw),
        "request_id": call.request_id,
        "system_hash": call.system_hash,
        "tools_hash": call.tools_hash,
        "projection": _dumps(call.projection),
        "cost_usd": call.cost_usd,
        "wire": call.wire,
        "saved_usd": call.saved_usd,
        "client": call.client,
        **{field: call.usage.get(field) for field in TOKEN_FIELDS},
        "tokens_saved": tokens_saved(call.purpose, call.projection),
    }


def memory_record(
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
    """A `Memory` from its row (`source` and `confirmed_times` as JSON text)."""
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


MEMORY = Select(memory_record)
MEMORY_COLUMNS = (*MEMORY.names, "source_conversation")


def memory_values(memory: Memory) -> tuple[Any, ...]:
    """The row of `memory`, in `MEMORY_COLUMNS` order: its fields, then the conversation its
    source names (indexed, so deleting a conversation finds its memories)."""
    values = [getattr(memory, name) for name in MEMORY.names]
    values[MEMORY.names.index("source")] = codec.dumps_str(memory.source)
    values[MEMORY.names.index("confirmed_times")] = codec.dumps_str(list(memory.confirmed_times))
    conversation = memory.source.get("conversation_id")
    return (*values, conversation if isinstance(conversation, str) else None)


def _dumps(value: Any) -> str | None:
    return None if value is None else codec.dumps_str(value)
