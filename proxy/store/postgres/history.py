"""Conversations, branches and their events: identity lookups, appends and forks, deletes; an
answered call's record with its response turn.

An append, an extend and an answer are one statement each: a call of the `ctxproxy_append`
function (migrations.py), which walks the events server-side (the answer's call record is a
data-modifying CTE of the same statement), so each is one round trip and its own transaction.

Concurrency: every write to a conversation's history first locks its `conversations` row
(`SELECT ... FOR UPDATE`, in the function or in the transaction of a retract or a delete), so
appends, retracts, answers and the delete of one conversation serialize as SQLite's `BEGIN
IMMEDIATE` makes them, while different conversations write in parallel. A write that finds the
row gone was overtaken by a delete and is refused (`ConversationGone`); a call record written on
its own checks the tombstone under a share lock on the same row, so it cannot land after the
delete that removed its conversation.
"""

from __future__ import annotations

import time
from typing import Any

from ... import codec
from ...errors import StoreError
from ..base import Branch, CallRecord, Conversation, HashMatch, NewEvent, Position, ResponseTurn, StoredEvent
from ..public import new_id
from ..sqlite.rows import Select
from .calls import call_insert
from .connection import Conn, PostgresConnection, count


def _event(
    branch_id: str,
    seq: int,
    role: str,
    message: str,
    chain_hash: str,
    source: str,
    tokens: int | None,
    created_at: float,
    call_id: str | None,
) -> StoredEvent:
    return StoredEvent(branch_id, seq, role, codec.loads(message), chain_hash, source, tokens, created_at, call_id)


_CONVERSATION = Select(Conversation)
_BRANCH = Select(Branch)
_EVENT = Select(_event)

_FIND = (
    "SELECT e.chain_hash, e.conversation_id, e.branch_id, e.seq, c.updated_at, b.system_hash "
    "FROM events e JOIN conversations c ON c.id = e.conversation_id JOIN branches b ON b.id = e.branch_id "
    "WHERE e.chain_hash = ANY($1::text[]) AND c.tenant = $2"
)
_INSERT_EVENTS = (
    "INSERT INTO events (branch_id, seq, conversation_id, role, message, chain_hash, source, tokens, call_id, "
    "created_at) SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], "
    "$7::text[], $8::bigint[], $9::text[], $10::float8[])"
)


