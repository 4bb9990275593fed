"""Call records, and the ledger over them aggregated by `proxy.ledger.cells_from_calls`."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ... import codec
from ...errors import ConversationGone
from ...ledger import cells_from_calls
from ...usage import TOKEN_FIELDS
from ..base import CallRecord, UsageCell, UsageQuery
from .connection import BATCH, RedisConnection, guarded, num

_CALL_FIELDS = tuple(f.name for f in fields(CallRecord))
_KNOWN = frozenset(_CALL_FIELDS)


class Calls(RedisConnection):
    def _last_call_key(self, branch_id: str, purpose: str) -> str:
        return self._k("last-call", f"{len(purpose)}:{purpose}:{branch_id}")

    @guarded
    async def record_call(self, call: CallRecord) -> None:
        reply = await self._run(
            "record_call",
            call.id,
            call.conversation_id or "",
            call.branch_id or "",
            self._last_call_key(call.branch_id, call.purpose) if call.branch_id is not None else "",
            num(call.started_at),
            codec.dumps_str(_call_dict(call)),
        )
        if reply[0] == "GONE":
            raise ConversationGone(f"conversation {call.conversation_id} was deleted")

    async def _calls(self, ids: list[str]) -> list[CallRecord]:
        if not ids:
            return []
        out: list[CallRecord] = []
        for start in range(0, len(ids), BATCH):
            values = await self.r.mget([self._k("call", i) for i in ids[start : start + BATCH]])
            out.extend(_call(v) for v in values if v is not None)
        return out

    @guarded
    async def list_calls(self, conversation_id: str, limit: int, offset: int) -> list[CallRecord]:
        if limit <= 0:
            return []
        ids = await self.r.zrange(self._k("conv-calls", conversation_id), offset, offset + limit - 1)
        return await self._calls(ids)

    @guarded
    async def last_call(self, branch_id: str, purpose: str) -> CallRecord | None:
        ids = await self.r.zrange(self._last_call_key(branch_id, purpose), 0, 0, desc=True)
        calls = await self._calls(ids)
        return calls[0] if calls else None

    @guarded
    async def usage_cells(self, query: UsageQuery) -> list[UsageCell]:
        # The time range comes from a sorted index (the conversation's, or the global one); the
        # reference aggregation filters by route and tenant and sums what the records knew.
        if query.conversation_id is not None:
            index = self._k("conv-calls", query.conversation_id)
        else:
            index = self._k("calls")
        low = "-inf" if query.since is None else num(query.since)
        high = "+inf" if query.until is None else f"({num(query.until)}"
        ids = await self.r.zrangebyscore(index, low, high)
        return cells_from_calls(await self._calls(ids), query)

    @guarded
    async def purge_calls(self, before: float) -> int:
        return await self._purge("purge_calls", before)


def _call_dict(call: CallRecord) -> dict[str, Any]:
    # Shallow on purpose: this runs for every call, and asdict would deep-copy the response.
    record = {name: getattr(call, name) for name in _CALL_FIELDS}
    record["stream"] = bool(call.stream)
    # Like SQLite's columns: the normalized token fields, each known or None.
    record["usage"] = {k: call.usage.get(k) for k in TOKEN_FIELDS}
    return record


def _call(payload: str) -> CallRecord:
    record = codec.loads(payload)
    return CallRecord(**{k: v for k, v in record.items() if k in _KNOWN})
