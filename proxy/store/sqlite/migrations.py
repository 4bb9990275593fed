"""The SQLite schema as an ordered list of named migrations, each applied once.

`PRAGMA user_version` is the number of migrations applied so far; `migrate` applies the rest, each
in its own transaction together with the version bump, so a crash leaves the file at a step
boundary. Add a step by appending to MIGRATIONS, never by editing one that has shipped.
"""

from __future__ import annotations

import sqlite3

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

# Lookups by branch that scanned a whole table: the active checkpoint (every request, through
# the status index: every branch's active checkpoint), a fork's children and checkpoints when a
# rejected request is retracted.
_M005_BRANCH_INDEXES = """
        CREATE INDEX checkpoints_branch ON checkpoints (branch_id, status, generation);
        CREATE INDEX branches_parent ON branches (parent_id, fork_seq) WHERE parent_id IS NOT NULL;
"""

# Long-term memory (proxy/store/memories.py): one row per record, any status; the source
# conversation in a column of its own so that deleting a conversation can delete what came from it.
_M006_MEMORIES = """
        CREATE TABLE memories (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            scope TEXT NOT NULL,
            text TEXT NOT NULL,
            status TEXT NOT NULL,
            writer TEXT NOT NULL,
            source TEXT NOT NULL,
            source_conversation TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            confirmed_at REAL NOT NULL,
            confirmations INTEGER NOT NULL,
            confirmed_times TEXT NOT NULL,
            listed_from REAL,
            listed_until REAL,
            superseded_by TEXT
        );
        CREATE INDEX memories_scope ON memories (tenant, scope);
        CREATE INDEX memories_tenant ON memories (tenant, updated_at);
        CREATE INDEX memories_updated ON memories (updated_at);
        CREATE INDEX memories_source ON memories (tenant, source_conversation)
            WHERE source_conversation IS NOT NULL;
"""

# The client API that served each call (`CallRecord.wire`); earlier records have none.
_M007_CALL_WIRE = """
        ALTER TABLE calls ADD COLUMN wire TEXT;
"""

# Client keys made through the admin API (proxy/store/access.py), the counters of budgets and rate
# limits, the client key each call was made with (usage by key) and the money its rewriting saved.
_M008_ACCESS = """
        CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            digest TEXT NOT NULL UNIQUE,
            record TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE TABLE counters (
            name TEXT PRIMARY KEY,
            value REAL NOT NULL,
            expires_at REAL NOT NULL
        );
        CREATE INDEX counters_expiry ON counters (expires_at);
        ALTER TABLE calls ADD COLUMN client TEXT;
        ALTER TABLE calls ADD COLUMN saved_usd REAL;
        CREATE INDEX calls_client ON calls (client, started_at) WHERE client IS NOT NULL;
"""

# Ordered, named, applied once each; PRAGMA user_version is the number applied so far.
MIGRATIONS: list[tuple[str, str]] = [
    ("001_initial", _M001_INITIAL),
    ("002_checkpoints", _M002_CHECKPOINTS),
    ("003_ledger", _M003_LEDGER),
    ("004_leases", _M004_LEASES),
    ("005_branch_indexes", _M005_BRANCH_INDEXES),
    ("006_memories", _M006_MEMORIES),
    ("007_call_wire", _M007_CALL_WIRE),
    ("008_access", _M008_ACCESS),
]


def migrate(db: sqlite3.Connection) -> None:
    """Apply the migrations `db` has not had yet."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    for number, (_name, sql) in enumerate(MIGRATIONS, start=1):
        if number > version:
            db.executescript(f"BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version={number};\nCOMMIT;")