class History(PostgresConnection):
    # -- identity ----------------------------------------------------------------------------
    async def find_longest(self, hashes: list[str], tenant: str, conversation_id: str | None) -> HashMatch | None:
        if not hashes:
            return None
        # Most requests continue the stored history by one or two messages: try the tail first.
        tail = hashes[-4:]
        match = await self._read(_find, tail, len(hashes) - len(tail), tenant, conversation_id)
        if match is None and len(hashes) > len(tail):
            match = await self._read(_find, hashes[: -len(tail)], 0, tenant, conversation_id)
        return match

    async def find_conversation(self, tenant: str, ref: str) -> Conversation | None:
        row = await self._read(
            lambda conn: conn.fetchrow(
                f"SELECT {_CONVERSATION.sql} FROM conversations WHERE tenant = $1 AND (id = $2 OR external_id = $2) "
                "ORDER BY id = $2 DESC LIMIT 1",
                tenant,
                ref,
            )
        )
        return _CONVERSATION.one(row)

    async def conversations_with_external_id(self, external_id: str) -> list[Conversation]:
        rows = await self._read(
            lambda conn: conn.fetch(
                f"SELECT {_CONVERSATION.sql} FROM conversations WHERE external_id = $1 ORDER BY created_at, id",
                external_id,
            )
        )
        return _CONVERSATION.all(rows)

    async def create_conversation(self, tenant: str, external_id: str | None) -> Conversation:
        now = time.time()
        conv_id, branch_id = new_id("c"), new_id("b")

        async def create(conn: Conn) -> bool:
            inserted = await conn.execute(
                "INSERT INTO conversations (id, tenant, external_id, main_branch_id, created_at, updated_at) "
                "VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT DO NOTHING",
                conv_id,
                tenant,
                external_id,
                branch_id,
                now,
            )
            if not count(inserted):
                return False
            await conn.execute(
                "INSERT INTO branches (id, conversation_id, parent_id, fork_seq, head_seq, created_at, updated_at) "
                "VALUES ($1, $2, NULL, 0, 0, $3, $3)",
                branch_id,
                conv_id,
                now,
            )
            return True

        if not await self._write(create):
            # Two requests raced to create the same external id: the other one won, use it.
            existing = None if external_id is None else await self.find_conversation(tenant, external_id)
            if existing is None:
                raise StoreError(f"conversation {external_id!r} could not be created and is not stored")
            return existing
        return Conversation(conv_id, tenant, external_id, now, now, branch_id)

    async def append(
        self, start: Position, events: list[NewEvent], system_hash: str | None, stamp: bool = True
    ) -> Position:
        return await self._one(_append, start, events, system_hash, time.time(), stamp)

    async def extend(self, head: Position, head_hash: str, events: list[NewEvent]) -> Position | None:
        if not events:
            return None
        return await self._one(_extend, head, head_hash, events, time.time())

    async def retract(self, end: Position, hashes: list[str]) -> bool:
        return bool(hashes) and await self._write(_retract, end, hashes)

    async def record_answered(self, call: CallRecord, turn: ResponseTurn) -> Position | StoreError | None:
        return await self._one(_answered, call, turn, time.time())

    # -- blobs -------------------------------------------------------------------------------
    async def put_blob(self, digest: str, data: str) -> None:
        await self._write(
            lambda conn: conn.execute(
                "INSERT INTO blobs (digest, data) VALUES ($1, $2) ON CONFLICT DO NOTHING", digest, data
            )
        )

    async def get_blob(self, digest: str) -> str | None:
        value = await self._read(lambda conn: conn.fetchval("SELECT data FROM blobs WHERE digest = $1", digest))
        return None if value is None else str(value)

    # -- admin -------------------------------------------------------------------------------
    async def list_conversations(self, limit: int, before: float | None) -> list[Conversation]:
        sql = f"SELECT {_CONVERSATION.sql} FROM conversations"
        params: list[Any] = []
        if before is not None:
            sql += " WHERE updated_at < $1"
            params.append(before)
        sql += f" ORDER BY updated_at DESC LIMIT ${len(params) + 1}"
        params.append(limit)
        return _CONVERSATION.all(await self._read(lambda conn: conn.fetch(sql, *params)))

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        row = await self._read(
            lambda conn: conn.fetchrow(f"SELECT {_CONVERSATION.sql} FROM conversations WHERE id = $1", conversation_id)
        )
        return _CONVERSATION.one(row)

    async def list_branches(self, conversation_id: str) -> list[Branch]:
        rows = await self._read(
            lambda conn: conn.fetch(
                f"SELECT {_BRANCH.sql} FROM branches WHERE conversation_id = $1 ORDER BY created_at, ord",
                conversation_id,
            )
        )
        return _BRANCH.all(rows)

    async def lineage_events(self, branch_id: str, after_seq: int, limit: int) -> list[StoredEvent]:
        return await self._read(_lineage_events, branch_id, after_seq, limit)

    async def lineage_counts(self, branch_id: str) -> dict[str, int]:
        return await self._read(_lineage_counts, branch_id)

    async def delete_conversation(self, conversation_id: str, only_if_empty: bool = False) -> bool:
        return await self._write(_delete, conversation_id, time.time(), only_if_empty)

    async def stale_conversations(self, before: float, limit: int) -> list[str]:
        rows = await self._read(
            lambda conn: conn.fetch(
                "SELECT id FROM conversations WHERE updated_at < $1 ORDER BY updated_at LIMIT $2", before, limit
            )
        )
        return [str(r[0]) for r in rows]


