"""The Redis client (one server or a cluster), its scripts, and the one boundary where Redis and
socket errors become ours.

``redis://`` / ``rediss://`` talk to one server (or the primary of a replicated pair);
``redis+cluster://HOST:PORT[,HOST:PORT...]`` (``rediss+cluster://`` with TLS) names seed nodes of
a Redis Cluster, whose other nodes are discovered; redis-py's cluster client follows MOVED and ASK
and re-reads the slot map after a failover. Query options: ``prefix`` (key prefix), and
``wait_replicas`` / ``wait_timeout_ms``: after each write, WAIT until that many replicas have it
(or the timeout passed; the answer is not held longer) -- for operators who prefer a slower turn
to a write that an asynchronous replica might lose in a failover.

Short socket timeouts, one immediate retry on a broken connection only (a stale pooled connection
after a restart, a node that just failed over), never on timeouts; every public method is
`guarded`, so every Redis or socket error leaves it as StoreError (the app answers 503). The pool
reconnects on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Self, TypeVar
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MasterDownError,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ...errors import StoreError
from ..urls import scheme_of

try:  # redis-py 7+: no CLIENT MAINT_NOTIFICATIONS handshake on every new connection (a managed-
    # service feature Redis 7 does not have): one round trip less, one race less in a failover
    from redis.maint_notifications import MaintNotificationsConfig

    _NO_MAINT: dict[str, Any] = {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}
except ImportError:  # older redis-py never sends it
    _NO_MAINT = {}
from .keys import TAGS, Layout
from .scripts import sources

DEFAULT_PREFIX = "ctxproxy:"
POOL_CONNECTIONS = 256
"""Connections per replica to a single Redis; more concurrent commands wait for one."""
SOCKET_TIMEOUT = 1.5
CONNECT_TIMEOUT = 1.5
BATCH = 1000
FAILOVER_WAIT_MS = 10_000
_FAILOVER_ERRORS = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    MasterDownError,
    SlotNotCoveredError,
    TryAgainError,
    TimeoutError,
    OSError,
)

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
T = TypeVar("T")


def guarded(fn: F) -> F:
    """Every Redis or socket failure leaves the method as StoreError (the app answers 503)."""

    @functools.wraps(fn)
    async def wrapper(self: RedisConnection, *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(self, *args, **kwargs)
        except StoreError:
            raise
        except (TimeoutError, RedisError, OSError, AttributeError, RuntimeError) as exc:
            if isinstance(exc, (AttributeError, RuntimeError)) and not _inside_redis_py(exc):
                raise
            raise StoreError(f"redis store at {self.location} failed: {type(exc).__name__}: {exc}") from exc

    return wrapper  # type: ignore[return-value]


class RedisConnection:
    def __init__(
        self,
        url: str,
        prefix: str = DEFAULT_PREFIX,
        *,
        socket_timeout: float = SOCKET_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
        failover_wait_ms: int | None = None,
    ) -> None:
        self.url = url
        try:
            self.keys = Layout(prefix)
        except ValueError as exc:
            raise StoreError(str(exc)) from exc
        self.prefix = prefix
        self.cluster = _is_cluster(url)
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        default_wait = FAILOVER_WAIT_MS if self.cluster else 0
        self.failover_wait = (default_wait if failover_wait_ms is None else failover_wait_ms) / 1000
        self._r: Any = None
        self._scripts: dict[str, Any] = {}
        self._node_clients: dict[str, Any] = {}  # plain clients per cluster node, for WAIT
        self._pool: Any = None  # a single Redis's connection pool
        self._tenants: dict[str, str] = {}  # conversation id -> tenant (never changes), bounded
        self.location = _redacted(url)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """``redis://[:password@]host:port/db``, ``rediss://`` (TLS) or ``redis+cluster://h:p,h:p``;
        ``?prefix=...`` sets the key prefix, ``?wait_replicas=N&wait_timeout_ms=T`` the WAIT."""
        parts = urlsplit(url)
        options = {"prefix": DEFAULT_PREFIX, "wait_replicas": "0", "wait_timeout_ms": "100", "failover_wait_ms": ""}
        rest: list[tuple[str, str]] = []
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name in options:
                options[name] = value
            else:
                rest.append((name, value))
        names = ("wait_replicas", "wait_timeout_ms", "failover_wait_ms")
        try:
            wait, timeout = int(options["wait_replicas"]), int(options["wait_timeout_ms"])
            failover = int(options["failover_wait_ms"]) if options["failover_wait_ms"] else None
        except ValueError:
            raise StoreError(f"{', '.join(names)} in the store URL must be integers") from None
        if min(wait, timeout, failover or 0) < 0:
            raise StoreError(f"{', '.join(names)} in the store URL must not be negative")
        clean = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment))
        return cls(clean, options["prefix"], wait_replicas=wait, wait_timeout_ms=timeout, failover_wait_ms=failover)

    # -- lifecycle ---------------------------------------------------------------------------
    @guarded
    async def open(self) -> None:
        # One immediate retry on a broken connection (a pooled socket the server closed, a node
        # that failed over), none on timeouts: a down or stuck Redis answers StoreError in
        # seconds, no storms.
        retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
        common: dict[str, Any] = dict(
            decode_responses=True,
            encoding_errors="surrogatepass",
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=retry,
            health_check_interval=30,
            **_NO_MAINT,
        )
        try:
            client: Any = _cluster_client(self.url, common) if self.cluster else self._pooled(common)
        except ValueError as exc:
            raise StoreError(f"invalid redis store URL: {exc}") from exc
        self._r = client
        self._scripts = {name: client.register_script(src) for name, src in sources().items()}
        try:
            await client.ping()
        except BaseException:
            await self.close()
            raise

    def _pooled(self, common: dict[str, Any]) -> Any:
        """A client whose pool waits for a free connection (up to the socket time-out) when all
        `POOL_CONNECTIONS` are busy, instead of failing the request: redis-py's default pool
        refuses the 101st concurrent command at once, which a team's load of agents reaches.
        The URL's own `max_connections` wins."""
        settings = {k: v for k, v in common.items() if k not in _NO_MAINT}
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url, max_connections=POOL_CONNECTIONS, timeout=self.socket_timeout, retry_on_timeout=False, **settings
        )
        self._pool = pool  # the client does not own it: `close` disconnects it
        return aioredis.Redis(connection_pool=pool, **_NO_MAINT)

    async def close(self) -> None:
        client, self._r = self._r, None
        pool, self._pool = self._pool, None
        nodes, self._node_clients = list(self._node_clients.values()), {}
        for c in [client, *nodes, pool] if client is not None else [*nodes, pool]:
            if c is None:
                continue
            try:
                await c.aclose()
            except (RedisError, OSError):
                pass

    @property
    def r(self) -> Any:
        """The client; typed Any because redis-py's stubs cannot express decode_responses=True
        (every reply here is str, never bytes) nor one type for both clients."""
        if self._r is None:
            raise StoreError("the store is not open")
        return self._r

    async def _run(self, name: str, keys: list[str], *args: Any) -> Any:
        """One script over `keys` (one slot), retried while the cluster fails over (at most
        failover_wait; every script is idempotent or fenced, so a retry after a lost reply is
        safe); with wait_replicas, followed by WAIT on the same connection."""
        self.r  # noqa: B018 -- raises StoreError when closed
        script = self._scripts[name]
        if self.wait_replicas and name not in _READ_ONLY:
            return await self._through_failover(lambda: self._run_and_wait(script, keys, args))
        return await self._through_failover(lambda: script(keys=keys, args=list(args)))

    async def _through_failover(self, write: Callable[[], Awaitable[T]]) -> T:
        """`write()`, tried again every 0.2 s while the cluster fails over, for at most
        failover_wait (0 on one server: once); `write` must be safe to repeat."""
        deadline = time.monotonic() + self.failover_wait
        while True:
            try:
                return await write()
            except (*_FAILOVER_ERRORS, AttributeError, RuntimeError) as exc:
                if isinstance(exc, (AttributeError, RuntimeError)) and not _inside_redis_py(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.2)

    async def _run_and_wait(self, script: Any, keys: list[str], args: Iterable[Any]) -> Any:
        # WAIT counts the replicas that have this connection's writes, so it must follow the
        # script on the very connection that ran it: a pipeline to the node of the slot.
        client = self.r
        if self.cluster:
            node = client.get_node_from_key(keys[0])
            client = self._node_clients.get(node.name) or self._node_client(node)
        try:
            async with client.pipeline(transaction=False) as pipe:
                await script(keys=keys, args=list(args), client=pipe)
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
                reply, _acked = await pipe.execute()
            return reply
        except (RedisError, OSError) as exc:
            if not self.cluster:
                raise
            # The node client knows no slot map: let the cluster client see the failover (it
            # re-reads the map on a broken connection or a MOVED), then retry like any failover.
            with contextlib.suppress(RedisError, OSError):
                await self.r.exists(keys[0])
            if isinstance(exc, AskError):  # MovedError too: the slot has a new primary
                raise TryAgainError(str(exc)) from exc
            raise

    def _node_client(self, node: ClusterNode) -> Any:
        client = aioredis.Redis(
            host=node.host,
            port=int(node.port),
            decode_responses=True,
            encoding_errors="surrogatepass",
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.connect_timeout,
            **_NO_MAINT,
            **_auth(self.url),
        )
        self._node_clients[node.name] = client
        return client

    async def scatter(self, build: Callable[[Any, str], None]) -> list[Any]:
        """One command per tag shard (`build(pipe, tag)` adds it), pipelined; the replies by tag."""
        replies: list[Any] = []
        for start in range(0, len(TAGS), BATCH):
            async with self.r.pipeline(transaction=False) as pipe:
                for tag in TAGS[start : start + BATCH]:
                    build(pipe, tag)
                replies.extend(await pipe.execute())
        return replies

    async def _purge_by_conversation(self, index: str, script: str, before: float) -> int:
        """Retention over a shard index of ``"{cid}|{id}"`` members: read a batch per shard, then
        one script per conversation (in its slot) deletes what is still older than `before`."""
        total = 0
        high = f"({num(before)}"
        while True:
            shards = await self.scatter(
                lambda pipe, tag: pipe.zrangebyscore(self.keys.tagged(tag, index), "-inf", high, start=0, num=BATCH)
            )
            seen = 0
            for tag, members in zip(TAGS, shards, strict=True):
                seen += len(members)
                groups: dict[str, list[str]] = {}
                for member in members:
                    cid, _, item = member.partition("|")
                    groups.setdefault(cid, []).append(item)
                for cid, items in groups.items():
                    if cid:
                        keys = self.keys.conversation(cid)
                        total += int(await self._run(script, keys, cid, num(before), *items))
                    else:  # calls no conversation owns
                        keys = [self.keys.tagged(tag, "orphan-calls"), self.keys.tagged(tag, "call-index")]
                        total += int(await self._run("purge_orphans", keys, num(before), *items))
            if seen == 0 or all(len(m) < BATCH for m in shards):
                return total

    @guarded
    async def ping(self) -> bool:
        return bool(await self.r.ping())

    @guarded
    async def tenant_salt(self) -> bytes:
        key = self.keys.plain("meta", "tenant_salt")
        await self.r.set(key, secrets.token_hex(32), nx=True)
        value = await self.r.get(key)
        if value is None:
            raise StoreError("tenant salt vanished")
        return bytes.fromhex(value)


