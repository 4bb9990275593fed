"""Checkpoints (fenced compare-and-set commits, inheritance across forks) and compaction leases.

A lease is a row per branch, kept after release so its fencing token only grows; taking it is one
statement (`INSERT ... ON CONFLICT DO UPDATE ... WHERE` the holder is this owner, nobody, or
expired), so two replicas racing for it cannot both win, and a replica killed -9 holding it just
lets it expire. A commit locks the branch's lease row and its branch row, so neither a takeover
nor another commit can interleave with its checks; its write is one statement that supersedes the
branch's active checkpoint and inserts the new generation, and the unique index on (branch,
generation) refuses a second commit of the same parent whatever happens.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from ...errors import ConversationGone
from ..base import CheckpointCandidate, StoredCheckpoint
from ..public import new_id
from ..sqlite.rows import Select
from .calls import PURGE_BATCH
from .connection import Conn, PostgresConnection, count

_CHECKPOINT = Select(StoredCheckpoint)
_VALUES = ", ".join(f"${i}" for i in range(1, len(_CHECKPOINT.names) + 1))
_INSERT = f"INSERT INTO checkpoints ({_CHECKPOINT.sql}) VALUES ({_VALUES})"
_SUPERSEDE_AND_INSERT = (
    "WITH retired AS (UPDATE checkpoints SET status = 'superseded' "
    "WHERE branch_id = $3 AND status = 'active' RETURNING id) "
    f"INSERT INTO checkpoints ({_CHECKPOINT.sql}) VALUES ({_VALUES})"
)
_OWN = (
    f"SELECT b.parent_id, b.fork_seq, {', '.join('c.' + name for name in _CHECKPOINT.names)} FROM branches b "
    "LEFT JOIN checkpoints c ON c.branch_id = b.id AND c.status = 'active' WHERE b.id = $1"
)
_ACQUIRE = (
    "INSERT INTO leases (branch_id, conversation_id, owner, token, expires_at) "
    "SELECT id, conversation_id, $2, 1, $3::float8 + $4::float8 FROM branches WHERE id = $1 "
    "ON CONFLICT (branch_id) DO UPDATE SET owner = EXCLUDED.owner, token = leases.token + 1, "
    "expires_at = EXCLUDED.expires_at "
    "WHERE leases.owner IS NULL OR leases.owner = EXCLUDED.owner OR leases.expires_at <= $3 "
    "RETURNING token"
)


class Checkpoints(PostgresConnection):
    async def active_checkpoint(self, branch_id: str) -> StoredCheckpoint | None:
        return await self._read(_active, branch_id)

    async def commit_checkpoint(self, candidate: CheckpointCandidate) -> StoredCheckpoint | None:
        return await self._write(_commit, candidate, time.time())

    async def record_failed_checkpoint(self, candidate: CheckpointCandidate, error: str) -> None:
        failed = candidate.stored(new_id("ck"), "failed", time.time(), error)

        async def insert(conn: Conn) -> None:
            await _require_conversation(conn, candidate.conversation_id)
            await conn.execute(_INSERT, *_values(failed))

        await self._write(insert)

    async def list_checkpoints(self, conversation_id: str) -> list[StoredCheckpoint]:
        rows = await self._read(
            lambda conn: conn.fetch(
                f"SELECT {_CHECKPOINT.sql} FROM checkpoints WHERE conversation_id = $1 ORDER BY created_at, ord",
                conversation_id,
            )
        )
        return _CHECKPOINT.all(rows)

    async def purge_checkpoints(self, before: float) -> int:
        sql = (
            "DELETE FROM checkpoints WHERE id IN (SELECT id FROM checkpoints "
            "WHERE status IN ('superseded', 'failed') AND created_at < $1 LIMIT $2)"
        )
        total = 0
        while True:
            deleted = count(await self._write(lambda conn: conn.execute(sql, before, PURGE_BATCH)))
            total += deleted
            if deleted < PURGE_BATCH:
                return total

    # -- leases ------------------------------------------------------------------------------
    async def acquire_lease(self, branch_id: str, owner: str, ttl: float) -> int | None:
        token = await self._write(lambda conn: conn.fetchval(_ACQUIRE, branch_id, owner, time.time(), ttl))
        return None if token is None else int(token)

    async def renew_lease(self, branch_id: str, owner: str, token: int, ttl: float) -> bool:
        now = time.time()
        status = await self._write(
            lambda conn: conn.execute(
                "UPDATE leases SET expires_at = $1"
                " WHERE branch_id = $2 AND owner = $3 AND token = $4 AND expires_at > $5",
                now + ttl,
                branch_id,
                owner,
                token,
                now,
            )
        )
        return count(status) > 0

    async def release_lease(self, branch_id: str, owner: str, token: int) -> None:
        await self._write(
            lambda conn: conn.execute(
                "UPDATE leases SET owner = NULL, expires_at = 0 WHERE branch_id = $1 AND owner = $2 AND token = $3",
                branch_id,
                owner,
                token,
            )
        )


def _values(cp: StoredCheckpoint) -> list[Any]:
    values: list[Any] = [getattr(cp, name) for name in _CHECKPOINT.names]
    if cp.status == "failed":  # a failed candidate holds no generation (the unique index is on live ones)
        values[_CHECKPOINT.names.index("generation")] = None
    return values


async def _require_conversation(conn: Conn, conversation_id: str) -> None:
    if await conn.fetchval("SELECT 1 FROM conversations WHERE id = $1 FOR SHARE", conversation_id) is None:
        raise ConversationGone(f"conversation {conversation_id} no longer exists")


async def _active(conn: Conn, branch_id: str) -> StoredCheckpoint | None:
    # The branch's own active checkpoint and where it forked, in one query (one round trip on
    # every request; the walk below runs only for a fork without a summary of its own).
    row = await conn.fetchrow(_OWN, branch_id)
    if row is None:
        return None
    own = _CHECKPOINT.one(row[2:]) if row[2] is not None else None
    if own is not None:
        return own
    # A branch without its own summary inherits the newest ancestor summary that stops at or
    # before the fork point: a summary of events the branch does not share would be wrong.
    current = row[:2]
    limit = None
    while current is not None:
        parent, fork_seq = current
        if parent is None:
            break
        limit = fork_seq if limit is None else min(limit, fork_seq)
        inherited = _CHECKPOINT.one(
            await conn.fetchrow(
                f"SELECT {_CHECKPOINT.sql} FROM checkpoints WHERE branch_id = $1"
                " AND status IN ('active', 'superseded') AND covered_through_seq <= $2"
                " ORDER BY generation DESC LIMIT 1",
                parent,
                limit,
            )
        )
        if inherited is not None:
            return inherited
        current = await conn.fetchrow("SELECT parent_id, fork_seq FROM branches WHERE id = $1", parent)
    return None


async def _lineage_hash(conn: Conn, branch_id: str, seq: int) -> str | None:
    """The chain hash of the event at `seq` in the lineage of `branch_id`."""
    current: str | None = branch_id
    while current is not None:
        found = await conn.fetchval("SELECT chain_hash FROM events WHERE branch_id = $1 AND seq = $2", current, seq)
        if found is not None:
            return str(found)
        branch = await conn.fetchrow("SELECT parent_id, fork_seq FROM branches WHERE id = $1", current)
        if branch is None:
            return None
        parent_id, fork_seq = branch
        if fork_seq < seq:
            return None
        current = parent_id
    return None


async def _commit(conn: Conn, candidate: CheckpointCandidate, now: float) -> StoredCheckpoint | None:
    await _require_conversation(conn, candidate.conversation_id)
    if candidate.lease_token is not None:
        token = await conn.fetchval("SELECT token FROM leases WHERE branch_id = $1 FOR UPDATE", candidate.branch_id)
        if token != candidate.lease_token:
            return None
    if await conn.fetchval("SELECT 1 FROM branches WHERE id = $1 FOR UPDATE", candidate.branch_id) is None:
        return None
    active = await _active(conn, candidate.branch_id)
    if (active.generation if active else 0) != candidate.parent_generation:
        return None
    if await _lineage_hash(conn, candidate.branch_id, candidate.covered_through_seq) != candidate.source_hash:
        return None
    checkpoint = candidate.stored(new_id("ck"), "active", now)
    try:
        async with conn.transaction():  # a savepoint: the backstop's refusal undoes this statement only
            await conn.execute(_SUPERSEDE_AND_INSERT, *_values(checkpoint))
    except asyncpg.UniqueViolationError:
        return None  # another commit of the same parent landed first: this candidate is stale
    return checkpoint
