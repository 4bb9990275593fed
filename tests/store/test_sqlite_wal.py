"""The WAL's checkpoints run on a thread of their own (proxy/store/sqlite/wal.py), not inside a
commit on the event loop: what is written reaches the database file while the serving connection
commits no more than ~50 pages, far below its own automatic checkpoint; the thread ends with the
store; and what was written is all there after a reopen."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from proxy import identify
from proxy.store.base import Position
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite.wal import FALLBACK_PAGES, INTERVAL
from tests.store.test_contract import T1, new_events


def _checkpoint_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "ctxproxy-wal-checkpoint"}


async def _append_history(store: SqliteStore, turns: int) -> tuple[Position, list[str]]:
    history = [{"role": "user", "content": f"turn {i}: " + "data " * 800} for i in range(turns)]
    conv = await store.create_conversation(T1, None)
    end = Position(conv.id, conv.main_branch_id, 0)
    for i in range(turns):  # a write transaction per message, as requests make them
        end = await store.append(end, new_events(T1, history[: i + 1], i), None, stamp=False)
    return end, identify.chain(T1, history)


async def test_a_thread_copies_the_wal_into_the_database_file(tmp_path: Path) -> None:
    path = tmp_path / "ctx.db"
    others = _checkpoint_threads()  # of stores other tests left open
    store = SqliteStore(str(path))
    await store.open()
    try:
        ours = _checkpoint_threads() - others
        assert len(ours) == 1
        assert store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == FALLBACK_PAGES
        await asyncio.sleep(INTERVAL * 2)  # the schema checkpointed too: the file's size now
        before = path.stat().st_size
        end, hashes = await _append_history(store, 50)  # ~200 kB: ~50 pages in the WAL
        wal = Path(f"{path}-wal").stat().st_size
        assert wal > 150_000
        for _ in range(40):
            if path.stat().st_size >= before + 150_000:
                break
            await asyncio.sleep(INTERVAL / 2)
        assert path.stat().st_size >= before + 150_000, "the WAL was not checkpointed into the database file"
    finally:
        await store.close()
    assert not any(t.is_alive() for t in ours)
    reopened = SqliteStore(str(path))
    await reopened.open()
    try:
        match = await reopened.find_longest(hashes, T1, None)
        assert match is not None and match.position == end and match.count == 50
    finally:
        await reopened.close()
    assert _checkpoint_threads() <= others


async def test_an_in_memory_store_has_no_checkpoint_thread() -> None:
    others = _checkpoint_threads()
    store = SqliteStore(":memory:")
    await store.open()
    try:
        assert _checkpoint_threads() <= others
    finally:
        await store.close()