_READ_ONLY = frozenset({"probe", "active", "lineage", "memory_read"})


def _inside_redis_py(exc: BaseException) -> bool:
    """An AttributeError or RuntimeError raised under redis-py's frames: its connection torn down
    under it by a concurrent disconnect (seen during failovers: ``_writer`` already None, or the
    event loop's "handler is closed") -- a broken connection, not a bug of ours."""
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith("redis."):
            return True
        tb = tb.tb_next
    return False


def num(value: float) -> str:
    """A float as Redis reads it back exactly (scores, timestamps)."""
    return repr(float(value))


def _cluster_client(url: str, common: dict[str, Any]) -> RedisCluster:
    parts = urlsplit(url)
    hosts = parts.netloc.rsplit("@", 1)[-1]
    nodes: list[ClusterNode] = []
    for seed in hosts.split(","):
        host, _, port = seed.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"cluster seed {seed!r} is not HOST:PORT")
        nodes.append(ClusterNode(host.strip("[]"), int(port)))
    scheme = scheme_of(url)
    return RedisCluster(startup_nodes=nodes, ssl=scheme is not None and scheme.tls, **_auth(url), **common)


def _is_cluster(url: str) -> bool:
    scheme = scheme_of(url)
    return scheme is not None and scheme.cluster


def _auth(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return {}
    user, _, password = parts.netloc.rsplit("@", 1)[0].partition(":")
    return {"username": unquote(user) or None, "password": unquote(password) or None}


def _redacted(url: str) -> str:
    """The URL without credentials or query, for error messages and logs."""
    try:
        parts = urlsplit(url)
        if _is_cluster(url):
            return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
        return f"{parts.scheme}://{parts.hostname or 'localhost'}:{parts.port or 6379}{parts.path or ''}"
    except ValueError:
        return "(unparsable redis URL)"
