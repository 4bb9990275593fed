"""Conversations, branches and their events: identity lookups, appends and forks, deletes; an
answered call's record with its response turn."""

from __future__ import annotations

import time
from typing import Any

from ... import codec
from ...errors import ConversationGone, StoreError
from ..base import (
    Branch,
    CallRecord,
    Conversation,
    HashMatch,
    NewEvent,
    Position,
    ResponseTurn,
    StoredEvent,
)
from ..public import new_id
from .calls import insert_call
from .connection import Db, SqliteConnection
from .rows import Select


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


class History(SqliteConnection):
    # -- identity ----------------------------------------------------------------------------
    async def find_longest(self, hashes: list[str], tenant: str, conversation_id: str | None) -> HashMatch | None:
        if not hashes:
            return None
        # Most requests continue the stored history by one or two messages: try the tail first.
        tail = hashes[-4:]
        match = self._read(_find, tail, len(hashes) - len(tail), tenant, conversation_id)
        if match is None and len(hashes) > len(tail):
            match = self._read(_find, hashes[: -len(tail)], 0, tenant, conversation_id)
        return match

    async def find_conversation(self, tenant: str, ref: str) -> Conversation | None:
        row = self._read(
            lambda db: db.execute(
                f"SELECT {_CONVERSATION.sql} FROM conversations WHERE tenant = ? AND (id = ? OR external_id = ?) "
                "ORDER BY id = ? DESC LIMIT 1",
                (tenant, ref, ref, ref),
            ).fetchone()
        )
        return _CONVERSATION.one(row)

    async def conversations_with_external_id(self, external_id: str) -> list[Conversation]:
        rows = self._read(
            lambda db: db.execute(
                f"SELECT {_CONVERSATION.sql} FROM conversations WHERE external_id = ? ORDER BY created_at, id",
                (external_id,),
            ).fetchall()
        )
        return _CONVERSATION.all(rows)

    async def create_conversation(self, tenant: str, external_id: str | None) -> Conversation:
        now = time.time()
        conv_id, branch_id = new_id("c"), new_id("b")

        def create(db: Db) -> None:
            db.execute(
                "INSERT INTO conversations (id, tenant, external_id, main_branch_id, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (conv_id, tenant, external_id, branch_id, now, now),
            )
            db.execute(
                "INSERT INTO branches (id, conversation_id, parent_id, fork_seq, head_seq, created_at, updated_at) "
                "VALUES (?, ?, NULL, 0, 0, ?, ?)",
                (branch_id, conv_id, now, now),
            )

        try:
            self._write(create)
        except StoreError:
            # Two requests raced to create the same external id: the other one won, use it.
            if external_id is not None:
                existing = await self.find_conversation(tenant, external_id)
                if existing is not None:
                    return existing
            raise
        return Conversation(conv_id, tenant, external_id, now, now, branch_id)

    async def append(
        self, start: Position, events: list[NewEvent], system_hash: str | None, stamp: bool = True
    ) -> Position:
        return self._write(_append, start, events, system_hash, time.time(), stamp)

    async def extend(self, head: Position, head_hash: str, events: list[NewEvent]) -> Position | None:
        if not events:
            return None
        return self._write(extend_head, head, head_hash, events, time.time())

    async def retract(self, end: Position, hashes: list[str]) -> bool:
        return bool(hashes) and self._write(_retract, end, hashes)

    async def record_answered(self, call: CallRecord, turn: ResponseTurn) -> Position | StoreError | None:
        return self._write(insert_answered, call, turn, time.time())

    # -- blobs -------------------------------------------------------------------------------
    async def put_blob(self, digest: str, data: str) -> None:
        self._write(lambda db: db.execute("INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)", (digest, data)))

    async def get_blob(self, digest: str) -> str | None:
        row = self._read(lambda db: db.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchone())
        return str(row[0]) if row else None

    # -- admin -------------------------------------------------------------------------------
    async def list_conversations(self, limit: int, before: float | None) -> list[Conversation]:
        sql = f"SELECT {_CONVERSATION.sql} FROM conversations"
        params: list[Any] = []
        if before is not None:
            sql += " WHERE updated_at < ?"
            params.append(before)
        sql += " ORDER BY updated_at DESC LIMIT ?"
        params.append(limit)
        return _CONVERSATION.all(self._read(lambda db: db.execute(sql, params).fetchall()))

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        row = self._read(
            lambda db: db.execute(
                f"SELECT {_CONVERSATION.sql} FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
        )
        return _CONVERSATION.one(row)

    async def list_branches(self, conversation_id: str) -> list[Branch]:
        rows = self._read(
            lambda db: db.execute(
                f"SELECT {_BRANCH.sql} FROM branches WHERE conversation_id = ? ORDER BY created_at, rowid",
                (conversation_id,),
            ).fetchall()
        )
        return _BRANCH.all(rows)

    async def lineage_events(self, branch_id: str, after_seq: int, limit: int) -> list[StoredEvent]:
        return self._read(_lineage_events, branch_id, after_seq, limit)

    async def lineage_counts(self, branch_id: str) -> dict[str, int]:
        return self._read(_lineage_counts, branch_id)

    async def delete_conversation(self, conversation_id: str, only_if_empty: bool = False) -> bool:
        found = self._write(_delete, conversation_id, time.time(), only_if_empty)
        if found:
            # secure_delete zeroes freed pages; the checkpoint moves them out of the WAL too.
            self._read(lambda db: db.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
        return found

    async def stale_conversations(self, before: float, limit: int) -> list[str]:
        rows = self._read(
            lambda db: db.execute(
                "SELECT id FROM conversations WHERE updated_at < ? ORDER BY updated_at LIMIT ?", (before, limit)
            ).fetchall()
        )
        return [str(r[0]) for r in rows]


def _find(db: Db, hashes: list[str], offset: int, tenant: str, conversation_id: str | None) -> HashMatch | None:
    index = {h: i for i, h in enumerate(hashes)}
    best: tuple[int, float, str, str, int, str | None] | None = None  # index, updated_at, the match
    for start in range(0, len(hashes), 900):
        batch = hashes[start : start + 900]
        marks = ",".join("?" * len(batch))
        sql = (
            "SELECT e.chain_hash, e.conversation_id, e.branch_id, e.seq, c.updated_at, b.system_hash "
            "FROM events e JOIN conversations c ON c.id = e.conversation_id "
            "JOIN branches b ON b.id = e.branch_id "
            f"WHERE e.chain_hash IN ({marks}) AND c.tenant = ?"
        )
        params: list[Any] = [*batch, tenant]
        if conversation_id is not None:
            sql += " AND e.conversation_id = ?"
            params.append(conversation_id)
        for chain_hash, conv_id, branch_id, seq, updated_at, system_hash in db.execute(sql, params):
            if best is None or (index[chain_hash], updated_at) > best[:2]:
                best = (index[chain_hash], updated_at, conv_id, branch_id, seq, system_hash)
    if best is None:
        return None
    found, _, conv_id, branch_id, seq, system_hash = best
    return HashMatch(Position(conv_id, branch_id, seq), offset + found + 1, system_hash)


def _append(
    db: Db, start: Position, events: list[NewEvent], system_hash: str | None, now: float, stamp: bool
) -> Position:
    """Unstamped appends (`stamp` False: a request not yet accepted upstream) move heads but no
    `updated_at`, so they cannot change which branch is the default one."""
    conversation = start.conversation_id
    if stamp:
        known = db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation)).rowcount > 0
    else:
        known = db.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation,)).fetchone() is not None
    if not known:
        raise ConversationGone(f"conversation {conversation} no longer exists")
    branch, seq = start.branch_id, start.seq
    heads: dict[str, int] = {}  # head_seq of the branches read or written so far
    moved: set[str] = set()  # branches whose head this append moved
    for event in events:
        row = db.execute(
            "SELECT branch_id, seq FROM events WHERE chain_hash = ? AND conversation_id = ?",
            (event.chain_hash, conversation),
        ).fetchone()
        if row is not None:
            branch, seq = row
            continue
        head = heads.get(branch)
        if head is None:
            row = db.execute("SELECT head_seq FROM branches WHERE id = ?", (branch,)).fetchone()
            if row is None:  # retracted meanwhile: the fork a rejected request created, now empty
                raise StoreError(f"append refused: branch {branch} no longer exists")
            (head,) = row
            heads[branch] = head
        if seq != head:
            child = new_id("b")
            db.execute(
                "INSERT INTO branches (id, conversation_id, parent_id, fork_seq, head_seq, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (child, conversation, branch, seq, seq, now, now),
            )
            branch = child
        seq += 1
        db.execute(
            "INSERT INTO events (branch_id, seq, conversation_id, role, message, chain_hash, source, "
            "tokens, call_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                branch,
                seq,
                conversation,
                event.role,
                codec.dumps_str(event.message),
                event.chain_hash,
                event.source,
                event.tokens,
                event.call_id,
                now,
            ),
        )
        heads[branch] = seq
        moved.add(branch)
    # One UPDATE per moved branch at the end, instead of one per event.
    stamped = ", updated_at = ?" if stamp else ""
    for other in moved - {branch}:
        db.execute(
            f"UPDATE branches SET head_seq = ?{stamped} WHERE id = ?",
            (heads[other], *([now] if stamp else []), other),
        )
    sets: list[str] = ["updated_at = ?"] if stamp else []
    params: list[Any] = [now] if stamp else []
    if branch in moved:
        sets.append("head_seq = ?")
        params.append(heads[branch])
    if stamp and system_hash is not None:
        sets.append("system_hash = ?")
        params.append(system_hash)
    if sets:
        db.execute(f"UPDATE branches SET {', '.join(sets)} WHERE id = ?", (*params, branch))
    return Position(conversation, branch, seq)


