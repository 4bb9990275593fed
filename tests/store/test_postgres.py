"""What only the PostgreSQL backend has: migrations under an advisory lock (replicas starting at
once), its URL's options, the password kept out of errors, two replicas' pools writing one
conversation, a lease held by a replica killed -9, retention in batches, and a server restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from proxy.errors import StoreError
from proxy.store import make_store, store_problem
from proxy.store.base import CheckpointCandidate, Position
from proxy.store.postgres import PostgresStore, calls
from proxy.store.postgres.migrations import MIGRATIONS
from tests.store.test_contract import T1, call_record, new_events, user
from tests.support.postgres_server import PostgresServer


def _store(server: PostgresServer, schema: str, **options: int) -> PostgresStore:
    query = "".join(f"&{k}={v}" for k, v in options.items())
    return PostgresStore(server.url() + f"?schema={schema}{query}")


async def test_replicas_starting_at_once_migrate_once(postgres_server: PostgresServer) -> None:
    stores = [_store(postgres_server, "starting", pool_min=0) for _ in range(8)]
    try:
        await asyncio.gather(*(store.open() for store in stores))
        rows = postgres_server.psql("SELECT number || ':' || name FROM starting.schema_migrations ORDER BY number")
        assert rows.split() == [f"{n}:{name}" for n, (name, _) in enumerate(MIGRATIONS, start=1)]
        conv = await stores[0].create_conversation(T1, "ext")
        assert await stores[7].find_conversation(T1, "ext") == conv
    finally:
        for store in stores:
            await store.close()
        postgres_server.drop_schemas("starting")


async def test_a_schema_migrated_by_a_newer_version_is_refused(postgres_server: PostgresServer) -> None:
    store = _store(postgres_server, "newer")
    try:
        await store.open()
        await store.close()
        postgres_server.psql(f"INSERT INTO newer.schema_migrations VALUES ({len(MIGRATIONS) + 1}, '999_future', 0)")
        with pytest.raises(StoreError, match="999_future.*newer version"):
            await _store(postgres_server, "newer").open()
    finally:
        postgres_server.drop_schemas("newer")


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("schema=Bad-Name", "schema='Bad-Name' must be a lower-case SQL identifier"),
        ("pool_max=many", "pool_max='many' must be a whole number"),
        ("pool_min=5&pool_max=2", "pool_min <= pool_max"),
    ],
)
def test_malformed_options_are_refused_before_connecting(query: str, problem: str) -> None:
    url = f"postgresql://u:s3cret@db.example:5432/ctx?{query}"
    with pytest.raises(StoreError, match=problem) as refused:
        make_store(url)
    assert "s3cret" not in str(refused.value)
    assert problem.split("'")[0] in (store_problem(url) or "")
    assert store_problem("postgresql://u:s3cret@db.example:5432/ctx?schema=team_a&pool_max=20") is None


async def test_options_size_the_pool_and_reach_the_server(postgres_server: PostgresServer) -> None:
    """pool_min / pool_max size this process's pool; any other option is a session setting."""
    store = PostgresStore(postgres_server.url() + "?schema=sized&pool_min=2&pool_max=3&application_name=ctx_sized")
    try:
        await store.open()
        assert (store.pool.get_min_size(), store.pool.get_max_size()) == (2, 3)
        held = [await store.pool.acquire() for _ in range(3)]
        names = postgres_server.psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ctx_sized'")
        assert int(names) == 3
        for conn in held:
            await store.pool.release(conn)
        assert "sized" in postgres_server.psql("SELECT nspname FROM pg_namespace").split()
    finally:
        await store.close()
        postgres_server.drop_schemas("sized")


async def test_the_password_never_appears_in_an_error(postgres_server: PostgresServer) -> None:
    closed = PostgresServer()  # a port nothing listens on
    store = PostgresStore(f"postgresql://postgres:hunter2secret@127.0.0.1:{closed.port}/postgres")
    with pytest.raises(StoreError) as failed:
        await store.open()
    assert f"127.0.0.1:{closed.port}/postgres" in str(failed.value)
    assert "hunter2secret" not in str(failed.value)