async def _find(
    conn: Conn, hashes: list[str], offset: int, tenant: str, conversation_id: str | None
) -> HashMatch | None:
    index = {h: i for i, h in enumerate(hashes)}
    if conversation_id is None:
        rows = await conn.fetch(_FIND, hashes, tenant)
    else:
        rows = await conn.fetch(_FIND + " AND e.conversation_id = $3", hashes, tenant, conversation_id)
    best: tuple[int, float, str, str, int, str | None] | None = None  # index, updated_at, the match
    for chain_hash, conv_id, branch_id, seq, updated_at, system_hash in rows:
        if best is None or (index[chain_hash], updated_at) > best[:2]:
            best = (index[chain_hash], updated_at, conv_id, branch_id, seq, system_hash)
    if best is None:
        return None
    found, _, conv_id, branch_id, seq, system_hash = best
    return HashMatch(Position(conv_id, branch_id, seq), offset + found + 1, system_hash)


async def _lock(conn: Conn, conversation_id: str) -> bool:
    """Lock the conversation's row for this transaction; False when it is gone."""
    return await conn.fetchval("SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE", conversation_id) is not None


def _append_args(
    start: Position, events: list[NewEvent], system_hash: str | None, now: float, stamp: bool
) -> tuple[Any, ...]:
    """The arguments of `ctxproxy_append` (migrations.py) but the last two (probe, soft)."""
    return (
        start.conversation_id,
        start.branch_id,
        start.seq,
        stamp,
        now,
        system_hash,
        [e.role for e in events],
        [codec.dumps_str(e.message) for e in events],
        [e.chain_hash for e in events],
        [e.source for e in events],
        [e.tokens for e in events],
        [e.call_id for e in events],
        [new_id("b") for _ in events],  # a fresh id for each fork the events may need
    )


_APPEND = f"SELECT out_branch, out_seq, refused FROM ctxproxy_append({', '.join(f'${i}' for i in range(1, 16))})"


async def _append(
    conn: Conn, start: Position, events: list[NewEvent], system_hash: str | None, now: float, stamp: bool
) -> Position:
    """Unstamped appends (`stamp` False: a request not yet accepted upstream) move heads but no
    `updated_at`, so they cannot change which branch is the default one. One statement: the
    function `ctxproxy_append` (migrations.py) does the walk server-side."""
    row = await conn.fetchrow(_APPEND, *_append_args(start, events, system_hash, now, stamp), None, False)
    return Position(start.conversation_id, row[0], row[1])


async def _extend(conn: Conn, head: Position, head_hash: str, events: list[NewEvent], now: float) -> Position | None:
    # One indexed probe, in the function, proves what `find_longest` + `append` would find: the
    # head's hash stored once (chain hashes are tenant-rooted, so nowhere else in the tenant), at
    # a branch head, and the first new hash nowhere (a stored later one would imply it: events
    # are stored in chains).
    row = await conn.fetchrow(_APPEND, *_append_args(head, events, None, now, False), head_hash, False)
    return None if row is None else Position(head.conversation_id, row[0], row[1])


async def _answered(conn: Conn, call: CallRecord, turn: ResponseTurn, now: float) -> Position | StoreError | None:
    """The record and the turn in one statement: the record's INSERT as a data-modifying CTE of
    the `ctxproxy_append` call, which raises (so nothing is written) when the conversation is
    gone, and returns a refused turn (the record stored all the same)."""
    answer = [] if turn.answer is None else [turn.answer]
    insert, values = call_insert(call, first=16)
    row = await conn.fetchrow(
        f"WITH recorded AS ({insert}) {_APPEND}",
        *_append_args(turn.end, answer, turn.system_hash, now, True),
        None,
        True,
        *values,
    )
    if row[2] is not None:
        return StoreError(str(row[2]))
    return None if turn.answer is None else Position(turn.end.conversation_id, row[0], row[1])


