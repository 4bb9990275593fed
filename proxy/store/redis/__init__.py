"""Redis backend: one store shared by several proxy replicas.

Same semantics as the SQLite reference (proxy/store/sqlite/), passing the same contract suite.
Every write that must be atomic is one Lua script (lua/*.lua, EVALSHA, loaded once per server and
reloaded when the server lost its script cache): creating a conversation, appending (hash lookups,
forks, head/system/updated stamps), committing or failing a checkpoint, recording a call, deleting.
Reads that must see one consistent state (the active checkpoint, the lineage of a branch) are
read-only scripts; the rest are pipelined plain commands.

Key layout (everything under the configurable prefix P, default ``ctxproxy:``; each key prefix
holds one Redis type only, so no client-chosen id can address a key of another type):

    P meta:tenant_salt                       string  hex salt of the tenant fingerprints
    P convs                                  zset    conversation id -> updated_at
    P tombstones                             zset    deleted conversation id -> deleted_at (fencing)
    P calls                                  zset    every call id -> started_at (the ledger's time index)
    P conv:{cid}                             hash    id tenant external_id main_branch_id created_at updated_at
    P conv-keys:{cid}                        set     every key the conversation owns (delete removes them)
    P conv-branches:{cid}                    list    branch ids in creation order
    P conv-cks:{cid}                         list    checkpoint ids in creation order (failed ones too)
    P conv-calls:{cid}                       zset    call id -> started_at
    P ext:{len(tenant)}:{tenant}:{ext}       string  external id -> conversation id
    P branch:{bid}                           hash    conversation_id parent_id fork_seq head_seq system_hash
                                                     created_at updated_at active_ck
    P events:{bid}                           list    event JSON for seq fork_seq+1 .. head_seq
    P chain:{bid}                            list    the chain hashes of the same events, in parallel
    P branch-cks:{bid}                       zset    checkpoint id -> generation (active + superseded)
    P ck:{ckid}                              hash    json status generation covered branch
    P call:{call_id}                         string  call record JSON
    P last-call:{len(purpose)}:{purpose}:{bid} zset  call id -> started_at
    P hash:{len(tenant)}:{tenant}:{chain}    hash    conversation id -> "branch_id seq" (shared identity index)
    P blob:{digest}                          string  content-addressed system prefixes / tool definitions
    P lease:{bid}                            string  "owner token" of the compaction lease, expires (PX)
    P lease-token:{bid}                      string  the branch's fencing counter (INCR), outlives leases
    P cks-retired                            zset    superseded / failed checkpoint id -> created_at (retention)

Delete removes every key listed in ``conv-keys``, the conversation's fields in the shared
``hash:`` index and its ``convs`` and ``calls`` entries, and adds a tombstone so that late writes (a stream
finishing, a compaction committing) raise ConversationGone instead of bringing it back.

Failure behaviour (connection.py): short socket timeouts, one immediate retry on a broken
connection only (a stale pooled connection after a restart), never on timeouts; every Redis or
socket error is raised as StoreError (the app answers 503). The pool reconnects on the next call.

Scripts build key names from the prefix and ids they read, so this backend targets a single
Redis server (or a primary with replicas), not Redis Cluster.

One class, `RedisStore`, assembled from one module per concern over a shared connection:
connection.py (client, scripts.py, the error boundary), history.py (conversations, events,
identity, deletes), checkpoints.py (checkpoints, leases), calls.py (call records, the ledger).
"""

from __future__ import annotations

from .calls import Calls
from .checkpoints import Checkpoints
from .connection import DEFAULT_PREFIX
from .history import History


class RedisStore(History, Checkpoints, Calls):
    """The `Store` over one Redis server; `RedisStore.from_url(url)` or `RedisStore(url, prefix)`."""


__all__ = ["DEFAULT_PREFIX", "RedisStore"]
