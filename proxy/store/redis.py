"""Redis backend: one store shared by several proxy replicas.

Same semantics as the SQLite reference (proxy/store/sqlite.py), passing the same contract suite.
Every write that must be atomic is one Lua script (EVALSHA, loaded once per server and reloaded
when the server lost its script cache): creating a conversation, appending (hash lookups, forks,
head/system/updated stamps), committing or failing a checkpoint, recording a call, deleting.
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

Failure behaviour: short socket timeouts, one immediate retry on a broken connection only (a
stale pooled connection after a restart), never on timeouts; every Redis or socket error is
raised as StoreError (the app answers 503). The pool reconnects on the next call.

Scripts build key names from the prefix and ids they read, so this backend targets a single
Redis server (or a primary with replicas), not Redis Cluster.
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import fields
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from ..errors import ConversationGone, StoreError
from .base import (
    USAGE_GROUP_COLUMNS,
    Branch,
    CallRecord,
    CheckpointCandidate,
    Conversation,
    HashMatch,
    NewEvent,
    Position,
    StoredCheckpoint,
    StoredEvent,
    UsageCell,
    UsageQuery,
    tokens_saved,
)

DEFAULT_PREFIX = "ctxproxy:"
SOCKET_TIMEOUT = 1.5
CONNECT_TIMEOUT = 1.5
TAIL = 4
BATCH = 1000
_USAGE_COLUMNS = ("input_total", "input_uncached", "cache_read", "cache_write", "output", "reasoning")
_LEDGER_FIELDS = (*_USAGE_COLUMNS, "cost_usd", "tokens_saved")
_CALL_FIELDS = frozenset(f.name for f in fields(CallRecord))

# -- Lua -------------------------------------------------------------------------------------------
# ARGV[1] is always the key prefix. Scripts answer {"OK", ...}, {"GONE"} (the conversation does not
# exist / was deleted), {"STALE"} (a checkpoint candidate lost) or {"NOBRANCH"}.

_LIB = r"""
local P = ARGV[1]
local function bkey(b) return P .. 'branch:' .. b end

-- The branch's active checkpoint id, or the newest ancestor checkpoint (active or superseded)
-- that covers nothing past the (smallest) fork point on the way up: SqliteStore._active.
local function active_ck(bid)
  local own = redis.call('HGET', bkey(bid), 'active_ck')
  if own then return own end
  local cur = bid
  local limit = nil
  while true do
    local b = redis.call('HMGET', bkey(cur), 'parent_id', 'fork_seq')
    if not b[1] then return nil end
    local fork = tonumber(b[2])
    if limit == nil or fork < limit then limit = fork end
    local ids = redis.call('ZREVRANGE', P .. 'branch-cks:' .. b[1], 0, -1)
    for _, id in ipairs(ids) do
      local cov = tonumber(redis.call('HGET', P .. 'ck:' .. id, 'covered'))
      if cov and cov <= limit then return id end
    end
    cur = b[1]
  end
end

-- The chain hash of the event at `seq` in the lineage of `bid` (SqliteStore._lineage_hash).
local function lineage_hash(bid, seq)
  local cur = bid
  while cur do
    local b = redis.call('HMGET', bkey(cur), 'parent_id', 'fork_seq', 'head_seq')
    if not b[2] then return nil end
    local fork, head = tonumber(b[2]), tonumber(b[3])
    if seq > fork and seq <= head then
      return redis.call('LINDEX', P .. 'chain:' .. cur, seq - fork - 1)
    end
    if (not b[1]) or fork < seq then return nil end
    cur = b[1]
  end
  return nil
end

local function own(cid, ...)
  redis.call('SADD', P .. 'conv-keys:' .. cid, ...)
end

local function index_prefix(tenant)
  return P .. 'hash:' .. #tenant .. ':' .. tenant .. ':'
end
"""

# ARGV: P, cid, bid, tenant, has_ext, ext_key, now
_CREATE = r"""
local cid, bid, tenant, has_ext, ext_key, now = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local conv = P .. 'conv:' .. cid
if has_ext == '1' then
  local existing = redis.call('GET', ext_key)
  if existing and redis.call('EXISTS', P .. 'conv:' .. existing) == 1 then
    return {'EXISTS', existing}
  end
end
if redis.call('EXISTS', conv) == 1 or redis.call('ZSCORE', P .. 'tombstones', cid) then
  return {'EXISTS', cid}
