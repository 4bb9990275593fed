"""The PostgreSQL schema as an ordered list of named migrations, each applied once.

`schema_migrations` holds one row per step applied (number and name). `migrate` runs at start-up
under a session advisory lock keyed by the schema's name, so replicas starting at once apply each
step exactly once: the first takes the lock and migrates, the others wait for it and then find
nothing left to do. Each step commits in its own transaction together with its row, so a crash
leaves the schema at a step boundary. A database migrated by a newer ctxproxy (a step this code
does not know, or a name that differs) is refused rather than written to. Add a step by appending
to MIGRATIONS, never by editing one that has shipped.

Every index is named here; tests/store/test_postgres_plans.py asserts that the hot queries use
them. Times are epoch seconds (DOUBLE PRECISION), as in the `Store` contract; messages and other
JSON values are TEXT holding the codec's bytes, not JSONB: JSONB reorders keys, and a projection
must be byte-identical to what was stored (query them as `message::jsonb`). `ord` columns
(identity) keep insertion order where the admin API lists records in the order they were written.
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import StoreError

_M001_INITIAL = """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        external_id TEXT,
        main_branch_id TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    );
    CREATE UNIQUE INDEX conversations_external ON conversations (tenant, external_id)
        WHERE external_id IS NOT NULL;
    CREATE INDEX conversations_external_any ON conversations (external_id) WHERE external_id IS NOT NULL;
    CREATE INDEX conversations_updated ON conversations (updated_at);
    CREATE TABLE branches (
        id TEXT PRIMARY KEY,
        ord BIGINT GENERATED ALWAYS AS IDENTITY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        parent_id TEXT,
        fork_seq BIGINT NOT NULL,
        head_seq BIGINT NOT NULL,
        system_hash TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX branches_conversation ON branches (conversation_id);
    CREATE INDEX branches_parent ON branches (parent_id, fork_seq) WHERE parent_id IS NOT NULL;
    CREATE TABLE events (
        branch_id TEXT NOT NULL REFERENCES branches (id) ON DELETE CASCADE,
        seq BIGINT NOT NULL,
        conversation_id TEXT NOT NULL,
        role TEXT NOT NULL,
        message TEXT NOT NULL,
        chain_hash TEXT NOT NULL,
        source TEXT NOT NULL,
        tokens BIGINT,
        call_id TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        CONSTRAINT events_position PRIMARY KEY (branch_id, seq)
    );
    CREATE INDEX events_hash ON events (chain_hash);
    CREATE TABLE blobs (digest TEXT PRIMARY KEY, data TEXT NOT NULL);
    CREATE TABLE calls (
        id TEXT PRIMARY KEY,
        ord BIGINT GENERATED ALWAYS AS IDENTITY,
        conversation_id TEXT,
        branch_id TEXT,
        tenant TEXT NOT NULL,
        route TEXT NOT NULL,
        model TEXT,
        purpose TEXT NOT NULL,
        stream BOOLEAN NOT NULL,
        status TEXT NOT NULL,
        upstream_status INTEGER,
        error TEXT,
        started_at DOUBLE PRECISION NOT NULL,
        latency_ms DOUBLE PRECISION,
        ttfb_ms DOUBLE PRECISION,
        response TEXT,
        finish_reason TEXT,
        usage_raw TEXT,
        input_total BIGINT,
        input_uncached BIGINT,
        cache_read BIGINT,
        cache_write BIGINT,
        output BIGINT,
        reasoning BIGINT,
        request_id TEXT,
        system_hash TEXT,
        tools_hash TEXT,
        projection TEXT,
        cost_usd DOUBLE PRECISION,
        tokens_saved BIGINT
    );
    CREATE INDEX calls_conversation ON calls (conversation_id, started_at);
    CREATE INDEX calls_branch ON calls (branch_id, purpose, started_at);
    CREATE INDEX calls_started ON calls (started_at);
    CREATE INDEX calls_route ON calls (route, started_at);
    CREATE TABLE tombstones (conversation_id TEXT PRIMARY KEY, deleted_at DOUBLE PRECISION NOT NULL);
"""

# A failed candidate holds no generation, so the unique index covers live ones only: it is the
# generation compare-and-set's backstop (two commits of one parent cannot both land).
_M002_CHECKPOINTS = """
    CREATE TABLE checkpoints (
        id TEXT PRIMARY KEY,
        ord BIGINT GENERATED ALWAYS AS IDENTITY,
        conversation_id TEXT NOT NULL,
        branch_id TEXT NOT NULL,
        generation BIGINT,
        from_seq BIGINT NOT NULL,
        covered_through_seq BIGINT NOT NULL,
        source_hash TEXT NOT NULL,
        summary TEXT NOT NULL,
        tokens BIGINT NOT NULL,
        model TEXT,
        format_version INTEGER NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        created_at DOUBLE PRECISION NOT NULL
    );
    CREATE UNIQUE INDEX checkpoints_generation ON checkpoints (branch_id, generation)
        WHERE generation IS NOT NULL;
    CREATE INDEX checkpoints_conversation ON checkpoints (conversation_id);
    CREATE INDEX checkpoints_branch ON checkpoints (branch_id, status, generation);
    CREATE INDEX checkpoints_created ON checkpoints (status, created_at);
    CREATE TABLE leases (
        branch_id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        owner TEXT,
        token BIGINT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX leases_conversation ON leases (conversation_id);
"""

_M003_MEMORIES = """
    CREATE TABLE memories (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        scope TEXT NOT NULL,
        text TEXT NOT NULL,
        status TEXT NOT NULL,
        writer TEXT NOT NULL,
        source TEXT NOT NULL,
        source_conversation TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        confirmed_at DOUBLE PRECISION NOT NULL,
        confirmations BIGINT NOT NULL,
        confirmed_times TEXT NOT NULL,
        listed_from DOUBLE PRECISION,
        listed_until DOUBLE PRECISION,
        superseded_by TEXT
    );
    CREATE INDEX memories_scope ON memories (tenant, scope);
    CREATE INDEX memories_tenant ON memories (tenant, updated_at);
    CREATE INDEX memories_updated ON memories (updated_at);
    CREATE INDEX memories_source ON memories (tenant, source_conversation) WHERE source_conversation IS NOT NULL;
"""

MIGRATIONS: list[tuple[str, str]] = [
    ("001_initial", _M001_INITIAL),
    ("002_checkpoints_and_leases", _M002_CHECKPOINTS),
    ("003_memories", _M003_MEMORIES),
]


def lock_key(schema: str) -> str:
    """The advisory lock's text key (hashed by `hashtext` in SQL): one per schema."""
    return f"ctxproxy.migrate:{schema}"


async def migrate(conn: Any, schema: str) -> list[str]:
    """Apply the steps `schema` has not had yet, under the schema's advisory lock; the names of
    the steps this call applied (none when another replica got there first)."""
    applied: list[str] = []
    await conn.execute("SELECT pg_advisory_lock(hashtext($1))", lock_key(schema))
    try:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".schema_migrations '
            "(number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
        )
        rows = await conn.fetch(f'SELECT number, name FROM "{schema}".schema_migrations ORDER BY number')
        done = {int(r["number"]): str(r["name"]) for r in rows}
        for number, name in done.items():
            known = MIGRATIONS[number - 1][0] if 0 < number <= len(MIGRATIONS) else None
            if known != name:
                raise StoreError(
                    f"the PostgreSQL schema {schema!r} has migration {number} {name!r}, which this ctxproxy does "
                    "not know: it was migrated by a newer version; run that version (or a new schema)"
                )
        for number, (name, sql) in enumerate(MIGRATIONS, start=1):
            if number in done:
                continue
            async with conn.transaction():
                await conn.execute(f'SET LOCAL search_path = "{schema}"')
                await conn.execute(sql)
                await conn.execute(
                    f'INSERT INTO "{schema}".schema_migrations (number, name, applied_at) VALUES ($1, $2, $3)',
                    number,
                    name,
                    time.time(),
                )
            applied.append(name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", lock_key(schema))
    return applied