def extend_head(db: Db, head: Position, head_hash: str, events: list[NewEvent], now: float) -> Position | None:
    """The statements of `Store.extend`, in the caller's transaction on `db` (`History.extend`
    gives them one of their own; bench.store_calls shares one with `insert_answered`)."""
    # One indexed probe proves what `find_longest` + `append` would find: the head's hash stored
    # once (chain hashes are tenant-rooted, so nowhere else in the tenant), at a branch head, and
    # the first new hash nowhere (a stored later one would imply it: events are stored in chains).
    rows = db.execute(
        "SELECT e.branch_id, e.seq, e.chain_hash, b.head_seq FROM events e JOIN branches b ON b.id = e.branch_id "
        "WHERE e.chain_hash IN (?, ?)",
        (head_hash, events[0].chain_hash),
    ).fetchall()
    if rows != [(head.branch_id, head.seq, head_hash, head.seq)]:
        return None
    return _append(db, head, events, None, now, stamp=False)


def insert_answered(db: Db, call: CallRecord, turn: ResponseTurn, now: float) -> Position | StoreError | None:
    """The statements of `Store.record_answered`, in the caller's transaction on `db`."""
    insert_call(db, call)  # refused (a deleted conversation): nothing is written, the turn neither
    # The turn in a savepoint of its own: when it is refused, only it is undone.
    db.execute("SAVEPOINT turn")
    try:
        position = _append(db, turn.end, [] if turn.answer is None else [turn.answer], turn.system_hash, now, True)
    except StoreError as exc:
        db.execute("ROLLBACK TO turn")
        return exc
    finally:
        db.execute("RELEASE turn")
    return None if turn.answer is None else position


