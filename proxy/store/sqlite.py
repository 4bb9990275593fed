"""SQLite backend: the embedded default, one file, WAL.

Calls are synchronous on the event loop on purpose: each is a handful of indexed statements
(tens to hundreds of microseconds), cheaper than a hop to a worker thread. Every write is one
`BEGIN IMMEDIATE` transaction, so concurrent requests on one conversation serialize and a crash
leaves either all or none of an append.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConversationGone, StoreError
from .base import (
    USAGE_GROUP_COLUMNS,
    Branch,
    CallRecord,
    CheckpointCandidate,
    Conversation,
    HashMatch,
    NewEvent,
    Position,
    StoredCheckpoint,
    StoredEvent,
    UsageCell,
    UsageQuery,
    tokens_saved,
)

_M001_INITIAL = """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            external_id TEXT,
            main_branch_id TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE UNIQUE INDEX conversations_external ON conversations (tenant, external_id)
            WHERE external_id IS NOT NULL;
        CREATE INDEX conversations_updated ON conversations (updated_at);
        CREATE TABLE branches (
            id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            parent_id TEXT,
            fork_seq INTEGER NOT NULL,
            head_seq INTEGER NOT NULL,
            system_hash TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE INDEX branches_conversation ON branches (conversation_id);
        CREATE TABLE events (
            branch_id TEXT NOT NULL REFERENCES branches (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            conversation_id TEXT NOT NULL,
            role TEXT NOT NULL,
            message TEXT NOT NULL,
            chain_hash TEXT NOT NULL,
            source TEXT NOT NULL,
            tokens INTEGER,
            call_id TEXT,
            created_at REAL NOT NULL,
            PRIMARY KEY (branch_id, seq)
        ) WITHOUT ROWID;
        CREATE INDEX events_hash ON events (chain_hash);
        CREATE TABLE blobs (digest TEXT PRIMARY KEY, data TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE calls (
            id TEXT PRIMARY KEY,
            conversation_id TEXT,
            branch_id TEXT,
            tenant TEXT NOT NULL,
            route TEXT NOT NULL,
            model TEXT,
            purpose TEXT NOT NULL,
            stream INTEGER NOT NULL,
            status TEXT NOT NULL,
            upstream_status INTEGER,
            error TEXT,
            started_at REAL NOT NULL,
            latency_ms REAL,
            ttfb_ms REAL,
            response TEXT,
            finish_reason TEXT,
            usage_raw TEXT,
            input_total INTEGER,
            input_uncached INTEGER,
            cache_read INTEGER,
            cache_write INTEGER,
            output INTEGER,
            reasoning INTEGER,
            request_id TEXT,
            system_hash TEXT,
            tools_hash TEXT,
            projection TEXT
        );
        CREATE INDEX calls_conversation ON calls (conversation_id, started_at);
        CREATE TABLE tombstones (conversation_id TEXT PRIMARY KEY, deleted_at REAL NOT NULL);
"""

_M002_CHECKPOINTS = """
        CREATE TABLE checkpoints (
            id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL,
            branch_id TEXT NOT NULL,
            generation INTEGER,
            from_seq INTEGER NOT NULL,
            covered_through_seq INTEGER NOT NULL,
            source_hash TEXT NOT NULL,
            summary TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            model TEXT,
            format_version INTEGER NOT NULL,
            status TEXT NOT NULL,
            error TEXT,
            created_at REAL NOT NULL
        );
        CREATE UNIQUE INDEX checkpoints_generation ON checkpoints (branch_id, generation)
            WHERE generation IS NOT NULL;
        CREATE INDEX checkpoints_conversation ON checkpoints (conversation_id);
        CREATE INDEX calls_branch ON calls (branch_id, purpose, started_at);
"""

# The ledger: each call's cost and the tokens its rewriting saved, summed by /admin/usage.
_M003_LEDGER = """
        ALTER TABLE calls ADD COLUMN cost_usd REAL;
        ALTER TABLE calls ADD COLUMN tokens_saved INTEGER;
        UPDATE calls SET tokens_saved = json_extract(projection, '$.client_tokens')
            - json_extract(projection, '$.sent_tokens') WHERE purpose = 'main' AND projection IS NOT NULL;
        CREATE INDEX calls_started ON calls (started_at);
        CREATE INDEX calls_route ON calls (route, started_at);
"""

# Compaction leases (one row per branch, kept after release so the fencing token only grows) and
# the retention index of retired checkpoints.
_M004_LEASES = """
        CREATE TABLE leases (
            branch_id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL,
            owner TEXT,
            token INTEGER NOT NULL,
            expires_at REAL NOT NULL
        );
        CREATE INDEX leases_conversation ON leases (conversation_id);
        CREATE INDEX checkpoints_created ON checkpoints (status, created_at);
"""

# Ordered, named, applied once each; PRAGMA user_version is the number applied so far.
MIGRATIONS: list[tuple[str, str]] = [
    ("001_initial", _M001_INITIAL),
    ("002_checkpoints", _M002_CHECKPOINTS),
    ("003_ledger", _M003_LEDGER),
    ("004_leases", _M004_LEASES),
]

_USAGE_COLUMNS = ("input_total", "input_uncached", "cache_read", "cache_write", "output", "reasoning")
_LEDGER_FIELDS = (*_USAGE_COLUMNS, "cost_usd", "tokens_saved")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


class SqliteStore:
    def __init__(self, path: str) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        return cls(url.removeprefix("sqlite:///") or "ctxproxy.db")

    # -- lifecycle ---------------------------------------------------------------------------
    async def open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA secure_delete=ON")
        db.execute("PRAGMA busy_timeout=5000")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        for number, (_name, sql) in enumerate(MIGRATIONS, start=1):
            if number > version:
                db.executescript(f"BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version={number};\nCOMMIT;")
        self._db = db

    async def close(self) -> None:
        if self._db is not None:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
            self._db = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("the store is not open")
        return self._db

    async def ping(self) -> bool:
        self.db.execute("SELECT 1").fetchone()
        return True

    def _write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite write failed: {exc}") from exc

    async def tenant_salt(self) -> bytes:
        def get_or_create(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT value FROM meta WHERE key = 'tenant_salt'").fetchone()
            if row:
                return str(row[0])
            salt = secrets.token_hex(32)
            db.execute("INSERT INTO meta (key, value) VALUES ('tenant_salt', ?)", (salt,))
            return salt

        return bytes.fromhex(self._write(get_or_create))

    # -- identity ----------------------------------------------------------------------------
    async def find_longest(self, hashes: list[str], tenant: str, conversation_id: str | None) -> HashMatch | None:
        if not hashes:
            return None
        # Most requests continue the stored history by one or two messages: try the tail first.
        tail = hashes[-4:]
        match = self._find(tail, len(hashes) - len(tail), tenant, conversation_id)
        if match is None and len(hashes) > len(tail):
            match = self._find(hashes[: -len(tail)], 0, tenant, conversation_id)
        return match

    def _find(self, hashes: list[str], offset: int, tenant: str, conversation_id: str | None) -> HashMatch | None:
        index = {h: i for i, h in enumerate(hashes)}
        best: tuple[int, float, Any] | None = None
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
            for row in self.db.execute(sql, params):
                key = (index[row[0]], row[4], row)
                if best is None or key[:2] > best[:2]:
                    best = key
        if best is None:
            return None
        row = best[2]
        return HashMatch(Position(row[1], row[2], row[3]), offset + best[0] + 1, row[5])

    async def find_conversation(self, tenant: str, ref: str) -> Conversation | None:
        row = self.db.execute(
            f"SELECT {_CONV_COLS} FROM conversations WHERE tenant = ? AND (id = ? OR external_id = ?) "
            "ORDER BY id = ? DESC LIMIT 1",
            (tenant, ref, ref, ref),
        ).fetchone()
        return _conversation(row) if row else None

    async def create_conversation(self, tenant: str, external_id: str | None) -> Conversation:
        now = time.time()
        conv_id, branch_id = _new_id("c"), _new_id("b")

        def create(db: sqlite3.Connection) -> None:
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

    async def append(self, start: Position, events: list[NewEvent], system_hash: str | None) -> Position:
        now = time.time()

        def append(db: sqlite3.Connection) -> Position:
            if db.execute("SELECT 1 FROM conversations WHERE id = ?", (start.conversation_id,)).fetchone() is None:
                raise ConversationGone(f"conversation {start.conversation_id} no longer exists")
            branch, seq = start.branch_id, start.seq
            for event in events:
                row = db.execute(
                    "SELECT branch_id, seq FROM events WHERE chain_hash = ? AND conversation_id = ?",
                    (event.chain_hash, start.conversation_id),
                ).fetchone()
                if row is not None:
                    branch, seq = row[0], row[1]
                    continue
                head = db.execute("SELECT head_seq FROM branches WHERE id = ?", (branch,)).fetchone()[0]
                if seq != head:
                    child = _new_id("b")
                    db.execute(
                        "INSERT INTO branches (id, conversation_id, parent_id, fork_seq, head_seq, "
                        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (child, start.conversation_id, branch, seq, seq, now, now),
                    )
                    branch = child
                seq += 1
                db.execute(
                    "INSERT INTO events (branch_id, seq, conversation_id, role, message, chain_hash, source, "
                    "tokens, call_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        branch,
                        seq,
                        start.conversation_id,
                        event.role,
                        json.dumps(event.message),
                        event.chain_hash,
                        event.source,
                        event.tokens,
                        event.call_id,
                        now,
                    ),
                )
                db.execute("UPDATE branches SET head_seq = ?, updated_at = ? WHERE id = ?", (seq, now, branch))
            if system_hash is not None:
                db.execute(
                    "UPDATE branches SET system_hash = ?, updated_at = ? WHERE id = ?", (system_hash, now, branch)
                )
            else:
                db.execute("UPDATE branches SET updated_at = ? WHERE id = ?", (now, branch))
            db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, start.conversation_id))
            return Position(start.conversation_id, branch, seq)

        result: Position = self._write(append)
        return result

    async def put_blob(self, digest: str, data: str) -> None:
        self._write(lambda db: db.execute("INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)", (digest, data)))

    async def get_blob(self, digest: str) -> str | None:
        row = self.db.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchone()
        return str(row[0]) if row else None

    # -- calls -------------------------------------------------------------------------------
    async def record_call(self, call: CallRecord) -> None:
        usage = [call.usage.get(k) for k in _USAGE_COLUMNS]
        saved = tokens_saved(call.purpose, call.projection)

        def insert(db: sqlite3.Connection) -> None:
            if (
                call.conversation_id is not None
                and db.execute("SELECT 1 FROM tombstones WHERE conversation_id = ?", (call.conversation_id,)).fetchone()
            ):
                raise ConversationGone(f"conversation {call.conversation_id} was deleted")
            db.execute(
                "INSERT OR REPLACE INTO calls (id, conversation_id, branch_id, tenant, route, model, purpose, stream, "
                "status, upstream_status, error, started_at, latency_ms, ttfb_ms, response, finish_reason, "
                "usage_raw, input_total, input_uncached, cache_read, cache_write, output, reasoning, request_id, "
                "system_hash, tools_hash, projection, cost_usd, tokens_saved) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    call.id,
                    call.conversation_id,
                    call.branch_id,
                    call.tenant,
                    call.route,
                    call.model,
                    call.purpose,
                    int(call.stream),
                    call.status,
                    call.upstream_status,
                    call.error,
                    call.started_at,
                    call.latency_ms,
                    call.ttfb_ms,
                    _dumps(call.response),
                    call.finish_reason,
                    _dumps(call.usage_raw),
                    *usage,
                    call.request_id,
                    call.system_hash,
                    call.tools_hash,
                    _dumps(call.projection),
                    call.cost_usd,
                    saved,
                ),
            )

        self._write(insert)

    # -- checkpoints -------------------------------------------------------------------------
    def _active(self, db: sqlite3.Connection, branch_id: str) -> StoredCheckpoint | None:
        row = db.execute(
            f"SELECT {_CP_COLS} FROM checkpoints WHERE branch_id = ? AND status = 'active'", (branch_id,)
        ).fetchone()
        if row is not None:
            return _checkpoint(row)
        # A branch without its own summary inherits the newest ancestor summary that stops at or
        # before the fork point: a summary of events the branch does not share would be wrong.
        current = db.execute("SELECT parent_id, fork_seq FROM branches WHERE id = ?", (branch_id,)).fetchone()
        limit = None
        while current is not None and current[0] is not None:
            parent, fork_seq = current
            limit = fork_seq if limit is None else min(limit, fork_seq)
            row = db.execute(
                f"SELECT {_CP_COLS} FROM checkpoints WHERE branch_id = ? AND status IN ('active', 'superseded') "
                "AND covered_through_seq <= ? ORDER BY generation DESC LIMIT 1",
                (parent, limit),
            ).fetchone()
            if row is not None:
                return _checkpoint(row)
            current = db.execute("SELECT parent_id, fork_seq FROM branches WHERE id = ?", (parent,)).fetchone()
        return None

    async def active_checkpoint(self, branch_id: str) -> StoredCheckpoint | None:
        return self._active(self.db, branch_id)

    def _lineage_hash(self, db: sqlite3.Connection, branch_id: str, seq: int) -> str | None:
        current: str | None = branch_id
        while current is not None:
            row = db.execute("SELECT chain_hash FROM events WHERE branch_id = ? AND seq = ?", (current, seq)).fetchone()
            if row is not None:
                return str(row[0])
            parent = db.execute("SELECT parent_id, fork_seq FROM branches WHERE id = ?", (current,)).fetchone()
            if parent is None or parent[1] < seq:
                return None
            current = parent[0]
        return None

    async def commit_checkpoint(self, candidate: CheckpointCandidate) -> StoredCheckpoint | None:
        now = time.time()

        def commit(db: sqlite3.Connection) -> StoredCheckpoint | None:
            if db.execute("SELECT 1 FROM conversations WHERE id = ?", (candidate.conversation_id,)).fetchone() is None:
                raise ConversationGone(f"conversation {candidate.conversation_id} no longer exists")
            if candidate.lease_token is not None:
                row = db.execute("SELECT token FROM leases WHERE branch_id = ?", (candidate.branch_id,)).fetchone()
                if row is None or row[0] != candidate.lease_token:
                    return None
            active = self._active(db, candidate.branch_id)
            if (active.generation if active else 0) != candidate.parent_generation:
                return None
            if self._lineage_hash(db, candidate.branch_id, candidate.covered_through_seq) != candidate.source_hash:
                return None
            db.execute(
                "UPDATE checkpoints SET status = 'superseded' WHERE branch_id = ? AND status = 'active'",
                (candidate.branch_id,),
            )
            checkpoint = candidate.stored(_new_id("ck"), "active", now)
            self._insert_checkpoint(db, checkpoint)
            return checkpoint

        result: StoredCheckpoint | None = self._write(commit)
        return result

    def _insert_checkpoint(self, db: sqlite3.Connection, cp: StoredCheckpoint) -> None:
        db.execute(
            f"INSERT INTO checkpoints ({_CP_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                cp.id,
                cp.conversation_id,
                cp.branch_id,
                cp.generation if cp.status != "failed" else None,
                cp.from_seq,
                cp.covered_through_seq,
                cp.source_hash,
                cp.summary,
                cp.tokens,
                cp.model,
                cp.format_version,
                cp.status,
                cp.created_at,
                cp.error,
            ),
        )

    async def record_failed_checkpoint(self, candidate: CheckpointCandidate, error: str) -> None:
        failed = candidate.stored(_new_id("ck"), "failed", time.time(), error)

        def insert(db: sqlite3.Connection) -> None:
            if db.execute("SELECT 1 FROM conversations WHERE id = ?", (candidate.conversation_id,)).fetchone() is None:
                raise ConversationGone(f"conversation {candidate.conversation_id} no longer exists")
            self._insert_checkpoint(db, failed)

        self._write(insert)

    # -- leases ------------------------------------------------------------------------------
    async def acquire_lease(self, branch_id: str, owner: str, ttl: float) -> int | None:
        def acquire(db: sqlite3.Connection) -> int | None:
            now = time.time()
            branch = db.execute("SELECT conversation_id FROM branches WHERE id = ?", (branch_id,)).fetchone()
            if branch is None:
                return None
            row = db.execute("SELECT owner, token, expires_at FROM leases WHERE branch_id = ?", (branch_id,)).fetchone()
            if row is not None and row[0] is not None and row[0] != owner and row[2] > now:
                return None
            token = (row[1] if row is not None else 0) + 1
            db.execute(
                "INSERT OR REPLACE INTO leases (branch_id, conversation_id, owner, token, expires_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (branch_id, branch[0], owner, token, now + ttl),
            )
            return int(token)

        result: int | None = self._write(acquire)
        return result

    async def renew_lease(self, branch_id: str, owner: str, token: int, ttl: float) -> bool:
        def renew(db: sqlite3.Connection) -> bool:
            now = time.time()
            return (
                db.execute(
                    "UPDATE leases SET expires_at = ?"
                    " WHERE branch_id = ? AND owner = ? AND token = ? AND expires_at > ?",
                    (now + ttl, branch_id, owner, token, now),
                ).rowcount
                > 0
            )

        renewed: bool = self._write(renew)
        return renewed

    async def release_lease(self, branch_id: str, owner: str, token: int) -> None:
        self._write(
            lambda db: db.execute(
                "UPDATE leases SET owner = NULL, expires_at = 0 WHERE branch_id = ? AND owner = ? AND token = ?",
                (branch_id, owner, token),
            )
        )

    async def list_checkpoints(self, conversation_id: str) -> list[StoredCheckpoint]:
        rows = self.db.execute(
            f"SELECT {_CP_COLS} FROM checkpoints WHERE conversation_id = ? ORDER BY created_at, rowid",
            (conversation_id,),
        )
        return [_checkpoint(r) for r in rows]

    # -- admin -------------------------------------------------------------------------------
    async def list_conversations(self, limit: int, before: float | None) -> list[Conversation]:
        sql = f"SELECT {_CONV_COLS} FROM conversations"
        params: list[Any] = []
        if before is not None:
            sql += " WHERE updated_at < ?"
            params.append(before)
        sql += " ORDER BY updated_at DESC LIMIT ?"
        params.append(limit)
        return [_conversation(r) for r in self.db.execute(sql, params)]

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        row = self.db.execute(f"SELECT {_CONV_COLS} FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return _conversation(row) if row else None

    async def list_branches(self, conversation_id: str) -> list[Branch]:
        rows = self.db.execute(
            "SELECT id, conversation_id, parent_id, fork_seq, head_seq, created_at, updated_at FROM branches "
            "WHERE conversation_id = ? ORDER BY created_at, rowid",
            (conversation_id,),
        )
        return [Branch(*r) for r in rows]

    async def lineage_events(self, branch_id: str, after_seq: int, limit: int) -> list[StoredEvent]:
        # Walk up to the root: each ancestor contributes its events up to the child's fork point.
        segments: list[tuple[str, int]] = []
        current: str | None = branch_id
        upto = 1 << 62
        while current is not None:
            row = self.db.execute("SELECT parent_id, fork_seq FROM branches WHERE id = ?", (current,)).fetchone()
            if row is None:
                break
            segments.append((current, upto))
            upto = row[1]
            current = row[0]
        out: list[StoredEvent] = []
        for seg_branch, seg_upto in reversed(segments):
            rows = self.db.execute(
                "SELECT branch_id, seq, role, message, chain_hash, source, tokens, created_at FROM events "
                "WHERE branch_id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
                (seg_branch, after_seq, seg_upto, limit - len(out)),
            )
            out.extend(StoredEvent(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6], r[7]) for r in rows)
            if len(out) >= limit:
                break
        return out

    async def list_calls(self, conversation_id: str, limit: int, offset: int) -> list[CallRecord]:
        rows = self.db.execute(
            f"SELECT {_CALL_COLS} FROM calls WHERE conversation_id = ? ORDER BY started_at, rowid LIMIT ? OFFSET ?",
            (conversation_id, limit, offset),
        )
        return [_call(r) for r in rows]

    async def usage_cells(self, query: UsageQuery) -> list[UsageCell]:
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
        fields = ", ".join(f"SUM({f}), COUNT({f})" for f in _LEDGER_FIELDS)
        rows = self.db.execute(
            f"SELECT {key}, purpose, status, COUNT(*), {fields} FROM calls "
            + (f"WHERE {' AND '.join(where)} " if where else "")
            + f"GROUP BY {key}, purpose, status",
            args,
        ).fetchall()
        cells = []
        for row in rows:
            values = row[4:]
            sums = {f: values[2 * i] for i, f in enumerate(_LEDGER_FIELDS)}
            known = {f: values[2 * i + 1] for i, f in enumerate(_LEDGER_FIELDS)}
            cells.append(UsageCell(row[0], row[1], row[2], row[3], sums, known))
        return cells

    async def last_call(self, branch_id: str, purpose: str) -> CallRecord | None:
        row = self.db.execute(
            f"SELECT {_CALL_COLS} FROM calls WHERE branch_id = ? AND purpose = ? ORDER BY started_at DESC, rowid DESC "
            "LIMIT 1",
            (branch_id, purpose),
        ).fetchone()
        return _call(row) if row else None

    async def delete_conversation(self, conversation_id: str) -> bool:
        def delete(db: sqlite3.Connection) -> bool:
            found = db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0
            # Branches and events cascade; calls and tombstone are explicit.
            db.execute("DELETE FROM events WHERE conversation_id = ?", (conversation_id,))
            db.execute("DELETE FROM branches WHERE conversation_id = ?", (conversation_id,))
            db.execute("DELETE FROM calls WHERE conversation_id = ?", (conversation_id,))
            db.execute("DELETE FROM checkpoints WHERE conversation_id = ?", (conversation_id,))
            db.execute("DELETE FROM leases WHERE conversation_id = ?", (conversation_id,))
            if found:
                db.execute(
                    "INSERT OR REPLACE INTO tombstones (conversation_id, deleted_at) VALUES (?, ?)",
                    (conversation_id, time.time()),
                )
            return found

        found: bool = self._write(delete)
        if found:
            # secure_delete zeroes freed pages; the checkpoint moves them out of the WAL too.
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return found

    # -- retention ---------------------------------------------------------------------------
    async def purge_calls(self, before: float) -> int:
        count: int = self._write(lambda db: db.execute("DELETE FROM calls WHERE started_at < ?", (before,)).rowcount)
        return count

    async def purge_checkpoints(self, before: float) -> int:
        count: int = self._write(
            lambda db: (
                db.execute(
                    "DELETE FROM checkpoints WHERE status IN ('superseded', 'failed') AND created_at < ?", (before,)
                ).rowcount
            )
        )
        return count

    async def stale_conversations(self, before: float, limit: int) -> list[str]:
        rows = self.db.execute(
            "SELECT id FROM conversations WHERE updated_at < ? ORDER BY updated_at LIMIT ?", (before, limit)
        )
        return [str(r[0]) for r in rows]


_CONV_COLS = "id, tenant, external_id, created_at, updated_at, main_branch_id"


_CP_COLS = (
    "id, conversation_id, branch_id, generation, from_seq, covered_through_seq, source_hash, summary, tokens, "
    "model, format_version, status, created_at, error"
)


def _checkpoint(row: Any) -> StoredCheckpoint:
    return StoredCheckpoint(*row)


_CALL_COLS = (
    "id, tenant, route, model, purpose, stream, started_at, conversation_id, branch_id, status, upstream_status, "
    "error, latency_ms, ttfb_ms, response, finish_reason, usage_raw, "
    + ", ".join(_USAGE_COLUMNS)
    + ", request_id, system_hash, tools_hash, projection, cost_usd"
)


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
        usage=dict(zip(_USAGE_COLUMNS, r[17:23], strict=True)),
        request_id=r[23],
        system_hash=r[24],
        tools_hash=r[25],
        projection=_loads(r[26]),
        cost_usd=r[27],
    )


def _conversation(row: Any) -> Conversation:
    return Conversation(row[0], row[1], row[2], row[3], row[4], row[5])


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)
