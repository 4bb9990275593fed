"""Every statement the PostgreSQL store runs for requests, compactions, retractions, retention and
deletes finds its rows through an index: none plans a sequential scan of a store table.

The statements are the store's own, captured as it runs the SQLite plan test's workload (asyncpg's
query logger on the pool's one connection), and each is planned again with its own arguments
(`EXPLAIN`, which runs nothing). A test database is small, and on a small table PostgreSQL rightly
prefers a sequential scan whatever indexes exist; with `enable_seqscan = off` the planner takes
any index that can serve the statement and falls back to a sequential scan only when none can.
So a `Seq Scan` in these plans means a missing or unusable index -- what would make a request's
cost grow with the store at production sizes -- not a planner's choice on a toy table.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.store.postgres import PostgresStore
from tests.store.test_sqlite_plans import workload
from tests.support.postgres_server import PostgresServer

TABLES = {"events", "branches", "checkpoints", "calls", "conversations", "leases", "tombstones", "memories"}
INDEXES = {"events_position", "events_hash", "branches_pkey", "conversations_pkey", "calls_pkey"}
DATA = ("SELECT", "UPDATE", "DELETE", "INSERT", "WITH")


def _seq_scans(plan: Any) -> list[str]:
    """The tables of the store that a plan (EXPLAIN's JSON) reads whole: a sequential scan, or a
    walk of a whole index (an index scan with no condition on it, what the planner is left with
    when sequential scans are off and no index matches)."""
    found = []
    if isinstance(plan, dict):
        whole = plan.get("Node Type") == "Seq Scan" or (
            "Index" in str(plan.get("Node Type")) and "Index Cond" not in plan
        )
        if whole and plan.get("Relation Name", plan.get("Index Name")) in TABLES | INDEXES:
            found.append(str(plan.get("Relation Name", plan.get("Index Name"))))
        for value in plan.values():
            found += _seq_scans(value)
    elif isinstance(plan, list):
        for value in plan:
            found += _seq_scans(value)
    return found


async def test_no_statement_plans_a_sequential_scan(postgres_server: PostgresServer) -> None:
    store = PostgresStore(postgres_server.url() + "?schema=plans&pool_min=1&pool_max=1")
    await store.open()
    try:
        statements: list[tuple[str, tuple[Any, ...]]] = []
        async with store.pool.acquire() as conn:
            conn.add_query_logger(lambda record: statements.append((record.query, tuple(record.args or ()))))
        await workload(store)
        scans: dict[str, list[str]] = {}
        seen = set()
        async with store.pool.acquire() as conn:
            await conn.execute("SET enable_seqscan = off")
            try:
                for sql, args in statements:
                    # (the pool's reset between uses is several commands: not the store's)
                    if not sql.lstrip().upper().startswith(DATA) or sql in seen or ";" in sql:
                        continue
                    seen.add(sql)
                    plan = json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args))
                    if bad := _seq_scans(plan):
                        scans[sql[:160]] = bad
            finally:
                await conn.execute("RESET enable_seqscan")
        assert len(seen) > 30, "the workload should reach most of the store's statements"
        assert scans == {}
    finally:
        await store.close()
        postgres_server.drop_schemas("plans")
