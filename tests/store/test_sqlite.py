"""SQLite-only guarantees on top of the contract: delete means the bytes are gone from the files, and
a failing database file is StoreUnavailable (a 503), like a Redis outage, not an unhandled error."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy import identify
from proxy.errors import StoreError, StoreUnavailable
from proxy.store.base import CallRecord, CheckpointCandidate, NewEvent, Position, UsageQuery
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite.migrations import MIGRATIONS


def _file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


async def test_deleted_content_is_not_left_in_the_files(tmp_path: Path) -> None:
    path = tmp_path / "ctx.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        conv = await store.create_conversation("t_x", "external-MARKER-id")
        message = {"role": "user", "content": "SECRET-MARKER " + "x" * 200}
        event = NewEvent("user", message, identify.chain("t_x", [message])[0], "request")
        await store.append(Position(conv.id, conv.main_branch_id, 0), [event], None)
        await store.record_call(
            CallRecord(
                id="k",
                tenant="t_x",
                route="r",
                model=None,
                purpose="main",
                stream=False,
                started_at=1.0,
                conversation_id=conv.id,
                response={"role": "assistant", "content": "RESPONSE-MARKER"},
            )
        )
        assert b"SECRET-MARKER" in _file_bytes(path)
        assert await store.delete_conversation(conv.id) is True
        data = _file_bytes(path)
        assert b"SECRET-MARKER" not in data
        assert b"RESPONSE-MARKER" not in data
        assert b"external-MARKER-id" not in data
    finally:
        await store.close()


async def test_open_refuses_a_missing_directory_and_migrates_once(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "ctx.db"
    store = SqliteStore.from_url(f"sqlite:///{path}")
    with pytest.raises(StoreError, match="nested/dir does not exist"):
        await store.open()  # a typo in the path is said, not made into a new directory
    assert not (tmp_path / "nested").exists()
    path.parent.mkdir(parents=True)
    await store.open()
    await store.close()
    assert path.exists()
    again = SqliteStore(str(path))
    await again.open()  # migrations already applied: must not fail on existing tables
    try:
        assert again.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert again.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        await again.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(str(tmp_path / "ctx.db"))
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def _event(text: str) -> NewEvent:
    message = {"role": "user", "content": text}
    return NewEvent("user", message, identify.chain("t_x", [message])[0], "request")


def _candidate(conv_id: str, branch_id: str, source_hash: str) -> CheckpointCandidate:
    return CheckpointCandidate(conv_id, branch_id, 0, 1, 1, source_hash, "summary", 3, None, 1)


async def test_read_failures_are_store_unavailable_and_heal(store: SqliteStore, tmp_path: Path) -> None:
    conv = await store.create_conversation("t_x", None)
    event = _event("hello")
    await store.append(Position(conv.id, conv.main_branch_id, 0), [event], None)
    # Another process damages the schema under the open connection: every read touching those
    # tables fails with sqlite3.OperationalError ("no such table"), which must leave as ours.
    other = sqlite3.connect(tmp_path / "ctx.db", isolation_level=None)
    try:
        for table in ("events", "calls", "checkpoints"):
            other.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
        reads = [
            store.find_longest([event.chain_hash], "t_x", None),
            store.lineage_events(conv.main_branch_id, 0, 10),
            store.list_calls(conv.id, 10, 0),
            store.usage_cells(UsageQuery()),
            store.active_checkpoint(conv.main_branch_id),
            store.list_checkpoints(conv.id),
        ]
        for read in reads:
            with pytest.raises(StoreUnavailable) as failed:
                await read
            assert isinstance(failed.value, StoreError)
            assert isinstance(failed.value.__cause__, sqlite3.OperationalError)
            assert "sqlite read failed" in str(failed.value)
        for table in ("events", "calls", "checkpoints"):
            other.execute(f"ALTER TABLE {table}_away RENAME TO {table}")
    finally:
        other.close()
    match = await store.find_longest([event.chain_hash], "t_x", None)
    assert match is not None and match.position.seq == 1


async def test_write_failures_are_store_unavailable(store: SqliteStore, tmp_path: Path) -> None:
    conv = await store.create_conversation("t_x", None)
    position = Position(conv.id, conv.main_branch_id, 0)
    event = _event("hello")
    store.db.execute("PRAGMA busy_timeout=50")  # fail fast instead of the production 5 s
    other = sqlite3.connect(tmp_path / "ctx.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock: "database is locked"
        writes = [
            store.append(position, [event], None),
            store.create_conversation("t_x", None),
            store.record_call(CallRecord("k", "t_x", "r", None, "main", False, 1.0, conv.id)),
            store.commit_checkpoint(_candidate(conv.id, conv.main_branch_id, event.chain_hash)),
            store.acquire_lease(conv.main_branch_id, "me", 10.0),
        ]
        for write in writes:
            with pytest.raises(StoreUnavailable) as failed:
                await write
            assert isinstance(failed.value.__cause__, sqlite3.OperationalError)
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert (await store.append(position, [event], None)).seq == 1


async def test_a_connection_closed_underneath_is_store_unavailable(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "ctx.db"))
    await store.open()
    conv = await store.create_conversation("t_x", None)
    store.db.close()
    with pytest.raises(StoreUnavailable):
        await store.get_conversation(conv.id)
    with pytest.raises(StoreUnavailable):
        await store.put_blob("d", "data")
    with pytest.raises(StoreUnavailable):
        await store.ping()