end
redis.call('HSET', conv, 'id', cid, 'tenant', tenant, 'main_branch_id', bid, 'created_at', now, 'updated_at', now)
own(cid, conv, P .. 'conv-branches:' .. cid, bkey(bid), P .. 'events:' .. bid, P .. 'chain:' .. bid)
if has_ext == '1' then
  redis.call('HSET', conv, 'external_id', ARGV[8])
  redis.call('SET', ext_key, cid)
  own(cid, ext_key)
end
redis.call('HSET', bkey(bid), 'conversation_id', cid, 'fork_seq', 0, 'head_seq', 0, 'created_at', now,
           'updated_at', now)
redis.call('RPUSH', P .. 'conv-branches:' .. cid, bid)
redis.call('ZADD', P .. 'convs', now, cid)
return {'OK', cid}
"""

# ARGV: P, cid, start_bid, start_seq, has_sys, sys, now, fork_base, then (chain_hash, event_json)*
_APPEND = r"""
local cid, branch, seq = ARGV[2], ARGV[3], tonumber(ARGV[4])
local has_sys, sys, now, fork_base = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local conv = P .. 'conv:' .. cid
local tenant = redis.call('HGET', conv, 'tenant')
if not tenant then return {'GONE'} end
local idx = index_prefix(tenant)
local forks = 0
for i = 9, #ARGV, 2 do
  local h, payload = ARGV[i], ARGV[i + 1]
  local hit = redis.call('HGET', idx .. h, cid)
  if hit then
    local b, s = string.match(hit, '^(%S+) (%d+)$')
    branch, seq = b, tonumber(s)
  else
    local head = redis.call('HGET', bkey(branch), 'head_seq')
    if not head then return {'NOBRANCH', branch} end
    if tonumber(head) ~= seq then
      forks = forks + 1
      local child = 'b_' .. fork_base
      if forks > 1 then child = child .. '_' .. forks end
      redis.call('HSET', bkey(child), 'conversation_id', cid, 'parent_id', branch, 'fork_seq', seq,
                 'head_seq', seq, 'created_at', now, 'updated_at', now)
      redis.call('RPUSH', P .. 'conv-branches:' .. cid, child)
      own(cid, bkey(child), P .. 'events:' .. child, P .. 'chain:' .. child)
      branch = child
    end
    seq = seq + 1
    redis.call('RPUSH', P .. 'events:' .. branch, payload)
    redis.call('RPUSH', P .. 'chain:' .. branch, h)
    redis.call('HSET', idx .. h, cid, branch .. ' ' .. seq)
    redis.call('HSET', bkey(branch), 'head_seq', seq, 'updated_at', now)
  end
end
if redis.call('EXISTS', bkey(branch)) == 1 then
  if has_sys == '1' then
    redis.call('HSET', bkey(branch), 'system_hash', sys, 'updated_at', now)
  else
    redis.call('HSET', bkey(branch), 'updated_at', now)
  end
end
redis.call('HSET', conv, 'updated_at', now)
redis.call('ZADD', P .. 'convs', now, cid)
return {'OK', branch, tostring(seq)}
"""

# ARGV: P, bid -> {json, status} or {}
_ACTIVE = r"""
local id = active_ck(ARGV[2])
if not id then return {} end
return redis.call('HMGET', P .. 'ck:' .. id, 'json', 'status')
"""

# ARGV: P, cid, bid, parent_generation, covered_through_seq, source_hash, ckid, json, lease_token ('' = none)
_COMMIT = r"""
local cid, bid = ARGV[2], ARGV[3]
local parent, covered, source, ckid, payload = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]
if redis.call('EXISTS', P .. 'conv:' .. cid) == 0 then return {'GONE'} end
if ARGV[9] ~= '' and redis.call('GET', P .. 'lease-token:' .. bid) ~= ARGV[9] then return {'STALE'} end
if redis.call('HGET', bkey(bid), 'conversation_id') ~= cid then return {'STALE'} end
local active = active_ck(bid)
local generation = 0
if active then generation = tonumber(redis.call('HGET', P .. 'ck:' .. active, 'generation')) end
if generation ~= parent then return {'STALE'} end
if lineage_hash(bid, covered) ~= source then return {'STALE'} end
local previous = redis.call('HGET', bkey(bid), 'active_ck')
if previous then
  redis.call('HSET', P .. 'ck:' .. previous, 'status', 'superseded')
  local old = redis.call('HGET', P .. 'ck:' .. previous, 'json')
  if old then redis.call('ZADD', P .. 'cks-retired', cjson.decode(old)['created_at'], previous) end
end
local ck = P .. 'ck:' .. ckid
redis.call('HSET', ck, 'json', payload, 'status', 'active', 'generation', parent + 1, 'covered', covered,
           'branch', bid)
