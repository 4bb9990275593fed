"""WAL checkpoints off the event loop.

Problem: every write transaction appends its pages to the WAL, and SQLite's automatic checkpoint
copies them back into the database file inside whichever commit crosses 1,000 pages, with an
fsync before and after. A request writes a few dozen pages, so every few dozen requests one
commit blocked the event loop for the whole checkpoint, every request in flight waiting with it:
the tail of the request latency was those checkpoints. Every `INTERVAL`, not more often: each
checkpoint costs its fsyncs, which a shorter interval pays in CPU per request (the measurements:
bench/optimisations.md, "Moved from docstrings").

So a thread of its own with a connection of its own runs a PASSIVE checkpoint every `INTERVAL`
seconds (sqlite3 releases the GIL while SQLite works, the fsyncs included). PASSIVE never waits for
readers or writers, and a writer never waits for it: a commit is exactly as durable as before
(WAL, `synchronous=NORMAL`), only the copy back moved. The serving connection keeps an automatic
checkpoint at `FALLBACK_PAGES`, so the WAL stays bounded if the thread falls behind or stops.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

log = logging.getLogger("ctxproxy")

INTERVAL = 0.5
"""seconds between checkpoints: the WAL holds at most this long's writes"""
FALLBACK_PAGES = 10_000
"""the serving connection's own automatic checkpoint (40 MB of 4 kB pages), should this fall behind"""


class Checkpointer:
    def __init__(self, path: str) -> None:
        self.path = path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ctxproxy-wal-checkpoint", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            log.warning("WAL checkpoints stay on the serving connection: %s", exc)
            return
        try:
            db.execute("PRAGMA synchronous=NORMAL")
            while not self._stop.wait(INTERVAL):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # a busy or failing file: the next round tries again
                    log.warning("WAL checkpoint failed: %s", exc)
        finally:
            db.close()
