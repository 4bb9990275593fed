"""SQLite backend: the embedded default, one file, WAL.

One class, `SqliteStore`, assembled from one module per concern over a shared connection:

    connection.py   the file, its pragmas and migrations, and `_read`/`_write`: the one boundary
                    where sqlite3's errors become StoreError
    history.py      conversations, branches, events, blobs; identity lookups; deletes
    checkpoints.py  checkpoint commits (compare-and-set) and compaction leases
    calls.py        call records and the ledger's SQL aggregation
    memories.py     long-term memory records
    access.py       client keys made through the admin API, budget and rate-limit counters

and beside them: migrations.py (the schema, as ordered named steps), wal.py (the WAL's checkpoints
on a thread of their own), rows.py (rows read by column name).
"""

from __future__ import annotations

from .access import Access
from .calls import Calls
from .checkpoints import Checkpoints
from .history import History
from .memories import Memories


class SqliteStore(History, Checkpoints, Calls, Memories, Access):
    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        return cls(url.removeprefix("sqlite:///") or "ctxproxy.db")


__all__ = ["SqliteStore"]
