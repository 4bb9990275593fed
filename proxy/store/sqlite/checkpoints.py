"""Checkpoints (compare-and-set commits, inheritance across forks) and compaction leases."""

from __future__ import annotations

import time
from typing import Any

from ...errors import ConversationGone
from ..base import CheckpointCandidate, StoredCheckpoint
from ..public import new_id
from .connection import Db, SqliteConnection
from .rows import Select

_CHECKPOINT = Select(StoredCheckpoint)


class Checkpoints(SqliteConnection):
    async def active_checkpoint(self, branch_id: str) -> StoredCheckpoint | None:
        return self._read(_active, branch_id)

    async def commit_checkpoint(self, candidate: CheckpointCandidate) -> StoredCheckpoint | None:
        return self._write(_commit, candidate, time.time())

    async def record_failed_checkpoint(self, candidate: CheckpointCandidate, error: str) -> None:
        failed = candidate.stored(new_id("ck"), "failed", time.time(), error)

        def insert(db: Db) -> None:
            _require_conversation(db, candidate.conversation_id)
            _insert(db, failed)

        self._write(insert)

    async def list_checkpoints(self, conversation_id: str) -> list[StoredCheckpoint]:
        rows = self._read(
            lambda db: db.execute(
                f"SELECT {_CHECKPOINT.sql} FROM checkpoints WHERE conversation_id = ? ORDER BY created_at, rowid",
                (conversation_id,),
            ).fetchall()
        )
        return _CHECKPOINT.all(rows)

    async def purge_checkpoints(self, before: float) -> int:
        return self._write(
            lambda db: (
                db.execute(
                    "DELETE FROM checkpoints WHERE status IN ('superseded', 'failed') AND created_at < ?", (before,)
                ).rowcount
            )
        )

    # -- leases ------------------------------------------------------------------------------
    async def acquire_lease(self, branch_id: str, owner: str, ttl: float) -> int | None:
        return self._write(_acquire, branch_id, owner, ttl)

    async def renew_lease(self, branch_id: str, owner: str, token: int, ttl: float) -> bool:
        def renew(db: Db) -> bool:
            now = time.time()
            return (
                db.execute(
                    "UPDATE leases SET expires_at = ?"
                    " WHERE branch_id = ? AND owner = ? AND token = ? AND expires_at > ?",
                    (now + ttl, branch_id, owner, token, now),
                ).rowcount
                > 0
            )

        return self._write(renew)

    async def release_lease(self, branch_id: str, owner: str, token: int) -> None:
        self._write(
            lambda db: db.execute(
                "UPDATE leases SET owner = NULL, expires_at = 0 WHERE branch_id = ? AND owner = ? AND token = ?",
                (branch_id, owner, token),
            )
        )


def _require_conversation(db: Db, conversation_id: str) -> None:
    if db.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)).fetchone() is None:
        raise ConversationGone(f"conversation {conversation_id} no longer exists")


def _active(db: Db, branch_id: str) -> StoredCheckpoint | None:
    own = _CHECKPOINT.one(
        db.execute(
            f"SELECT {_CHECKPOINT.sql} FROM checkpoints WHERE branch_id = ? AND status = 'active'", (branch_id,)
        ).fetchone()
    )
    if own is not None:
        return own
    # A branch without its own summary inherits the newest ancestor summary that stops at or
    # before the fork point: a summary of events the branch does not share would be wrong.
    current = db.execute("SELECT parent_id, fork_seq FROM branches WHERE id = ?", (branch_id,)).fetchone()
    limit = None
    while current is not None:
        parent, fork_seq = current
        if parent is None:
            break
        limit = fork_seq if limit is None else min(limit, fork_seq)
        inherited = _CHECKPOINT.one(
            db.execute(
                f"SELECT {_CHECKPOINT.sql} FROM checkpoints WHERE branch_id = ? AND status IN ('active', 'superseded') "
                "AND covered_through_seq <= ? ORDER BY generation DESC LIMIT 1",
                (parent, limit),
            ).fetchone()
        )
        if inherited is not None:
            return inherited
        current = db.execute("SELECT parent_id, fork_seq FROM branches WHERE id = ?", (parent,)).fetchone()
    return None


def _lineage_hash(db: Db, branch_id: str, seq: int) -> str | None:
    """The chain hash of the event at `seq` in the lineage of `branch_id`."""
    current: str | None = branch_id
    while current is not None:
        row = db.execute("SELECT chain_hash FROM events WHERE branch_id = ? AND seq = ?", (current, seq)).fetchone()
        if row is not None:
            return str(row[0])
        branch = db.execute("SELECT parent_id, fork_seq FROM branches WHERE id = ?", (current,)).fetchone()
        if branch is None:
            return None
        parent_id, fork_seq = branch
        if fork_seq < seq:
            return None
        current = parent_id
    return None


def _commit(db: Db, candidate: CheckpointCandidate, now: float) -> StoredCheckpoint | None:
    _require_conversation(db, candidate.conversation_id)
    if candidate.lease_token is not None:
        lease = db.execute("SELECT token FROM leases WHERE branch_id = ?", (candidate.branch_id,)).fetchone()
        if lease is None or lease[0] != candidate.lease_token:
            return None
    active = _active(db, candidate.branch_id)
    if (active.generation if active else 0) != candidate.parent_generation:
        return None
    if _lineage_hash(db, candidate.branch_id, candidate.covered_through_seq) != candidate.source_hash:
        return None
    db.execute(
        "UPDATE checkpoints SET status = 'superseded' WHERE branch_id = ? AND status = 'active'",
        (candidate.branch_id,),
    )
    checkpoint = candidate.stored(new_id("ck"), "active", now)
    _insert(db, checkpoint)
    return checkpoint


def _insert(db: Db, cp: StoredCheckpoint) -> None:
    values: dict[str, Any] = {name: getattr(cp, name) for name in _CHECKPOINT.names}
    if cp.status == "failed":
        values["generation"] = None  # a failed candidate holds no generation (the unique index is on live ones)
    db.execute(
        f"INSERT INTO checkpoints ({_CHECKPOINT.sql}) VALUES ({', '.join('?' * len(values))})", tuple(values.values())
    )


def _acquire(db: Db, branch_id: str, owner: str, ttl: float) -> int | None:
    now = time.time()
    branch = db.execute("SELECT conversation_id FROM branches WHERE id = ?", (branch_id,)).fetchone()
    if branch is None:
        return None
    held = db.execute("SELECT owner, token, expires_at FROM leases WHERE branch_id = ?", (branch_id,)).fetchone()
    last_token = 0
    if held is not None:
        holder, last_token, expires_at = held
        if holder is not None and holder != owner and expires_at > now:
            return None
    token = last_token + 1
    db.execute(
        "INSERT OR REPLACE INTO leases (branch_id, conversation_id, owner, token, expires_at) VALUES (?, ?, ?, ?, ?)",
        (branch_id, branch[0], owner, token, now + ttl),
    )
    return int(token)
