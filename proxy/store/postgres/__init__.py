"""PostgreSQL backend: the system of record for teams running many replicas.

One class, `PostgresStore`, assembled from one module per concern over a shared connection pool,
as the SQLite backend is:

    connection.py   the URL, the pool, and `_read`/`_write`: the one boundary where asyncpg's
                    errors become StoreError
    migrations.py   the schema, as ordered named steps applied under an advisory lock
    history.py      conversations, branches, events, blobs; identity lookups; deletes
    checkpoints.py  checkpoint commits (fenced compare-and-set) and compaction leases
    calls.py        call records, the ledger's SQL aggregation, retention purges in batches
    memories.py     long-term memory records
    access.py       client keys made through the admin API, budget and rate-limit counters

asyncpg is imported only when a `postgresql://` store is used (the `postgres` extra).
"""

from __future__ import annotations

from .access import Access
from .calls import Calls
from .checkpoints import Checkpoints
from .history import History
from .memories import Memories


class PostgresStore(History, Checkpoints, Calls, Memories, Access):
    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        return cls(url)


__all__ = ["PostgresStore"]