redis.call('ZADD', P .. 'branch-cks:' .. bid, parent + 1, ckid)
redis.call('HSET', bkey(bid), 'active_ck', ckid)
redis.call('RPUSH', P .. 'conv-cks:' .. cid, ckid)
own(cid, ck, P .. 'branch-cks:' .. bid, P .. 'conv-cks:' .. cid)
return {'OK'}
"""

# ARGV: P, cid, bid, ckid, json, covered, created_at
_FAILED = r"""
local cid, bid, ckid = ARGV[2], ARGV[3], ARGV[4]
if redis.call('EXISTS', P .. 'conv:' .. cid) == 0 then return {'GONE'} end
local ck = P .. 'ck:' .. ckid
redis.call('HSET', ck, 'json', ARGV[5], 'status', 'failed', 'covered', ARGV[6], 'branch', bid)
redis.call('ZADD', P .. 'cks-retired', ARGV[7], ckid)
redis.call('RPUSH', P .. 'conv-cks:' .. cid, ckid)
own(cid, ck, P .. 'conv-cks:' .. cid)
return {'OK'}
"""

# ARGV: P, call_id, cid ('' = none), bid ('' = none), last_call_key, started_at, json
_RECORD_CALL = r"""
local call_id, cid, bid, last_key, started, payload = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if cid ~= '' and redis.call('ZSCORE', P .. 'tombstones', cid) then return {'GONE'} end
local key = P .. 'call:' .. call_id
redis.call('SET', key, payload)
redis.call('ZADD', P .. 'calls', started, call_id)
if cid ~= '' then
  redis.call('ZADD', P .. 'conv-calls:' .. cid, started, call_id)
  own(cid, key, P .. 'conv-calls:' .. cid)
end
if bid ~= '' then
  redis.call('ZADD', last_key, started, call_id)
  if cid ~= '' then own(cid, last_key) end
end
return {'OK'}
"""

# ARGV: P, bid, after_seq, limit -> flat {branch, seq, chain_hash, json, ...}
_LINEAGE = r"""
local after, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local segments = {}
local cur, upto = ARGV[2], math.huge
while cur do
  local b = redis.call('HMGET', bkey(cur), 'parent_id', 'fork_seq', 'head_seq')
  if not b[2] then break end
  table.insert(segments, {cur, tonumber(b[2]), tonumber(b[3]), upto})
  upto = tonumber(b[2])
  cur = b[1] or nil
end
local out, n = {}, 0
for i = #segments, 1, -1 do
  if n >= limit then break end
  local seg = segments[i]
  local bid, fork, head, stop = seg[1], seg[2], seg[3], seg[4]
  local first = math.max(after, fork) + 1
  local last = math.min(stop, head, first + (limit - n) - 1)
  if last >= first then
    local events = redis.call('LRANGE', P .. 'events:' .. bid, first - fork - 1, last - fork - 1)
    local hashes = redis.call('LRANGE', P .. 'chain:' .. bid, first - fork - 1, last - fork - 1)
    for j = 1, #events do
      table.insert(out, bid)
      table.insert(out, tostring(first + j - 1))
      table.insert(out, hashes[j])
      table.insert(out, events[j])
      n = n + 1
    end
  end
end
return out
"""

# ARGV: P, cid, now -> 1 when the conversation existed
_DELETE = r"""
local cid, now = ARGV[2], ARGV[3]
local conv = P .. 'conv:' .. cid
local tenant = redis.call('HGET', conv, 'tenant')
if tenant then
  local idx = index_prefix(tenant)
  for _, bid in ipairs(redis.call('LRANGE', P .. 'conv-branches:' .. cid, 0, -1)) do
    for _, h in ipairs(redis.call('LRANGE', P .. 'chain:' .. bid, 0, -1)) do
      redis.call('HDEL', idx .. h, cid)
    end
  end
end
for _, call_id in ipairs(redis.call('ZRANGE', P .. 'conv-calls:' .. cid, 0, -1)) do
  redis.call('ZREM', P .. 'calls', call_id)
end
for _, ckid in ipairs(redis.call('LRANGE', P .. 'conv-cks:' .. cid, 0, -1)) do
  redis.call('ZREM', P .. 'cks-retired', ckid)
end
local keys = P .. 'conv-keys:' .. cid
for _, key in ipairs(redis.call('SMEMBERS', keys)) do
  redis.call('UNLINK', key)
end
redis.call('UNLINK', keys, conv, P .. 'conv-branches:' .. cid, P .. 'conv-cks:' .. cid, P .. 'conv-calls:' .. cid)
redis.call('ZREM', P .. 'convs', cid)
if tenant then
  redis.call('ZADD', P .. 'tombstones', now, cid)
  return 1