def _retract(db: Db, end: Position, hashes: list[str]) -> bool:
    row = db.execute("SELECT head_seq, fork_seq, parent_id FROM branches WHERE id = ?", (end.branch_id,)).fetchone()
    if row is None:
        return False
    head_seq, fork_seq, parent_id = row
    if head_seq != end.seq or head_seq - fork_seq < len(hashes):
        return False
    cut = end.seq - len(hashes)
    stored = db.execute(
        "SELECT chain_hash FROM events WHERE branch_id = ? AND seq > ? ORDER BY seq", (end.branch_id, cut)
    ).fetchall()
    if [chain_hash for (chain_hash,) in stored] != hashes:
        return False
    if db.execute("SELECT 1 FROM branches WHERE parent_id = ? AND fork_seq > ?", (end.branch_id, cut)).fetchone():
        return False
    db.execute("DELETE FROM events WHERE branch_id = ? AND seq > ?", (end.branch_id, cut))
    if cut == fork_seq and parent_id is not None:
        db.execute("DELETE FROM branches WHERE id = ?", (end.branch_id,))
        db.execute("DELETE FROM checkpoints WHERE branch_id = ?", (end.branch_id,))
        db.execute("DELETE FROM leases WHERE branch_id = ?", (end.branch_id,))
    else:
        db.execute("UPDATE branches SET head_seq = ? WHERE id = ?", (cut, end.branch_id))
    return True


