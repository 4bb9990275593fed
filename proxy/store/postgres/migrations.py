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

# `Store.append` as one function, so an append, an extend and an answer are each one round trip
# (one statement, its own transaction) instead of one per statement. It locks the conversation's
# row first (CX001 when the row is gone; with `p_probe`, the extend's check, NULL instead),
# then walks the events as history.py's docstring says; a start branch that no longer exists
# refuses the append before anything is written (CX002, or returned in `refused` with `p_soft`).
# Heads are written once per branch the append leaves, not once per event.
_M004_APPEND = """
    CREATE FUNCTION ctxproxy_append(
        p_conv TEXT, p_branch TEXT, p_seq BIGINT, p_stamp BOOLEAN, p_now DOUBLE PRECISION, p_system_hash TEXT,
        p_roles TEXT[], p_messages TEXT[], p_hashes TEXT[], p_sources TEXT[], p_tokens BIGINT[],
        p_call_ids TEXT[], p_fork_ids TEXT[], p_probe TEXT, p_soft BOOLEAN
    ) RETURNS TABLE (out_branch TEXT, out_seq BIGINT, refused TEXT)
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
    DECLARE
        v_branch TEXT := p_branch;
        v_seq BIGINT := p_seq;
        v_head BIGINT;
        f_branch TEXT;
        f_seq BIGINT;
        forks INT := 0;
        pend_branch TEXT;
        pend_head BIGINT;
        probed INT;
        probe_ok BOOLEAN;
    BEGIN
        PERFORM 1 FROM conversations WHERE id = p_conv FOR UPDATE;
        IF NOT FOUND THEN
            IF p_probe IS NOT NULL THEN
                RETURN;
            END IF;
            RAISE EXCEPTION USING ERRCODE = 'CX001', MESSAGE = 'conversation ' || p_conv || ' no longer exists';
        END IF;
        IF p_probe IS NOT NULL THEN
            SELECT count(*), bool_and(e.branch_id = p_branch AND e.seq = p_seq AND e.chain_hash = p_probe
                                      AND b.head_seq = p_seq)
              INTO probed, probe_ok
              FROM events e JOIN branches b ON b.id = e.branch_id
             WHERE e.chain_hash = ANY (ARRAY[p_probe, p_hashes[1]]);
            IF probed <> 1 OR NOT probe_ok THEN
                RETURN;
            END IF;
        END IF;
        FOR i IN 1 .. coalesce(cardinality(p_hashes), 0) LOOP
            SELECT e.branch_id, e.seq INTO f_branch, f_seq
              FROM events e WHERE e.chain_hash = p_hashes[i] AND e.conversation_id = p_conv;
            IF FOUND THEN
                v_branch := f_branch;
                v_seq := f_seq;
                CONTINUE;
            END IF;
            IF v_branch = pend_branch THEN
                v_head := pend_head;
            ELSE
                SELECT head_seq INTO v_head FROM branches WHERE id = v_branch;
                IF NOT FOUND THEN  -- retracted meanwhile: the fork a rejected request created, now empty
                    IF p_soft THEN
                        RETURN QUERY SELECT NULL::TEXT, NULL::BIGINT,
                            'append refused: branch ' || v_branch || ' no longer exists';
                        RETURN;
                    END IF;
                    RAISE EXCEPTION USING ERRCODE = 'CX002',
                        MESSAGE = 'append refused: branch ' || v_branch || ' no longer exists';
                END IF;
            END IF;
            IF v_seq <> v_head THEN
                forks := forks + 1;
                INSERT INTO branches (id, conversation_id, parent_id, fork_seq, head_seq, created_at, updated_at)
                VALUES (p_fork_ids[forks], p_conv, v_branch, v_seq, v_seq, p_now, p_now);
                v_branch := p_fork_ids[forks];
            END IF;
            v_seq := v_seq + 1;
            INSERT INTO events (branch_id, seq, conversation_id, role, message, chain_hash, source, tokens,
                                call_id, created_at)
            VALUES (v_branch, v_seq, p_conv, p_roles[i], p_messages[i], p_hashes[i], p_sources[i], p_tokens[i],
                    p_call_ids[i], p_now);
            IF pend_branch IS DISTINCT FROM v_branch THEN
                IF pend_branch IS NOT NULL THEN
                    UPDATE branches SET head_seq = pend_head,
                        updated_at = CASE WHEN p_stamp THEN p_now ELSE updated_at END
                     WHERE id = pend_branch;
                END IF;
                pend_branch := v_branch;
            END IF;
            pend_head := v_seq;
        END LOOP;
        IF pend_branch IS NOT NULL THEN
            UPDATE branches SET head_seq = pend_head,
                updated_at = CASE WHEN p_stamp THEN p_now ELSE updated_at END
             WHERE id = pend_branch;
        END IF;
        IF p_stamp THEN
            UPDATE conversations SET updated_at = p_now WHERE id = p_conv;
            UPDATE branches SET updated_at = p_now, system_hash = coalesce(p_system_hash, system_hash)
             WHERE id = v_branch;
        END IF;
        RETURN QUERY SELECT v_branch, v_seq, NULL::TEXT;
    END
    $fn$;
"""

# The client API that served each call (`CallRecord.wire`; earlier records have none), and the
# shadow report's scan of one purpose's calls since a time (`Store.calls_of_purpose`).
_M005_CALL_WIRE = """
    ALTER TABLE calls ADD COLUMN wire TEXT;
    CREATE INDEX calls_purpose ON calls (purpose, started_at);
"""

# Client keys made through the admin API (proxy/store/access.py), the counters of budgets and rate
# limits, the client key each call was made with (usage by key) and the money its rewriting saved.
_M006_ACCESS = """
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        record TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE counters (
        name TEXT PRIMARY KEY,
        value DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX counters_expiry ON counters (expires_at);
    ALTER TABLE calls ADD COLUMN client TEXT;
    ALTER TABLE calls ADD COLUMN saved_usd DOUBLE PRECISION;
    CREATE INDEX calls_client ON calls (client, started_at) WHERE client IS NOT NULL;
"""

MIGRATIONS: list[tuple[str, str]] = [
    ("001_initial", _M001_INITIAL),
    ("002_checkpoints_and_leases", _M002_CHECKPOINTS),
    ("003_memories", _M003_MEMORIES),
    ("004_append_function", _M004_APPEND),
    ("005_call_wire", _M005_CALL_WIRE),
    ("006_access", _M006_ACCESS),
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
