"""Every statement the PostgreSQL store runs for requests, compactions, retractions, retention and
deletes finds its rows through an index: none reads a whole store table.

The plans are the ones PostgreSQL executes as the store runs the SQLite plan test's workload,
nested statements included (those of the `ctxproxy_append` function, where an append does its
lookups): the store's connections load `auto_explain` (URL options, which asyncpg sends as
session settings at connect), which logs each executed plan as JSON to the server's log.

A test database is small, and on a small table PostgreSQL rightly prefers a sequential scan
whatever indexes exist; with `enable_seqscan = off` the planner takes any index that can serve
the statement and falls back to a sequential scan only when none can. So a sequential scan here
-- or an index walked whole, with no condition on it -- means a missing or unusable index, what
would make a request's cost grow with the store at production sizes, not a planner's choice on
a toy table.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.store.postgres import PostgresStore
from tests.store.test_sqlite_plans import workload
from tests.support.postgres_server import PostgresServer

TABLES = {"events", "branches", "checkpoints", "calls", "conversations", "leases", "tombstones", "memories"}
EXPLAINED = (
    "session_preload_libraries=auto_explain&auto_explain.log_min_duration=0&auto_explain.log_format=json"
    "&auto_explain.log_nested_statements=on&enable_seqscan=off"
)


def _whole_reads(plan: Any) -> list[str]:
    """The store tables a plan reads whole: a sequential scan, or an index scan with no
    condition on the index (what the planner is left with when no index matches)."""
    found = []
    if isinstance(plan, dict):
        kind = str(plan.get("Node Type"))
        if plan.get("Relation Name") in TABLES and (
            kind == "Seq Scan" or (kind.startswith("Index") and "Index Cond" not in plan)
        ):
            found.append(f"{kind} on {plan['Relation Name']}")
        for value in plan.values():
            found += _whole_reads(value)
    elif isinstance(plan, list):
        for value in plan:
            found += _whole_reads(value)
    return found


def logged_plans(log: str) -> list[dict[str, Any]]:
    """auto_explain's JSON plans in a stretch of the server's log."""
    decoder = json.JSONDecoder()
    plans = []
    at = log.find("plan:\n")
    while at >= 0:
        start = log.find("{", at)
        plan, end = decoder.raw_decode(log, start)
        plans.append(plan)
        at = log.find("plan:\n", end)
    return plans


async def test_no_statement_reads_a_whole_table(postgres_server: PostgresServer) -> None:
    store = PostgresStore(postgres_server.url() + f"?schema=plans&{EXPLAINED}")
    await store.open()
    try:
        assert postgres_server.dir is not None
        log_file = postgres_server.dir / "postgres.log"
        before = log_file.stat().st_size
        await workload(store)
        plans = logged_plans(log_file.read_bytes()[before:].decode(errors="replace"))
        texts = {p["Query Text"] for p in plans}
        assert any("FROM events e WHERE e.chain_hash = p_hashes[i]" in t for t in texts), "nested plans logged"
        assert len(texts) > 30, "the workload should reach most of the store's statements"
        scans = {p["Query Text"][:160]: bad for p in plans if (bad := _whole_reads(p["Plan"]))}
        assert scans == {}
    finally:
        await store.close()
        postgres_server.drop_schemas("plans")
