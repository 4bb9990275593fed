"""The SQLite connection and the one boundary where sqlite3's errors become ours.

Calls are synchronous on the event loop on purpose: each is a handful of indexed statements
(tens to hundreds of microseconds), cheaper than a hop to a worker thread; only the WAL's
checkpoints, with their fsyncs, run on a thread of their own (`wal.py`). Every statement of a
Store method runs inside `_read` or `_write`: a failing file ("database is locked", "unable to
open", a disk I/O error, a connection closed underneath) leaves the store as StoreError, which the
app answers 503 or relays under `store_failure: passthrough`, exactly like a Redis outage. (`open`
and `close` stay outside: a file that cannot be opened at startup stops the server loudly.) Every
write is one `BEGIN IMMEDIATE` transaction, so concurrent requests on one conversation serialize
and a crash leaves either all or none of an append.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from ...errors import StoreError
from .migrations import migrate
from .wal import FALLBACK_PAGES, Checkpointer

P = ParamSpec("P")
T = TypeVar("T")

Db = sqlite3.Connection


def missing_directory(path: str) -> str | None:
    """Why the database file `path` cannot be created (its directory does not exist), or None."""
    if path == ":memory:":
        return None
    directory = Path(path).resolve().parent
    if directory.is_dir():
        return None
    return f"the SQLite store's directory {directory} does not exist: create it, or fix the store path"


class SqliteConnection:
    def __init__(self, path: str) -> None:
        self.path = path
        self._db: Db | None = None
        self._checkpointer: Checkpointer | None = None

    async def open(self) -> None:
        problem = missing_directory(self.path)
        if problem is not None:  # a typo in the path: never a new directory and an empty database
            raise StoreError(problem)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA secure_delete=ON")
        db.execute("PRAGMA busy_timeout=5000")
        migrate(db)
        self._db = db
        if self.path != ":memory:":  # checkpoints off the event loop (proxy/store/sqlite/wal.py)
            db.execute(f"PRAGMA wal_autocheckpoint={FALLBACK_PAGES}")
            self._checkpointer = Checkpointer(self.path)
            self._checkpointer.start()

    async def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        if self._db is not None:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
            self._db = None

    def stop_wal_checkpoints(self) -> None:
        """Stop the thread that checkpoints the WAL (wal.py), for measurement: what the checkpoints
        cost (bench.store_calls). The serving connection's own fallback checkpoint still bounds the
        WAL; `close` works as before."""
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None

    @property
    def db(self) -> Db:
        if self._db is None:
            raise StoreError("the store is not open")
        return self._db

    def _read(self, fn: Callable[Concatenate[Db, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(db, ...)` outside a transaction; it must fetch what it returns (no live cursors)."""
        try:
            return fn(self.db, *args, **kwargs)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite read failed: {exc}") from exc

    def _write(self, fn: Callable[Concatenate[Db, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(db, ...)` in one `BEGIN IMMEDIATE` transaction, rolled back if anything raises."""
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db, *args, **kwargs)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite write failed: {exc}") from exc

    async def ping(self) -> bool:
        self._read(lambda db: db.execute("SELECT 1").fetchone())
        return True

    async def tenant_salt(self) -> bytes:
        return bytes.fromhex(self._write(_tenant_salt))


def _tenant_salt(db: Db) -> str:
    row = db.execute("SELECT value FROM meta WHERE key = 'tenant_salt'").fetchone()
    if row:
        return str(row[0])
    salt = secrets.token_hex(32)
    db.execute("INSERT INTO meta (key, value) VALUES ('tenant_salt', ?)", (salt,))
    return salt