async def _retract(conn: Conn, end: Position, hashes: list[str]) -> bool:
    if not await _lock(conn, end.conversation_id):
        return False
    row = await conn.fetchrow("SELECT head_seq, fork_seq, parent_id FROM branches WHERE id = $1", end.branch_id)
    if row is None:
        return False
    head_seq, fork_seq, parent_id = row
    if head_seq != end.seq or head_seq - fork_seq < len(hashes):
        return False
    cut = end.seq - len(hashes)
    stored = await conn.fetch(
        "SELECT chain_hash FROM events WHERE branch_id = $1 AND seq > $2 ORDER BY seq", end.branch_id, cut
    )
    if [r[0] for r in stored] != hashes:
        return False
    if await conn.fetchval("SELECT 1 FROM branches WHERE parent_id = $1 AND fork_seq > $2", end.branch_id, cut):
        return False
    await conn.execute("DELETE FROM events WHERE branch_id = $1 AND seq > $2", end.branch_id, cut)
    if cut == fork_seq and parent_id is not None:
        await conn.execute("DELETE FROM branches WHERE id = $1", end.branch_id)
        await conn.execute("DELETE FROM checkpoints WHERE branch_id = $1", end.branch_id)
        await conn.execute("DELETE FROM leases WHERE branch_id = $1", end.branch_id)
    else:
        await conn.execute("UPDATE branches SET head_seq = $1 WHERE id = $2", cut, end.branch_id)
    return True


_SEGMENTS = (
    # The lineage's segments (each ancestor up to its child's fork point), from the root.
    "WITH RECURSIVE up (id, parent_id, upto, depth) AS ("
    " SELECT id, parent_id, 9223372036854775807::bigint, 0 FROM branches WHERE id = $1"
    " UNION ALL SELECT b.id, b.parent_id, c.fork_seq, up.depth + 1"
    " FROM up JOIN branches c ON c.id = up.id JOIN branches b ON b.id = up.parent_id)"
    " SELECT id, upto FROM up ORDER BY depth DESC"
)


async def _lineage_counts(conn: Conn, branch_id: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for seg_branch, seg_upto in await conn.fetch(_SEGMENTS, branch_id):
        rows = await conn.fetch(
            "SELECT chain_hash, tokens FROM events WHERE branch_id = $1 AND seq <= $2 AND tokens IS NOT NULL",
            seg_branch,
            seg_upto,
        )
        out.update((str(h), int(t)) for h, t in rows)
    return out


async def _lineage_events(conn: Conn, branch_id: str, after_seq: int, limit: int) -> list[StoredEvent]:
    # Each segment's events by its primary key.
    segments = await conn.fetch(_SEGMENTS, branch_id)
    out: list[StoredEvent] = []
    for seg_branch, seg_upto in segments:
        rows = await conn.fetch(
            f"SELECT {_EVENT.sql} FROM events WHERE branch_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4",
            seg_branch,
            after_seq,
            seg_upto,
            limit - len(out),
        )
        out.extend(_EVENT.all(rows))
        if len(out) >= limit:
            break
    return out


async def _delete(conn: Conn, conversation_id: str, now: float, only_if_empty: bool = False) -> bool:
    found = await _lock(conn, conversation_id)
    if only_if_empty and found and await conn.fetchval(_CONTINUED, conversation_id):
        return False  # continued meanwhile (the row lock orders it after that write): it stays
    # Events go by branch (keyed by branch_id, seq); then everything else the conversation owns.
    await conn.execute(
        "DELETE FROM events WHERE branch_id IN (SELECT id FROM branches WHERE conversation_id = $1)", conversation_id
    )
    for table in ("branches", "calls", "checkpoints", "leases"):
        await conn.execute(f"DELETE FROM {table} WHERE conversation_id = $1", conversation_id)
    await conn.execute("DELETE FROM conversations WHERE id = $1", conversation_id)
    if found:
        await conn.execute(
            "INSERT INTO tombstones (conversation_id, deleted_at) VALUES ($1, $2) "
            "ON CONFLICT (conversation_id) DO UPDATE SET deleted_at = EXCLUDED.deleted_at",
            conversation_id,
            now,
        )
    return found


_CONTINUED = (
    "SELECT (SELECT count(*) FROM branches WHERE conversation_id = $1) > 1 "
    "OR EXISTS (SELECT 1 FROM events WHERE branch_id IN (SELECT id FROM branches WHERE conversation_id = $1)) "
    "OR EXISTS (SELECT 1 FROM calls WHERE conversation_id = $1)"
)
"""Whether a conversation has more than its first branch, any event or any call record."""