def _segments(db: Db, branch_id: str) -> list[tuple[str, int]]:
    """The lineage's branches from the root, each with the last seq it contributes (an
    ancestor's events up to its child's fork point)."""
    segments: list[tuple[str, int]] = []
    current: str | None = branch_id
    upto = 1 << 62
    while current is not None:
        row = db.execute("SELECT parent_id, fork_seq FROM branches WHERE id = ?", (current,)).fetchone()
        if row is None:
            break
        segments.append((current, upto))
        current, upto = row
    return segments[::-1]


def _lineage_counts(db: Db, branch_id: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for seg_branch, seg_upto in _segments(db, branch_id):
        rows = db.execute(
            "SELECT chain_hash, tokens FROM events WHERE branch_id = ? AND seq <= ? AND tokens IS NOT NULL",
            (seg_branch, seg_upto),
        )
        out.update(rows)
    return out


def _lineage_events(db: Db, branch_id: str, after_seq: int, limit: int) -> list[StoredEvent]:
    out: list[StoredEvent] = []
    for seg_branch, seg_upto in _segments(db, branch_id):
        rows = db.execute(
            f"SELECT {_EVENT.sql} FROM events WHERE branch_id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
            (seg_branch, after_seq, seg_upto, limit - len(out)),
        )
        out.extend(_EVENT.all(rows))
        if len(out) >= limit:
            break
    return out


def _delete(db: Db, conversation_id: str, now: float, only_if_empty: bool = False) -> bool:
    if only_if_empty and (
        db.execute("SELECT COUNT(*) FROM branches WHERE conversation_id = ?", (conversation_id,)).fetchone()[0] > 1
        or db.execute(
            "SELECT 1 FROM events WHERE branch_id IN (SELECT id FROM branches WHERE conversation_id = ?) LIMIT 1",
            (conversation_id,),
        ).fetchone()
        or db.execute("SELECT 1 FROM calls WHERE conversation_id = ? LIMIT 1", (conversation_id,)).fetchone()
    ):
        return False  # continued meanwhile: it stays
    found = db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0
    # Branches and events cascade; calls and tombstone are explicit. Events go by branch: they are
    # keyed (branch_id, seq), with no index on conversation_id (by it, the whole table was read).
    db.execute(
        "DELETE FROM events WHERE branch_id IN (SELECT id FROM branches WHERE conversation_id = ?)", (conversation_id,)
    )
    db.execute("DELETE FROM branches WHERE conversation_id = ?", (conversation_id,))
    db.execute("DELETE FROM calls WHERE conversation_id = ?", (conversation_id,))
    db.execute("DELETE FROM checkpoints WHERE conversation_id = ?", (conversation_id,))
    db.execute("DELETE FROM leases WHERE conversation_id = ?", (conversation_id,))
    if found:
        db.execute(
            "INSERT OR REPLACE INTO tombstones (conversation_id, deleted_at) VALUES (?, ?)", (conversation_id, now)
        )
    return found
