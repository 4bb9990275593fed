"""Checkpoints (compare-and-set commits by Lua, inheritance across forks) and compaction leases."""

from __future__ import annotations

import time
from dataclasses import asdict

from ... import codec
from ...errors import ConversationGone
from ..base import CheckpointCandidate, StoredCheckpoint
from ..public import new_id
from .connection import RedisConnection, guarded, num
from .keys import conversation_of, is_conversation_id


class Checkpoints(RedisConnection):
    @guarded
    async def active_checkpoint(self, branch_id: str) -> StoredCheckpoint | None:
        cid = conversation_of(branch_id)
        if cid is None:
            return None
        reply = await self._run("active", self.keys.conversation(cid), branch_id)
        if not reply or reply[0] is None:
            return None
        return _checkpoint(reply[0], reply[1])

    @guarded
    async def commit_checkpoint(self, candidate: CheckpointCandidate) -> StoredCheckpoint | None:
        checkpoint = _new_checkpoint(candidate, "active")
        cid = candidate.conversation_id
        if not is_conversation_id(cid):
            raise ConversationGone(f"conversation {cid} does not exist")
        reply = await self._run(
            "commit",
            self.keys.conversation(cid),
            cid,
            candidate.branch_id,
            candidate.parent_generation,
            candidate.covered_through_seq,
            candidate.source_hash,
            checkpoint.id,
            _checkpoint_json(checkpoint),
            num(checkpoint.created_at),
            "" if candidate.lease_token is None else str(candidate.lease_token),
        )
        if reply[0] == "GONE":
            raise ConversationGone(f"conversation {cid} no longer exists")
        if reply[0] != "OK":
            return None
        return checkpoint

    @guarded
    async def record_failed_checkpoint(self, candidate: CheckpointCandidate, error: str) -> None:
        failed = _new_checkpoint(candidate, "failed", error)
        cid = candidate.conversation_id
        if not is_conversation_id(cid):
            raise ConversationGone(f"conversation {cid} does not exist")
        reply = await self._run(
            "failed",
            self.keys.conversation(cid),
            cid,
            candidate.branch_id,
            failed.id,
            _checkpoint_json(failed),
            candidate.covered_through_seq,
            num(failed.created_at),
        )
        if reply[0] == "GONE":
            raise ConversationGone(f"conversation {cid} no longer exists")

    @guarded
    async def list_checkpoints(self, conversation_id: str) -> list[StoredCheckpoint]:
        if not is_conversation_id(conversation_id):
            return []
        ids = await self.r.lrange(self.keys.one(conversation_id, "cklist"), 0, -1)
        if not ids:
            return []
        rows = await self.r.hmget(
            self.keys.one(conversation_id, "cks"), [f for ck in ids for f in (ck, f"{ck}:status")]
        )
        return [_checkpoint(rows[i], rows[i + 1]) for i in range(0, len(rows), 2) if rows[i] is not None]

    @guarded
    async def purge_checkpoints(self, before: float) -> int:
        return await self._purge_by_conversation("cks-retired", "purge_cks", before)

    # -- leases ------------------------------------------------------------------------------
    @guarded
    async def acquire_lease(self, branch_id: str, owner: str, ttl: float) -> int | None:
        cid = conversation_of(branch_id)
        if cid is None:
            return None
        reply = await self._run("acquire", self.keys.conversation(cid), branch_id, owner, _ms(ttl))
        return int(reply[1]) if reply[0] == "OK" else None

    @guarded
    async def renew_lease(self, branch_id: str, owner: str, token: int, ttl: float) -> bool:
        cid = conversation_of(branch_id)
        if cid is None:
            return False
        return bool(await self._run("renew", self.keys.conversation(cid), branch_id, owner, str(token), _ms(ttl)))

    @guarded
    async def release_lease(self, branch_id: str, owner: str, token: int) -> None:
        cid = conversation_of(branch_id)
        if cid is not None:
            await self._run("release", self.keys.conversation(cid), branch_id, owner, str(token))


def _new_checkpoint(candidate: CheckpointCandidate, status: str, error: str | None = None) -> StoredCheckpoint:
    return candidate.stored(new_id("ck"), status, time.time(), error)


def _checkpoint_json(cp: StoredCheckpoint) -> str:
    """The record without its status (a field of its own, the scripts change it)."""
    record = asdict(cp)
    del record["status"]
    if cp.status == "failed":
        record["generation"] = None  # like SQLite: a failed candidate does not hold a generation
    return codec.dumps_str(record)


def _checkpoint(payload: str, status: str) -> StoredCheckpoint:
    return StoredCheckpoint(status=status, **codec.loads(payload))


def _ms(seconds: float) -> str:
    return str(max(1, int(seconds * 1000)))
