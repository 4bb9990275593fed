"""`python -m bench.migrate_store [--conversations N] [--events E]`: how long `ctxproxy migrate-store`
takes to copy a SQLite store into PostgreSQL, verification included.

The source is written straight into a SQLite file the SqliteStore has created (so its schema is
the real one): N conversations of E events each (a 500-character message, a chain hash), with a
checkpoint and two call records each, one branch each, a blob shared by all -- in seconds, where
appending them through the store would take minutes. The target is a private PostgreSQL
(tests/support/postgres_server.py) with fsync on, as in production. Printed: the whole run's
time (copy and verification), and a rerun's (which copies nothing and verifies again). With
`--redis` the source is a private redis-server instead, written through the RedisStore.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sqlite3
import tempfile
import time
from pathlib import Path

from proxy import identify
from proxy.store.base import CallRecord, CheckpointCandidate, NewEvent, Position
from proxy.store.migrate import migrate_store
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from proxy.types import Message
from tests.support.postgres_server import PostgresServer
from tests.support.redis_server import RedisServer


async def make_source(path: Path, conversations: int, events: int) -> None:
    """The source store: the schema by SqliteStore, the rows by plain inserts (module docstring)."""
    store = SqliteStore(str(path))
    await store.open()
    await store.put_blob("sys", "You are a benchmark.")
    await store.tenant_salt()
    await store.close()
    db = sqlite3.connect(path)
    now = time.time()
    text = "x" * 500
    convs, branches, evs, checkpoints, calls = [], [], [], [], []
    for c in range(conversations):
        cid, bid = f"c_{c:016x}", f"b_{c:016x}"
        convs.append((cid, "t", None, bid, now, now))
        branches.append((bid, cid, None, 0, events, "sys", now, now))
        for s in range(1, events + 1):
            role = "user" if s % 2 else "assistant"
            message = json.dumps({"role": role, "content": f"{text} {c} {s}"})
            chain = hashlib.sha256(f"{c}.{s}".encode()).hexdigest()
            evs.append((bid, s, cid, role, message, chain, "request", 130, None, now))
        checkpoints.append((f"k_{c:016x}", cid, bid, 1, 1, 2, "h", "summary", 40, "m", 1, "active", None, now))
        for n in range(2):
            calls.append((f"r_{c:016x}{n}", cid, bid, "t", "main", "gpt", "main", 0, "complete", 200, now, 1000, 20))
    with db:
        db.executemany("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?)", convs)
        db.executemany(
            "INSERT INTO branches (id, conversation_id, parent_id, fork_seq, head_seq, system_hash, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            branches,
        )
        db.executemany(
            "INSERT INTO events (branch_id, seq, conversation_id, role, message, chain_hash, source, tokens, "
            "call_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            evs,
        )
        db.executemany(
            "INSERT INTO checkpoints (id, conversation_id, branch_id, generation, from_seq, covered_through_seq, "
            "source_hash, summary, tokens, model, format_version, status, error, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            checkpoints,
        )
        db.executemany(
            "INSERT INTO calls (id, conversation_id, branch_id, tenant, route, model, purpose, stream, status, "
            "upstream_status, started_at, input_total, output) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            calls,
        )
    db.close()


async def make_redis_source(url: str, conversations: int, events: int) -> None:
    """A Redis source through the RedisStore itself (its layout has no plain tables to fill):
    each conversation created, its events appended in one call, a checkpoint and two call
    records, 32 conversations at a time."""
    store = RedisStore.from_url(url)
    await store.open()
    await store.put_blob("sys", "You are a benchmark.")
    text = "x" * 500

    async def one(c: int) -> None:
        conv = await store.create_conversation("t", None)
        history: list[Message] = [
            {"role": "user" if s % 2 else "assistant", "content": f"{text} {c} {s}"} for s in range(1, events + 1)
        ]
        hashes = identify.chain("t", history)
        new = [NewEvent(m["role"], m, h, "request", 130) for m, h in zip(history, hashes, strict=True)]
        end = await store.append(Position(conv.id, conv.main_branch_id, 0), new, "sys")
        await store.commit_checkpoint(CheckpointCandidate(conv.id, end.branch_id, 0, 1, 2, hashes[1], "s", 40, "m", 1))
        for n in range(2):
            call = CallRecord(f"r_{c:016x}{n}", "t", "main", "gpt", "main", False, time.time())
            call.conversation_id, call.branch_id, call.status = conv.id, end.branch_id, "complete"
            call.usage = {"input_total": 1000, "output": 20}
            await store.record_call(call)

    for start in range(0, conversations, 32):
        await asyncio.gather(*(one(c) for c in range(start, min(start + 32, conversations))))
    await store.close()


async def run(conversations: int, events: int, redis: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "source.db"
        started = time.monotonic()
        redis_server = RedisServer().start() if redis else None
        if redis_server is not None:
            source = redis_server.url + "?prefix=bench:"
            await make_redis_source(source, conversations, events)
        else:
            source = f"sqlite:///{path}"
            await make_source(path, conversations, events)
        print(f"source: {conversations} conversations x {events} events written in {time.monotonic() - started:.1f}s")
        server = PostgresServer(fsync=True).start()
        try:
            target = server.url() + "?schema=migrated"
            for label in ("migration", "rerun"):
                started = time.monotonic()
                report = await migrate_store(source, target, lambda line: None)
                took = time.monotonic() - started
                assert not report.problems, report.problems[:5]
                copied = report.copied.get("conversations", 0)
                print(
                    f"{label}: {took:.1f}s for {conversations} conversations ({copied} copied, "
                    f"{report.verified_conversations} verified, {conversations / took:.0f} conversations/s)"
                )
        finally:
            server.close()
            if redis_server is not None:
                redis_server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--redis", action="store_true", help="a Redis source (written through the store: slower)")
    args = parser.parse_args()
    asyncio.run(run(args.conversations, args.events, args.redis))


if __name__ == "__main__":
    main()
