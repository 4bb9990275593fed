"""The SQLite schema's migrations (proxy/store/sqlite/migrations.py) upgrade an old file in order: a
database left at any earlier step opens, reaches the last step with the schema of a fresh file,
and keeps what it held (the ledger's step fills in the tokens its older call records saved)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from proxy.store.base import UsageQuery
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite.migrations import MIGRATIONS


def test_the_steps_are_numbered_in_order() -> None:
    assert [int(name.split("_", 1)[0]) for name, _ in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


def _schema(path: Path) -> list[tuple[str, str, str | None]]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    finally:
        db.close()


def _old_database(path: Path, steps: int) -> None:
    """A file as a release with only the first `steps` migrations left it, holding one conversation
    with one event and one main call record."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for number, (_name, sql) in enumerate(MIGRATIONS[:steps], start=1):
            db.executescript(f"BEGIN;\n{sql}\nPRAGMA user_version={number};\nCOMMIT;")
        db.execute(
            "INSERT INTO conversations (id, tenant, main_branch_id, created_at, updated_at) "
            "VALUES ('c1', 't', 'b1', 1, 1)"
        )
        db.execute(
            "INSERT INTO branches (id, conversation_id, fork_seq, head_seq, created_at, updated_at) "
            "VALUES ('b1', 'c1', 0, 1, 1, 1)"
        )
        db.execute(
            "INSERT INTO events (branch_id, seq, conversation_id, role, message, chain_hash, source, created_at) "
            "VALUES ('b1', 1, 'c1', 'user', ?, 'h1', 'request', 1)",
            (json.dumps({"role": "user", "content": "hello"}),),
        )
        db.execute(
            "INSERT INTO calls (id, conversation_id, branch_id, tenant, route, purpose, stream, status, started_at, "
            "projection) VALUES ('k1', 'c1', 'b1', 't', 'r', 'main', 0, 'complete', 1, ?)",
            (json.dumps({"client_tokens": 100, "sent_tokens": 60}),),
        )
    finally:
        db.close()


@pytest.mark.parametrize("steps", range(1, len(MIGRATIONS)))
async def test_an_old_database_upgrades_in_order_and_keeps_its_rows(tmp_path: Path, steps: int) -> None:
    fresh = SqliteStore(str(tmp_path / "fresh.db"))
    await fresh.open()
    await fresh.close()
    path = tmp_path / "old.db"
    _old_database(path, steps)

    store = SqliteStore(str(path))
    await store.open()
    try:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        events = await store.lineage_events("b1", 0, 10)
        assert [(e.seq, e.message) for e in events] == [(1, {"role": "user", "content": "hello"})]
        (call,) = await store.list_calls("c1", 10, 0)
        assert call.projection == {"client_tokens": 100, "sent_tokens": 60}
        (cell,) = await store.usage_cells(UsageQuery())
        # 003_ledger derives tokens_saved for the records already stored; later ones get it on insert.
        assert cell.sums["tokens_saved"] == (40 if steps < 3 else None)
    finally:
        await store.close()
    assert _schema(path) == _schema(tmp_path / "fresh.db")
