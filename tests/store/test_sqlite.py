"""SQLite-only guarantees on top of the contract: delete means the bytes are gone from the files."""

from __future__ import annotations

from pathlib import Path

from proxy import identify
from proxy.store.base import CallRecord, NewEvent, Position
from proxy.store.migrations import MIGRATIONS
from proxy.store.sqlite import SqliteStore


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


async def test_open_creates_parent_directory_and_migrates_once(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "ctx.db"
    store = SqliteStore.from_url(f"sqlite:///{path}")
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
