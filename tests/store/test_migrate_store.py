"""`ctxproxy migrate-store` from SQLite, Redis and a Redis Cluster into a real PostgreSQL
(tests/support/postgres_server.py): every record kept with its ids, hashes and the tenant salt,
verified; a rerun copies nothing; a run interrupted half-way (or killed -9) resumes; bad URLs
are one line, and the password is never printed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.migrate_store import make_source
from proxy import identify
from proxy.cli import main
from proxy.store import migrate
from proxy.store.access import ApiKey, Count
from proxy.store.base import CallRecord, CheckpointCandidate, Position, Store
from proxy.store.migrate import migrate_store
from proxy.store.postgres import PostgresStore
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from tests.store.test_contract import assistant, new_events, user
from tests.store.test_memories import memory
from tests.support.postgres_server import PostgresServer
from tests.support.proxy_process import REPO, subprocess_env

TENANT = "tenant-migrate"


async def populate(store: Store, n: int) -> list[str]:
    """`n` conversations, each with two turns, a fork, a checkpoint and a call record; and the
    global records: a blob, a memory, an API key, a counter, a call of no conversation."""
    ids = []
    for i in range(n):
        conv = await store.create_conversation(TENANT, f"ext-{i}" if i % 2 else None)
        history = [user(f"hello {i}"), assistant(f"hi {i}"), user(f"more {i}"), assistant(f"sure {i}")]
        end = await store.append(Position(conv.id, conv.main_branch_id, 0), new_events(TENANT, history), "sys-h")
        fork = [*history[:2], user(f"instead {i}")]
        await store.append(Position(conv.id, conv.main_branch_id, 2), new_events(TENANT, fork, start=2), None)
        hashes = identify.chain(TENANT, history)
        await store.commit_checkpoint(
            CheckpointCandidate(conv.id, end.branch_id, 0, 1, 2, hashes[1], f"summary {i}", 12, "m", 1)
        )
        call = CallRecord(f"call-{conv.id}", TENANT, "main", "gpt-x", "main", bool(i % 2), time.time())
        call.conversation_id, call.branch_id, call.status, call.usage = (
            conv.id,
            end.branch_id,
            "complete",
            {"input_total": 10 + i, "output": 3},
        )
        call.system_hash, call.cost_usd = "sys-h", 0.25
        await store.record_call(call)
        ids.append(conv.id)
    await store.put_blob("sys-h", "You are a test.")
    await store.save_memory(memory(tenant=TENANT))
    salt = await store.tenant_salt()
    await store.save_api_key(
        ApiKey("k1", salt.hex()[:16], "ci", TENANT, ("main",), {"usd_per_day": 5.0}, "abcd", time.time())
    )
    await store.add_counts([Count("tenant:x:usd:2026-12-05", 1.5, time.time() + 3600)])
    await store.record_call(CallRecord("call-loose", TENANT, "main", None, "main", False, 1.0))
    return ids


async def snapshot(store: Store, ids: list[str]) -> list[Any]:
    """Everything the admin API can read of the conversations, by their ids."""
    out: list[Any] = []
    for cid in ids:
        conv = await store.get_conversation(cid)
        assert conv is not None
        branches = await store.list_branches(cid)
        events = [await store.lineage_events(b.id, 0, 100) for b in branches]
        out.append((conv, branches, events, await store.list_checkpoints(cid), await store.list_calls(cid, 100, 0)))
    return out


@pytest.fixture
def target(postgres_server: PostgresServer) -> Any:
    schema = f"migrate_{uuid.uuid4().hex[:8]}"
    yield postgres_server.url(password="pg-secret-xyz") + f"?schema={schema}"
    postgres_server.drop_schemas(schema)


async def test_sqlite_into_postgres_kept_verified_and_rerun_copies_nothing(tmp_path: Path, target: str) -> None:
    source = f"sqlite:///{tmp_path / 'src.db'}"
    sqlite = SqliteStore.from_url(source)
    await sqlite.open()
    ids = await populate(sqlite, 7)
    before, salt = await snapshot(sqlite, ids), await sqlite.tenant_salt()
    await sqlite.close()

    lines: list[str] = []
    report = await migrate_store(source, target, lines.append)
    assert report.problems == [] and report.verified_conversations == 7
    assert report.copied["conversations"] == 7 and report.copied["branches"] == 14
    assert report.copied["calls"] == 8 and report.copied["blobs"] == 1 and report.copied["api_keys"] == 1
    assert not any("pg-secret" in line for line in lines)

    pg = PostgresStore.from_url(target)
    await pg.open()
    try:
        assert await snapshot(pg, ids) == before
        assert await pg.tenant_salt() == salt
        history = [user("hello 3"), assistant("hi 3"), user("more 3"), assistant("sure 3")]
        match = await pg.find_longest(identify.chain(TENANT, history), TENANT, None)
        assert match is not None and match.position.conversation_id == ids[3] and match.count == 4
        assert await pg.get_blob("sys-h") == "You are a test."
        assert [k.id for k in await pg.list_api_keys()] == ["k1"]
        assert (await pg.scope_memories(TENANT, ["project:/srv/app"]))[0].text == "deploy target: staging-2"
    finally:
        await pg.close()

    again = await migrate_store(source, target, lines.append)
    assert again.problems == [] and again.verified_conversations == 7
    assert sum(again.copied.values()) == 0 and again.skipped_conversations == 7


@pytest.mark.parametrize("kind", ["redis", "redis-cluster"])
async def test_redis_into_postgres_kept_verified_and_rerun_copies_nothing(
    kind: str, request: pytest.FixtureRequest, target: str
) -> None:
    server = request.getfixturevalue("redis_server" if kind == "redis" else "redis_cluster")
    prefix = f"mig{uuid.uuid4().hex[:8]}:"
    source = server.url + ("&" if "?" in server.url else "?") + f"prefix={prefix}"
    redis = RedisStore.from_url(source)
    await redis.open()
    ids = await populate(redis, 5)
    before, salt = await snapshot(redis, ids), await redis.tenant_salt()
    keys = await redis.list_api_keys()
    await redis.close()

    report = await migrate_store(source, target, lambda line: None)
    assert report.problems == [] and report.verified_conversations == 5
    assert report.copied["conversations"] == 5 and report.copied["events"] == 25 and report.copied["calls"] == 6
    assert report.copied["memories"] == 1 and report.copied["counters"] == 1 and report.copied["blobs"] == 1
    pg = PostgresStore.from_url(target)
    await pg.open()
    try:
        assert await snapshot(pg, ids) == before
        assert await pg.tenant_salt() == salt and await pg.list_api_keys() == keys
        history = [user("hello 2"), assistant("hi 2"), user("more 2"), assistant("sure 2")]
        match = await pg.find_longest(identify.chain(TENANT, history), TENANT, None)
        assert match is not None and match.position.conversation_id == ids[2] and match.count == 4
    finally:
        await pg.close()
    again = await migrate_store(source, target, lambda line: None)
    assert again.problems == [] and sum(again.copied.values()) == 0 and again.skipped_conversations == 5


async def test_an_interrupted_run_resumes(tmp_path: Path, target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    source = f"sqlite:///{tmp_path / 'src.db'}"
    sqlite = SqliteStore.from_url(source)
    await sqlite.open()
    await populate(sqlite, 10)
    await sqlite.close()
    monkeypatch.setattr(migrate, "BATCH", 3)

    class Killed(Exception):
        pass

    def die_after_two_batches(line: str) -> None:
        if line.startswith("conversations: 6/"):
            raise Killed(line)

    with pytest.raises(Killed):
        await migrate_store(source, target, die_after_two_batches)
    report = await migrate_store(source, target, lambda line: None)
    assert report.problems == [] and report.verified_conversations == 10
    assert report.skipped_conversations == 6 and report.copied["conversations"] == 4


def test_the_command_verifies_and_never_prints_the_password(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = f"sqlite:///{tmp_path / 'src.db'}"

    async def make() -> None:
        sqlite = SqliteStore.from_url(source)
        await sqlite.open()
        await populate(sqlite, 2)
        await sqlite.close()

    asyncio.run(make())
    assert main(["migrate-store", "--from", source, "--to", target]) == 0
    out, err = capsys.readouterr()
    assert "verified: 2 conversations match" in out and "pg-secret" not in out + err


@pytest.mark.parametrize(
    ("source", "target", "said"),
    [
        ("mysql://x", "postgresql://u:pw-secret@127.0.0.1:1/db", "not a store URL"),
        ("sqlite:////no/such/dir/x.db", "postgresql://u:pw-secret@127.0.0.1:1/db", "does not exist"),
        ("sqlite:///x.db", "sqlite:///y.db", "writes into PostgreSQL"),
        (
            "postgresql://u:pw-secret@127.0.0.1:1/a",
            "postgresql://u:pw-secret@127.0.0.1:1/db",
            "reads a SQLite or Redis",
        ),
        ("redis://:pw-secret@127.0.0.1:1/0", "postgresql://u:pw-secret@127.0.0.1:1/db", "127.0.0.1:1"),
        ("sqlite:///{tmp}/missing.db", "postgresql://u:pw-secret@127.0.0.1:1/db", "no SQLite store at"),
        ("sqlite:///{tmp}/x.db", "postgresql://u:pw-secret@127.0.0.1:1/db", "127.0.0.1:1/db"),
    ],
)
def test_bad_urls_are_one_line(
    tmp_path: Path, source: str, target: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "x.db").touch()  # an existing (empty) file: the store it becomes is the target's problem
    code = main(["migrate-store", "--from", source.format(tmp=tmp_path), "--to", target])
    out, err = capsys.readouterr()
    assert code == 1 and said in err and "Traceback" not in err and "pw-secret" not in out + err, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_run_killed_by_sigkill_resumes(tmp_path: Path, target: str) -> None:
    """The command as a process, killed -9 once some batches are committed: the rerun copies
    the rest, skips what the first run committed, and verifies."""
    path = tmp_path / "big.db"
    asyncio.run(make_source(path, 2000, 4))
    source = f"sqlite:///{path}"
    command = [sys.executable, "-m", "proxy.cli", "migrate-store", "--from", source, "--to", target]
    first = subprocess.Popen(command, cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    for line in first.stdout:
        if line.startswith("conversations: 600/"):
            os.kill(first.pid, signal.SIGKILL)
            break
    first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL
    second = subprocess.run(command, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    there = int(second.stdout.split("already in the target: ")[1].split(" ")[0])
    assert 600 <= there < 2000, second.stdout
    assert f"conversations {2000 - there}" in second.stdout and "verified: 2000 conversations match" in second.stdout
