"""Redis backend: one store shared by several proxy replicas, on one server or a Redis Cluster.

Same semantics as the SQLite reference (proxy/store/sqlite/), passing the same contract suite.
Every write that must be atomic is one Lua script (lua/*.lua, EVALSHA, loaded once per server
and reloaded when the server lost its script cache): creating a conversation, appending (hash
lookups, forks, head/system/updated stamps), committing or failing a checkpoint, recording a
call, deleting. Reads that must see one consistent state (the active checkpoint, the lineage of a
branch, where a conversation holds a hash) are read-only scripts; the rest are plain commands.
Every script is given every key it touches and touches one conversation's slot only: the key
layout is in keys.py.

Delete removes every key of the conversation and its members of the shard indexes in one script,
adds a tombstone so that late writes (a stream finishing, a compaction committing) raise
ConversationGone instead of bringing it back, then removes its entries from the tenant-wide
identity index.

Failure behaviour (connection.py): short socket timeouts, one immediate retry on a broken
connection only, never on timeouts; every Redis or socket error is raised as StoreError (the app
answers 503). The pool reconnects, and the cluster client re-reads the slot map, on the next call.

One class, `RedisStore`, assembled from one module per concern over a shared connection:
connection.py (client, scripts.py, the error boundary, scatter over shards), keys.py (the layout),
identity.py (finding a conversation by its hashes), history.py (conversations, events, deletes),
checkpoints.py (checkpoints, leases), calls.py (call records, the ledger), memories.py (long-term
memory records, in their tenant's slot), access.py (client keys made through the admin API, the
counters of budgets and rate limits), migrate.py (the
conversion of data written before cluster support, at start-up).
"""

from __future__ import annotations

from .access import Access
from .calls import Calls
from .checkpoints import Checkpoints
from .connection import DEFAULT_PREFIX, guarded
from .history import History
from .memories import Memories
from .migrate import migrate


class RedisStore(History, Checkpoints, Calls, Memories, Access):
    """The `Store` over Redis; `RedisStore.from_url(url)` or `RedisStore(url, prefix)`."""

    @guarded
    async def open(self) -> None:
        await super().open()
        try:
            await migrate(self)  # data of the layout before cluster support, converted once
        except BaseException:
            await self.close()
            raise


__all__ = ["DEFAULT_PREFIX", "RedisStore"]
