"""Call records, and the ledger over them aggregated by `proxy.ledger.cells_from_calls`.

A conversation's records live in its slot (``records``, ``calls``, ``last``); a call no
conversation owns in the ``orphan-calls`` hash of the shard its id hashes to. An answered call's
record is written with its response turn by one script (record_answered.lua). The time index of
the whole ledger is sharded (``call-index`` per tag), scattered over and merged for /admin/usage.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ... import codec
from ...errors import ConversationGone, StoreError
from ...ledger import cells_from_calls
from ...usage import TOKEN_FIELDS
from ..base import CallRecord, NewEvent, Position, ResponseTurn, UsageCell, UsageQuery
from .connection import BATCH, guarded, num
from .history import append_args
from .identity import Identity
from .keys import TAGS, conversation_of, is_conversation_id

_CALL_FIELDS = tuple(f.name for f in fields(CallRecord))
_KNOWN = frozenset(_CALL_FIELDS)


class Calls(Identity):
    @guarded
    async def record_call(self, call: CallRecord) -> None:
        cid = call.conversation_id
        if cid is None or not is_conversation_id(cid):
            if cid is not None:
                raise ConversationGone(f"conversation {cid} does not exist")
            payload = codec.dumps_str(_call_dict(call))
            await self._run("record_orphan", self.keys.orphan(call.id), call.id, num(call.started_at), payload)
            return
        reply = await self._run("record_call", self.keys.conversation(cid), *record_args(call, cid))
        if reply[0] == "GONE":
            raise ConversationGone(f"conversation {cid} was deleted")

    @guarded
    async def record_answered(self, call: CallRecord, turn: ResponseTurn) -> Position | StoreError | None:
        # One script in the conversation's slot, the record then the turn, after the answer's entry
        # in the tenant-wide index (as `append` writes it first).
        cid = turn.end.conversation_id
        if not is_conversation_id(cid):
            raise ConversationGone(f"conversation {cid} does not exist")
        try:
            tenant, hashes = await self._index_answer(cid, turn.answer)
        except StoreError:
            # A failover longer than failover_wait (the index write waited that long): the record
            # first, which waits again, then the index again -- the two writes' old order.
            await self.record_call(call)
            try:
                tenant, hashes = await self._index_answer(cid, turn.answer)
            except StoreError as exc:
                return exc
        args = append_args(turn.end, [] if turn.answer is None else [turn.answer], turn.system_hash, True)
        reply = await self._run("record_answered", self.keys.conversation(cid), *record_args(call, cid), *args)
        if reply[0] == "GONE":
            await self._refused(tenant, cid, hashes, reply)
            raise ConversationGone(f"conversation {cid} was deleted")
        refused = await self._refused(tenant, cid, hashes, reply[1:])
        if refused is not None or turn.answer is None:
            return refused
        return Position(cid, reply[2], int(reply[3]))

    @guarded
    async def _index_answer(self, cid: str, answer: NewEvent | None) -> tuple[str | None, list[str]]:
        """The conversation's tenant (None: no such conversation) and the answer's hashes, indexed."""
        tenant = await self._tenant(cid)
        if tenant is None or answer is None:
            return tenant, []
        await self._index(tenant, cid, [answer.chain_hash], add=True)
        return tenant, [answer.chain_hash]

    async def _records(self, cid: str, ids: list[str]) -> list[CallRecord]:
        out: list[CallRecord] = []
        for start in range(0, len(ids), BATCH):
            values = await self.r.hmget(self.keys.one(cid, "records"), ids[start : start + BATCH])
            out.extend(_call(v) for v in values if v is not None)
        return out

    @guarded
    async def list_calls(self, conversation_id: str, limit: int, offset: int) -> list[CallRecord]:
        if limit <= 0 or not is_conversation_id(conversation_id):
            return []
        ids = await self.r.zrange(self.keys.one(conversation_id, "calls"), offset, offset + limit - 1)
        return await self._records(conversation_id, ids)

    @guarded
    async def last_call(self, branch_id: str, purpose: str) -> CallRecord | None:
        cid = conversation_of(branch_id)
        if cid is None:
            return None
        last = await self.r.hget(self.keys.one(cid, "last"), f"{branch_id}|{purpose}")
        if last is None:
            return None
        calls = await self._records(cid, [last.split(" ", 1)[1]])
        return calls[0] if calls else None

    @guarded
    async def usage_cells(self, query: UsageQuery) -> list[UsageCell]:
        # The time range comes from a sorted index (the conversation's, or the sharded global one);
        # the reference aggregation filters by route and tenant and sums what the records knew.
        low = "-inf" if query.since is None else num(query.since)
        high = "+inf" if query.until is None else f"({num(query.until)}"
        if query.conversation_id is not None:
            if not is_conversation_id(query.conversation_id):
                return cells_from_calls([], query)
            ids = await self.r.zrangebyscore(self.keys.one(query.conversation_id, "calls"), low, high)
            return cells_from_calls(await self._records(query.conversation_id, ids), query)
        return cells_from_calls(await self._calls_between(low, high), query)

    @guarded
    async def calls_of_purpose(self, purpose: str, since: float, limit: int) -> list[CallRecord]:
        calls = [c for c in await self._calls_between(num(since), "+inf") if c.purpose == purpose]
        calls.sort(key=lambda call: call.started_at, reverse=True)
        return calls[:limit]

    async def _calls_between(self, low: str, high: str) -> list[CallRecord]:
        """Every call of the sharded time index scored from `low` to `high`."""
        shards = await self.scatter(
            lambda pipe, tag: pipe.zrangebyscore(self.keys.tagged(tag, "call-index"), low, high)
        )
        calls: list[CallRecord] = []
        for tag, members in zip(TAGS, shards, strict=True):
            groups: dict[str, list[str]] = {}
            for member in members:
                cid, _, call_id = member.partition("|")
                groups.setdefault(cid, []).append(call_id)
            for cid, ids in groups.items():
                if cid:
                    calls.extend(await self._records(cid, ids))
                else:
                    values = await self.r.hmget(self.keys.tagged(tag, "orphan-calls"), ids)
                    calls.extend(_call(v) for v in values if v is not None)
        return calls

    @guarded
    async def purge_calls(self, before: float) -> int:
        return await self._purge_by_conversation("call-index", "purge_calls", before)


def record_args(call: CallRecord, cid: str) -> list[Any]:
    """record_call.lua's ARGV (the first six of record_answered.lua's) for a call of `cid`."""
    payload = codec.dumps_str(_call_dict(call))
    return [cid, call.id, call.branch_id or "", call.purpose, num(call.started_at), payload]


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