end
return 0
"""

# ARGV: P, bid, owner, ttl_ms -> {'OK', token} | {'HELD'} | {'NOBRANCH'}
_ACQUIRE = r"""
local bid, owner, ttl = ARGV[2], ARGV[3], ARGV[4]
local cid = redis.call('HGET', bkey(bid), 'conversation_id')
if not cid then return {'NOBRANCH'} end
local lease, counter = P .. 'lease:' .. bid, P .. 'lease-token:' .. bid
local held = redis.call('GET', lease)
if held and string.match(held, '^(.*) %d+$') ~= owner then return {'HELD'} end
local token = redis.call('INCR', counter)
redis.call('SET', lease, owner .. ' ' .. token, 'PX', ttl)
own(cid, lease, counter)
return {'OK', tostring(token)}
"""

# ARGV: P, bid, owner, token, ttl_ms -> 1 when renewed
_RENEW = r"""
local lease = P .. 'lease:' .. ARGV[2]
if redis.call('GET', lease) ~= ARGV[3] .. ' ' .. ARGV[4] then return 0 end
redis.call('PEXPIRE', lease, ARGV[5])
return 1
"""

# ARGV: P, bid, owner, token
_RELEASE = r"""
local lease = P .. 'lease:' .. ARGV[2]
if redis.call('GET', lease) == ARGV[3] .. ' ' .. ARGV[4] then redis.call('DEL', lease) end
return 1
"""

# ARGV: P, before, batch -> how many call records were deleted
_PURGE_CALLS = r"""
local ids = redis.call('ZRANGEBYSCORE', P .. 'calls', '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local n = 0
for _, id in ipairs(ids) do
  local key = P .. 'call:' .. id
  local payload = redis.call('GET', key)
  if payload then
    local c = cjson.decode(payload)
    local cid, bid, purpose = c['conversation_id'], c['branch_id'], c['purpose']
    if type(cid) == 'string' then
      redis.call('ZREM', P .. 'conv-calls:' .. cid, id)
      redis.call('SREM', P .. 'conv-keys:' .. cid, key)
    end
    if type(bid) == 'string' and type(purpose) == 'string' then
      redis.call('ZREM', P .. 'last-call:' .. #purpose .. ':' .. purpose .. ':' .. bid, id)
    end
    redis.call('UNLINK', key)
    n = n + 1
  end
  redis.call('ZREM', P .. 'calls', id)
end
return {n, #ids}
"""

# ARGV: P, before, batch -> how many retired checkpoints were deleted
_PURGE_CKS = r"""
local ids = redis.call('ZRANGEBYSCORE', P .. 'cks-retired', '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local n = 0
for _, id in ipairs(ids) do
  local ck = P .. 'ck:' .. id
  local h = redis.call('HMGET', ck, 'json', 'branch', 'status')
  if h[1] and h[3] ~= 'active' then
    local cid = cjson.decode(h[1])['conversation_id']
    redis.call('LREM', P .. 'conv-cks:' .. cid, 0, id)
    redis.call('ZREM', P .. 'branch-cks:' .. h[2], id)
    redis.call('SREM', P .. 'conv-keys:' .. cid, ck)
    redis.call('UNLINK', ck)
    n = n + 1
  end
  redis.call('ZREM', P .. 'cks-retired', id)
end
return {n, #ids}
"""

_SCRIPTS = {
    "acquire": _ACQUIRE,
    "renew": _RENEW,
    "release": _RELEASE,
    "purge_calls": _PURGE_CALLS,
    "purge_cks": _PURGE_CKS,
    "create": _CREATE,
    "append": _APPEND,
    "active": _ACTIVE,
    "commit": _COMMIT,
    "failed": _FAILED,
    "record_call": _RECORD_CALL,
    "lineage": _LINEAGE,
    "delete": _DELETE,
}

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def _guarded(fn: F) -> F:
    """Every Redis or socket failure leaves the method as StoreError (the app answers 503)."""

    @functools.wraps(fn)
    async def wrapper(self: RedisStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(self, *args, **kwargs)
        except StoreError:
            raise
        except (TimeoutError, RedisError, OSError) as exc:
            raise StoreError(f"redis store at {self.location} failed: {type(exc).__name__}: {exc}") from exc

    return wrapper  # type: ignore[return-value]


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def _num(value: float) -> str:
    return repr(float(value))


def _ms(seconds: float) -> str:
    return str(max(1, int(seconds * 1000)))


def _redacted(url: str) -> str:
    """The URL without credentials or query, for error messages and logs."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname or 'localhost'}:{parts.port or 6379}{parts.path or ''}"
    except ValueError:
        return "(unparsable redis URL)"


def _scoped(tenant: str, value: str) -> str:
    """``{len(tenant)}:{tenant}:{value}``: unambiguous whatever either part contains."""
    return f"{len(tenant)}:{tenant}:{value}"


class RedisStore:
    def __init__(
        self,
        url: str,
        prefix: str = DEFAULT_PREFIX,
        *,
        socket_timeout: float = SOCKET_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self._r: aioredis.Redis | None = None
        self._scripts: dict[str, Any] = {}
        self.location = _redacted(url)

    @classmethod
    def from_url(cls, url: str) -> RedisStore:
        """``redis://[:password@]host:port/db`` or ``rediss://`` (TLS); ``?prefix=...`` sets the key prefix."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        prefix = DEFAULT_PREFIX
        rest: list[tuple[str, str]] = []
        for name, value in query:
            if name == "prefix":
                prefix = value
            else:
                rest.append((name, value))
        clean = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment))
        return cls(clean, prefix)

    # -- lifecycle ---------------------------------------------------------------------------
    @_guarded
    async def open(self) -> None:
        try:
            client = aioredis.from_url(
                self.url,
                decode_responses=True,
                encoding_errors="surrogatepass",
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=self.connect_timeout,
                # One immediate retry on a broken connection (a pooled socket the server closed),
                # none on timeouts: a down or stuck Redis answers StoreError in seconds, no storms.
                retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
                retry_on_timeout=False,
                health_check_interval=30,
            )
        except ValueError as exc:
            raise StoreError(f"invalid redis store URL: {exc}") from exc
        self._r = client
        self._scripts = {name: client.register_script(_LIB + src) for name, src in _SCRIPTS.items()}
        try:
            await client.ping()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        client, self._r = self._r, None
        if client is not None:
            try:
                await client.aclose()
            except (RedisError, OSError):
                pass

    @property
    def r(self) -> Any:
        """The client; typed Any because redis-py's stubs cannot express decode_responses=True
        (every reply here is str, never bytes)."""
        if self._r is None:
            raise StoreError("the store is not open")
        return self._r

    def _k(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    async def _run(self, name: str, *args: Any) -> Any:
        self.r  # noqa: B018 -- raises StoreError when closed
        return await self._scripts[name](keys=[], args=[self.prefix, *args])

    @_guarded
    async def ping(self) -> bool:
        return bool(await self.r.ping())

    @_guarded
    async def tenant_salt(self) -> bytes:
        key = self._k("meta", "tenant_salt")
        await self.r.set(key, secrets.token_hex(32), nx=True)
        value = await self.r.get(key)
        if value is None:
            raise StoreError("tenant salt vanished")
        return bytes.fromhex(value)

    # -- identity ----------------------------------------------------------------------------
    @_guarded
    async def find_longest(self, hashes: list[str], tenant: str, conversation_id: str | None) -> HashMatch | None:
        if not hashes:
            return None
        # Most requests continue the stored history by one or two messages: the tail first, then
        # the rest from the end backwards in pipelined batches, stopping at the first batch with a hit.
        end = len(hashes)
        size = TAIL
        while end > 0:
            start = max(0, end - size)
            match = await self._probe(hashes, start, end, tenant, conversation_id)
            if match is not None:
                return match
            end, size = start, BATCH
        return None

    async def _probe(
        self, hashes: list[str], start: int, end: int, tenant: str, conversation_id: str | None
    ) -> HashMatch | None:
        indices = range(end - 1, start - 1, -1)
        async with self.r.pipeline(transaction=False) as pipe:
            for i in indices:
                key = self._k("hash", _scoped(tenant, hashes[i]))
                if conversation_id is None:
                    pipe.hgetall(key)
                else:
                    pipe.hget(key, conversation_id)
            results = await pipe.execute()
        for i, found in zip(indices, results, strict=True):
            if not found:
                continue
            hits: dict[str, str] = found if conversation_id is None else {conversation_id: found}
            async with self.r.pipeline(transaction=False) as pipe:
                for cid, where in hits.items():
                    pipe.hget(self._k("conv", cid), "updated_at")
                    pipe.hget(self._k("branch", where.split(" ")[0]), "system_hash")
                details = await pipe.execute()
            best: tuple[float, str, str | None] | None = None
            for n, cid in enumerate(hits):
                updated, system_hash = details[2 * n], details[2 * n + 1]
                if updated is None:
                    continue  # deleted meanwhile
                if best is None or float(updated) > best[0]:
                    best = (float(updated), cid, system_hash)
            if best is None:
                continue
            branch_id, seq = hits[best[1]].split(" ")
            return HashMatch(Position(best[1], branch_id, int(seq)), i + 1, best[2])
        return None

    def _conversation(self, row: dict[str, str]) -> Conversation | None:
        if not row or "tenant" not in row:
            return None
        return Conversation(
            row["id"],
            row["tenant"],
            row.get("external_id"),
            float(row["created_at"]),
            float(row["updated_at"]),
            row["main_branch_id"],
        )

    @_guarded
    async def find_conversation(self, tenant: str, ref: str) -> Conversation | None:
        conv = self._conversation(await self.r.hgetall(self._k("conv", ref)))
        if conv is not None and conv.tenant == tenant:
            return conv
        cid = await self.r.get(self._k("ext", _scoped(tenant, ref)))
        if cid is None:
            return None
        conv = self._conversation(await self.r.hgetall(self._k("conv", cid)))
        return conv if conv is not None and conv.tenant == tenant else None

    @_guarded
    async def create_conversation(self, tenant: str, external_id: str | None) -> Conversation:
        now = time.time()
        conv_id, branch_id = _new_id("c"), _new_id("b")
        ext_key = self._k("ext", _scoped(tenant, external_id)) if external_id is not None else ""
        status, cid = await self._run(
            "create",
            conv_id,
            branch_id,
            tenant,
            "1" if external_id is not None else "0",
            ext_key,
            _num(now),
            external_id or "",
        )
        if status == "EXISTS":
            existing = self._conversation(await self.r.hgetall(self._k("conv", cid)))
            if existing is None:
                raise StoreError("conversation creation raced with a delete; retry")
            return existing
        return Conversation(conv_id, tenant, external_id, now, now, branch_id)

    @_guarded
    async def append(self, start: Position, events: list[NewEvent], system_hash: str | None) -> Position:
        now = time.time()
        args: list[Any] = [
            start.conversation_id,
            start.branch_id,
            start.seq,
            "1" if system_hash is not None else "0",
            system_hash or "",
            _num(now),
            secrets.token_hex(8),
        ]
        for event in events:
            payload = {
                "role": event.role,
                "message": event.message,
                "source": event.source,
                "tokens": event.tokens,
                "call_id": event.call_id,
                "created_at": now,
            }
            args.append(event.chain_hash)
            args.append(json.dumps(payload))
        reply = await self._run("append", *args)
        if reply[0] == "GONE":
            raise ConversationGone(f"conversation {start.conversation_id} no longer exists")
        if reply[0] != "OK":
            raise StoreError(f"append refused: {reply[0]} {reply[1:]}")
        return Position(start.conversation_id, reply[1], int(reply[2]))

    @_guarded
    async def put_blob(self, digest: str, data: str) -> None:
        await self.r.set(self._k("blob", digest), data, nx=True)

    @_guarded
    async def get_blob(self, digest: str) -> str | None:
        value = await self.r.get(self._k("blob", digest))
        return None if value is None else str(value)

    # -- calls -------------------------------------------------------------------------------
    def _last_call_key(self, branch_id: str, purpose: str) -> str:
        return self._k("last-call", f"{len(purpose)}:{purpose}:{branch_id}")

    @_guarded
    async def record_call(self, call: CallRecord) -> None:
        record = _call_dict(call)
        reply = await self._run(
            "record_call",
            call.id,
            call.conversation_id or "",
            call.branch_id or "",
            self._last_call_key(call.branch_id, call.purpose) if call.branch_id is not None else "",
            _num(call.started_at),
            json.dumps(record),
        )
        if reply[0] == "GONE":
            raise ConversationGone(f"conversation {call.conversation_id} was deleted")

    async def _calls(self, ids: list[str]) -> list[CallRecord]:
        if not ids:
            return []
        out: list[CallRecord] = []
        for start in range(0, len(ids), BATCH):
            values = await self.r.mget([self._k("call", i) for i in ids[start : start + BATCH]])
            out.extend(_call(v) for v in values if v is not None)
        return out

    @_guarded
    async def list_calls(self, conversation_id: str, limit: int, offset: int) -> list[CallRecord]:
        if limit <= 0:
            return []
        ids = await self.r.zrange(self._k("conv-calls", conversation_id), offset, offset + limit - 1)
        return await self._calls(ids)

    @_guarded
    async def last_call(self, branch_id: str, purpose: str) -> CallRecord | None:
        ids = await self.r.zrange(self._last_call_key(branch_id, purpose), 0, 0, desc=True)
        calls = await self._calls(ids)
        return calls[0] if calls else None

    @_guarded
    async def usage_cells(self, query: UsageQuery) -> list[UsageCell]:
        # The time range comes from a sorted index (the conversation's, or the global one); route and
        # tenant filter the records read. Same sums as SQLite: None when no record knew a field.
        if query.conversation_id is not None:
            index = self._k("conv-calls", query.conversation_id)
        else:
            index = self._k("calls")
        low = "-inf" if query.since is None else _num(query.since)
        high = "+inf" if query.until is None else f"({_num(query.until)}"
        ids = await self.r.zrangebyscore(index, low, high)
        column = USAGE_GROUP_COLUMNS[query.group_by] if query.group_by else None
        cells: dict[tuple[str | None, str, str], UsageCell] = {}
        for call in await self._calls(ids):
            if not query.matches(call):
                continue
            key = getattr(call, column) if column else None
            cell = cells.get((key, call.purpose, call.status))
            if cell is None:
                cell = UsageCell(
                    key, call.purpose, call.status, 0, dict.fromkeys(_LEDGER_FIELDS), dict.fromkeys(_LEDGER_FIELDS, 0)
                )
                cells[(key, call.purpose, call.status)] = cell
            cell.calls += 1
            values: dict[str, Any] = {k: call.usage.get(k) for k in _USAGE_COLUMNS}
            values["cost_usd"] = call.cost_usd
            values["tokens_saved"] = tokens_saved(call.purpose, call.projection)
            for name, value in values.items():
                if value is None:
                    continue
                previous = cell.sums[name]
                cell.sums[name] = value if previous is None else previous + value
                cell.known[name] += 1
        return list(cells.values())

    # -- checkpoints -------------------------------------------------------------------------
    @_guarded
    async def active_checkpoint(self, branch_id: str) -> StoredCheckpoint | None:
        reply = await self._run("active", branch_id)
        if not reply or reply[0] is None:
            return None
        return _checkpoint(reply[0], reply[1])

    @_guarded
    async def commit_checkpoint(self, candidate: CheckpointCandidate) -> StoredCheckpoint | None:
        checkpoint = _new_checkpoint(candidate, "active")
        reply = await self._run(
            "commit",
            candidate.conversation_id,
            candidate.branch_id,
            candidate.parent_generation,
            candidate.covered_through_seq,
            candidate.source_hash,
            checkpoint.id,
            _checkpoint_json(checkpoint),
            "" if candidate.lease_token is None else str(candidate.lease_token),
        )
        if reply[0] == "GONE":
            raise ConversationGone(f"conversation {candidate.conversation_id} no longer exists")
        if reply[0] != "OK":
            return None
        return checkpoint

    @_guarded
    async def record_failed_checkpoint(self, candidate: CheckpointCandidate, error: str) -> None:
        failed = _new_checkpoint(candidate, "failed", error)
        reply = await self._run(
            "failed",
            candidate.conversation_id,
            candidate.branch_id,
            failed.id,
            _checkpoint_json(failed),
            candidate.covered_through_seq,
            _num(failed.created_at),
        )
        if reply[0] == "GONE":
            raise ConversationGone(f"conversation {candidate.conversation_id} no longer exists")

    # -- leases ------------------------------------------------------------------------------
    @_guarded
    async def acquire_lease(self, branch_id: str, owner: str, ttl: float) -> int | None:
        reply = await self._run("acquire", branch_id, owner, _ms(ttl))
        return int(reply[1]) if reply[0] == "OK" else None

    @_guarded
    async def renew_lease(self, branch_id: str, owner: str, token: int, ttl: float) -> bool:
        return bool(await self._run("renew", branch_id, owner, str(token), _ms(ttl)))

    @_guarded
    async def release_lease(self, branch_id: str, owner: str, token: int) -> None:
        await self._run("release", branch_id, owner, str(token))

    @_guarded
    async def list_checkpoints(self, conversation_id: str) -> list[StoredCheckpoint]:
        ids = await self.r.lrange(self._k("conv-cks", conversation_id), 0, -1)
        if not ids:
            return []
        async with self.r.pipeline(transaction=False) as pipe:
            for ck in ids:
                pipe.hmget(self._k("ck", ck), "json", "status")
            rows = await pipe.execute()
        return [_checkpoint(payload, status) for payload, status in rows if payload is not None]

    # -- admin -------------------------------------------------------------------------------
    async def _conversations(self, ids: list[str]) -> list[Conversation]:
        if not ids:
            return []
        async with self.r.pipeline(transaction=False) as pipe:
            for cid in ids:
                pipe.hgetall(self._k("conv", cid))
            rows = await pipe.execute()
        return [c for c in (self._conversation(row) for row in rows) if c is not None]

    @_guarded
    async def list_conversations(self, limit: int, before: float | None) -> list[Conversation]:
        if limit <= 0:
            return []
        top = "+inf" if before is None else f"({_num(before)}"
        ids = await self.r.zrevrangebyscore(self._k("convs"), top, "-inf", start=0, num=limit)
        return await self._conversations(ids)

    @_guarded
    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        return self._conversation(await self.r.hgetall(self._k("conv", conversation_id)))

    @_guarded
    async def list_branches(self, conversation_id: str) -> list[Branch]:
        ids = await self.r.lrange(self._k("conv-branches", conversation_id), 0, -1)
        if not ids:
            return []
        async with self.r.pipeline(transaction=False) as pipe:
            for bid in ids:
                pipe.hgetall(self._k("branch", bid))
            rows = await pipe.execute()
        return [
            Branch(
                bid,
                row["conversation_id"],
                row.get("parent_id"),
                int(row["fork_seq"]),
                int(row["head_seq"]),
                float(row["created_at"]),
                float(row["updated_at"]),
            )
            for bid, row in zip(ids, rows, strict=True)
            if row
        ]

    @_guarded
    async def lineage_events(self, branch_id: str, after_seq: int, limit: int) -> list[StoredEvent]:
        if limit <= 0:
            return []
        flat = await self._run("lineage", branch_id, int(after_seq), int(limit))
        out: list[StoredEvent] = []
        for i in range(0, len(flat), 4):
            payload = json.loads(flat[i + 3])
            out.append(
                StoredEvent(
                    flat[i],
                    int(flat[i + 1]),
                    payload["role"],
                    payload["message"],
                    flat[i + 2],
                    payload["source"],
                    payload["tokens"],
                    payload["created_at"],
                )
            )
        return out

    @_guarded
    async def delete_conversation(self, conversation_id: str) -> bool:
        return bool(await self._run("delete", conversation_id, _num(time.time())))

    # -- retention ---------------------------------------------------------------------------
    async def _purge(self, script: str, before: float) -> int:
        total = 0
        while True:  # bounded batches: one script never blocks the server for long
            deleted, seen = await self._run(script, _num(before), BATCH)
            total += int(deleted)
            if int(seen) < BATCH:
                return total

    @_guarded
    async def purge_calls(self, before: float) -> int:
        return await self._purge("purge_calls", before)

    @_guarded
    async def purge_checkpoints(self, before: float) -> int:
        return await self._purge("purge_cks", before)

    @_guarded
    async def stale_conversations(self, before: float, limit: int) -> list[str]:
        if limit <= 0:
            return []
        ids = await self.r.zrangebyscore(self._k("convs"), "-inf", f"({_num(before)}", start=0, num=limit)
        return [str(i) for i in ids]


def _call_dict(call: CallRecord) -> dict[str, Any]:
    record = {name: getattr(call, name) for name in _CALL_FIELDS}
    record["stream"] = bool(call.stream)
    # Like SQLite's columns: the six normalized fields, each known or None.
    record["usage"] = {k: call.usage.get(k) for k in _USAGE_COLUMNS}
    return record


def _call(payload: str) -> CallRecord:
    record = json.loads(payload)
    return CallRecord(**{k: v for k, v in record.items() if k in _CALL_FIELDS})


def _new_checkpoint(candidate: CheckpointCandidate, status: str, error: str | None = None) -> StoredCheckpoint:
    return candidate.stored(_new_id("ck"), status, time.time(), error)


def _checkpoint_json(cp: StoredCheckpoint) -> str:
    return json.dumps(
        {
            "id": cp.id,
            "conversation_id": cp.conversation_id,
            "branch_id": cp.branch_id,
            # Like SQLite: a failed candidate does not hold a generation.
            "generation": cp.generation if cp.status != "failed" else None,
            "from_seq": cp.from_seq,
            "covered_through_seq": cp.covered_through_seq,
            "source_hash": cp.source_hash,
            "summary": cp.summary,
            "tokens": cp.tokens,
            "model": cp.model,
            "format_version": cp.format_version,
            "created_at": cp.created_at,
            "error": cp.error,
        }
    )


def _checkpoint(payload: str, status: str) -> StoredCheckpoint:
    return StoredCheckpoint(status=status, **json.loads(payload))