async def test_two_replicas_append_to_one_conversation_at_once(postgres_server: PostgresServer) -> None:
    """Each replica's pool is its own; the conversation's row lock serializes their appends, so
    every turn of both lands once, in one lineage, with no error."""
    one, two = _store(postgres_server, "replicas"), _store(postgres_server, "replicas")
    try:
        await one.open()
        await two.open()
        conv = await one.create_conversation(T1, None)
        history = [user(f"u{i}") for i in range(40)]
        events = new_events(T1, history)

        async def replica(store: PostgresStore) -> None:
            start = Position(conv.id, conv.main_branch_id, 0)
            for n in range(1, len(history) + 1):
                start = await store.append(start, events[n - 1 : n], None)

        await asyncio.gather(replica(one), replica(two))
        lineage = await two.lineage_events(conv.main_branch_id, 0, 100)
        assert [e.message["content"] for e in lineage] == [f"u{i}" for i in range(40)]
        assert len(await one.list_branches(conv.id)) == 1
    finally:
        await one.close()
        await two.close()
        postgres_server.drop_schemas("replicas")


_HOLDER = """
import asyncio, sys
from proxy.store.postgres import PostgresStore
async def main():
    store = PostgresStore(sys.argv[1])
    await store.open()
    print(await store.acquire_lease(sys.argv[2], "replica-killed", 1.0), flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


async def test_the_unique_generation_refuses_a_second_commit_of_one_parent(postgres_server: PostgresServer) -> None:
    """The backstop under the compare-and-set: a generation already stored for the branch (here
    written around the store, as a commit that slipped past the checks would have) makes the
    commit stale, not an error."""
    store = _store(postgres_server, "backstop")
    try:
        await store.open()
        conv = await store.create_conversation(T1, None)
        history = [user("u1"), user("u2")]
        await store.append(Position(conv.id, conv.main_branch_id, 0), new_events(T1, history), None)
        postgres_server.psql(
            "INSERT INTO backstop.checkpoints (id, conversation_id, branch_id, generation, from_seq, "
            "covered_through_seq, source_hash, summary, tokens, format_version, status, created_at) "
            f"VALUES ('ck_slipped', '{conv.id}', '{conv.main_branch_id}', 1, 1, 1, 'h', 's', 1, 1, 'superseded', 0)"
        )
        source = new_events(T1, history)[0].chain_hash
        candidate = CheckpointCandidate(conv.id, conv.main_branch_id, 0, 1, 1, source, "summary", 5, None, 1)
        assert await store.commit_checkpoint(candidate) is None
        assert await store.active_checkpoint(conv.main_branch_id) is None
    finally:
        await store.close()
        postgres_server.drop_schemas("backstop")


async def test_a_delete_leaves_nothing_but_its_tombstone(postgres_server: PostgresServer) -> None:
    """Events, branches (a fork too), call records, checkpoints and leases of a deleted
    conversation: no row of any table names it but the tombstone that refuses late writes."""
    store = _store(postgres_server, "deleted")
    try:
        await store.open()
        conv = await store.create_conversation(T1, "ext-deleted")
        main = conv.main_branch_id
        history = [user("u1"), user("u2"), user("u3")]
        await store.append(Position(conv.id, main, 0), new_events(T1, history), None)
        await store.append(Position(conv.id, main, 1), new_events(T1, [user("u1"), user("fork")], 1), None)
        await store.record_call(call_record(conv.id, main, "call_deleted", 1.0))
        token = await store.acquire_lease(main, "replica", 30)
        source = new_events(T1, history)[1].chain_hash
        candidate = CheckpointCandidate(conv.id, main, 0, 1, 2, source, "summary", 5, None, 1, token)
        assert await store.commit_checkpoint(candidate) is not None
        assert await store.delete_conversation(conv.id)
        tables = postgres_server.psql("SELECT tablename FROM pg_tables WHERE schemaname = 'deleted'").split()
        naming = [t for t in tables if conv.id in postgres_server.psql(f'SELECT t::text FROM deleted."{t}" t')]
        assert naming == ["tombstones"]
        assert main not in "".join(postgres_server.psql(f'SELECT t::text FROM deleted."{t}" t') for t in tables)
    finally:
        await store.close()
        postgres_server.drop_schemas("deleted")


@pytest.mark.slow
async def test_a_lease_held_by_a_replica_killed_9_expires(postgres_server: PostgresServer) -> None:
    url = postgres_server.url() + "?schema=killed"
    store = PostgresStore(url)
    try:
        await store.open()
        conv = await store.create_conversation(T1, None)
        branch = conv.main_branch_id
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        holder = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_HOLDER), url, branch], stdout=subprocess.PIPE, env=env
        )
        assert holder.stdout is not None
        token = int(holder.stdout.readline())
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        assert await store.acquire_lease(branch, "replica-b", 30) is None  # still live: nobody else may take it
        await asyncio.sleep(1.1)  # the killed replica's lease was for 1 s: it expires, nobody releases it
        taken = await store.acquire_lease(branch, "replica-b", 30)
        assert taken is not None and taken > token
        assert await store.renew_lease(branch, "replica-killed", token, 30) is False
    finally:
        await store.close()
        postgres_server.drop_schemas("killed")


async def test_retention_purges_in_bounded_batches(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calls, "PURGE_BATCH", 7)
    store = _store(postgres_server, "retention")
    try:
        await store.open()
        statements: list[str] = []
        async with store.pool.acquire() as conn:
            conn.add_query_logger(lambda record: statements.append(record.query))
        for i in range(30):
            await store.record_call(call_record(None, None, f"old{i}", 1.0 + i))
        await store.record_call(call_record(None, None, "new", 1000.0))
        statements.clear()
        assert await store.purge_calls(500.0) == 30
        assert sum(1 for sql in statements if sql.startswith("DELETE FROM calls")) == 5  # 7+7+7+7+2
        assert postgres_server.psql("SELECT id FROM retention.calls").split() == ["new"]
    finally:
        await store.close()
        postgres_server.drop_schemas("retention")


@pytest.mark.slow
async def test_a_restart_is_waited_out_and_a_long_outage_is_a_store_error() -> None:
    server = PostgresServer().start()
    patient = PostgresStore(server.url() + "?pool_min=2&pool_max=2&failover_wait_ms=20000")
    hasty = PostgresStore(server.url() + "?pool_min=1&pool_max=1&failover_wait_ms=300")
    try:
        await patient.open()
        await hasty.open()
        conv = await patient.create_conversation(T1, "before-restart")
        server.kill()  # an immediate shutdown: every pooled connection is cut
        with pytest.raises(StoreError, match="127.0.0.1"):
            await hasty.find_conversation(T1, "before-restart")
        probed = time.monotonic()
        with pytest.raises(StoreError):
            await patient.ping()  # a health probe is answered at once, not waited out
        assert time.monotonic() - probed < 5
        # A write begun while the server is down lands once it is back, exactly once.
        start = Position(conv.id, conv.main_branch_id, 0)
        write = asyncio.ensure_future(patient.append(start, new_events(T1, [user("during")]), None))
        await asyncio.sleep(0.5)
        assert not write.done()
        await asyncio.to_thread(server.start)
        end = await write
        assert [e.message["content"] for e in await patient.lineage_events(end.branch_id, 0, 10)] == ["during"]
        found = await hasty.find_conversation(T1, "before-restart")  # on a fresh connection
        assert found is not None and found.id == conv.id
    finally:
        await patient.close()
        await hasty.close()
        server.close()
