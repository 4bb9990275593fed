"""The PostgreSQL connection pool and the one boundary where asyncpg's errors become ours.

`postgresql://USER:PASSWORD@HOST:PORT/DATABASE?schema=NAME&pool_min=1&pool_max=10` (`postgres://`
too). `schema` (default `public`) holds the tables, so several deployments can share a database;
`pool_min` / `pool_max` size the pool of one worker process: a deployment opens up to replicas x
workers x `pool_max` connections, which must stay under the server's `max_connections`. Any other
query parameter (`sslmode`, `application_name`, ...) is asyncpg's own.

asyncpg prepares each statement on first use and caches it per connection, so the hot path's
statements are parsed and planned once per connection, not per request. (Behind PgBouncer in
transaction mode, set `statement_cache_size=0` in the URL.)

Every statement of a Store method runs inside `_read` or `_write`: `_write` is one transaction,
rolled back whole if anything raises. A server that cannot be reached (refused or dropped
connections, a restart, a failover, one starting up) is waited out for at most `failover_wait_ms`
(URL option, default 10000, as a Redis Cluster's): the method runs again on a fresh connection every 0.2 s -- but a
transaction is run again only when it failed before its COMMIT was sent (it was rolled back, so
running it again writes it once); one whose COMMIT was cut off may or may not have landed, and
fails. A deadlock or serialization failure (rolled back too) is run again the same way. Anything
else, and a server still gone after the wait, leaves the store as StoreError, which the app
answers 503 exactly like a Redis outage. The error names the server by host, port and database:
the URL's password never appears in an error or log.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from ...errors import ConversationGone, StoreError
from .migrations import migrate

P = ParamSpec("P")
T = TypeVar("T")


class Conn(Protocol):
    """What the store uses of an asyncpg connection (asyncpg ships no type hints)."""

    async def execute(self, query: str, *args: Any) -> str: ...
    async def fetch(self, query: str, *args: Any) -> list[Any]: ...
    async def fetchrow(self, query: str, *args: Any) -> Any: ...
    async def fetchval(self, query: str, *args: Any) -> Any: ...
    def transaction(self) -> Any: ...


_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)
_AGAIN = (
    OSError,
    asyncpg.InterfaceError,  # "connection is closed"
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,  # starting up or shutting down
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
)
"""Failures after which the work was not done and may be run again (a statement, or a
transaction that had not reached its COMMIT)."""


def parse_url(url: str) -> tuple[str, str, int, int, int, str]:
    """(the DSN for asyncpg, the schema, pool_min, pool_max, failover_wait_ms, where:
    host:port/database without credentials). Raises StoreError, naming no secret, when an option
    is malformed."""
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    schema = options.pop("schema", "public")
    if not _SCHEMA.fullmatch(schema):
        raise StoreError(f"postgresql store: schema={schema!r} must be a lower-case SQL identifier ([a-z_][a-z0-9_]*)")
    sizes = []
    for name, default, most in (("pool_min", 1, 1000), ("pool_max", 10, 1000), ("failover_wait_ms", 10_000, 600_000)):
        raw = options.pop(name, str(default))
        if not raw.isdigit() or not 0 <= int(raw) <= most:
            raise StoreError(f"postgresql store: {name}={raw!r} must be a whole number from 0 to {most}")
        sizes.append(int(raw))
    pool_min, pool_max, failover_wait_ms = sizes
    if pool_max < 1 or pool_min > pool_max:
        raise StoreError(f"postgresql store: need 1 <= pool_max and pool_min <= pool_max (got {pool_min}, {pool_max})")
    try:
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError as exc:
        raise StoreError(f"postgresql store: the port of the URL is not a number ({exc})") from None
    where = f"{host}:{port}{parts.path or '/'}"
    dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(options), ""))
    return dsn, schema, pool_min, pool_max, failover_wait_ms, where


class PostgresConnection:
    def __init__(self, url: str, *, connect_timeout: float = 5.0, command_timeout: float = 10.0) -> None:
        self._dsn, self.schema, self.pool_min, self.pool_max, wait_ms, self.location = parse_url(url)
        self.failover_wait = wait_ms / 1000
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self._pool: asyncpg.Pool | None = None

    def _fail(self, exc: BaseException) -> StoreError:
        state = getattr(exc, "sqlstate", None)
        if state == "CX001":  # raised by ctxproxy_append (migrations.py): the conversation is gone
            return ConversationGone(str(exc))
        if state == "CX002":  # ... or the branch to append to
            return StoreError(str(exc))
        detail = str(exc).replace(self._dsn, "<url>")
        return StoreError(f"postgresql store at {self.location} failed: {type(exc).__name__}: {detail}")

    async def open(self) -> None:
        try:
            conn = await asyncpg.connect(self._dsn, timeout=self.connect_timeout)
            try:
                await migrate(conn, self.schema)
            finally:
                await conn.close()
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self.pool_min,
                max_size=self.pool_max,
                timeout=self.connect_timeout,
                command_timeout=self.command_timeout,
                server_settings={"search_path": f'"{self.schema}"'},
            )
        except StoreError:
            raise
        except _ERRORS as exc:
            raise self._fail(exc) from None

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=5)
            except (TimeoutError, *_ERRORS):
                pool.terminate()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("the store is not open")
        return self._pool

    async def _read(self, fn: Callable[Concatenate[Conn, P], Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(conn, ...)` on a pooled connection, outside a transaction; it only reads, so it
        is run again while the server cannot be reached (at most `failover_wait`)."""
        deadline = time.monotonic() + self.failover_wait
        while True:
            try:
                async with self.pool.acquire(timeout=self.connect_timeout) as conn:
                    return await fn(conn, *args, **kwargs)
            except StoreError:
                raise
            except _ERRORS as exc:
                if not isinstance(exc, _AGAIN) or time.monotonic() >= deadline:
                    raise self._fail(exc) from exc
            await asyncio.sleep(0.2)

    async def _write(self, fn: Callable[Concatenate[Conn, P], Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(conn, ...)` in one transaction, rolled back if anything raises; run again (at
        most `failover_wait`) when it failed before its COMMIT was sent."""
        deadline = time.monotonic() + self.failover_wait
        while True:
            committing = False
            try:
                async with self.pool.acquire(timeout=self.connect_timeout) as conn:
                    async with conn.transaction():
                        result = await fn(conn, *args, **kwargs)
                        committing = True
                    return result
            except StoreError:
                raise
            except _ERRORS as exc:
                if committing or not isinstance(exc, _AGAIN) or time.monotonic() >= deadline:
                    raise self._fail(exc) from exc
            await asyncio.sleep(0.2)

    async def _one(self, fn: Callable[Concatenate[Conn, P], Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(conn, ...)` outside an explicit transaction, for a function that runs one
        statement (its own transaction: one round trip, no BEGIN and COMMIT); run again like
        `_read` while the server cannot be reached (a statement cut off before its answer may
        have committed: those run here are idempotent, an append by its chain hashes and a call
        record by its id)."""
        return await self._read(fn, *args, **kwargs)

    async def ping(self) -> bool:
        """One `SELECT 1`, not waited out like the other calls: `/healthz` and `/readyz` must
        answer at once that the store is down."""
        try:
            async with self.pool.acquire(timeout=self.connect_timeout) as conn:
                await conn.fetchval("SELECT 1")
        except _ERRORS as exc:
            raise self._fail(exc) from exc
        return True

    async def tenant_salt(self) -> bytes:
        return bytes.fromhex(await self._write(_tenant_salt))


async def _tenant_salt(conn: Conn) -> str:
    await conn.execute(
        "INSERT INTO meta (key, value) VALUES ('tenant_salt', $1) ON CONFLICT (key) DO NOTHING", secrets.token_hex(32)
    )
    return str(await conn.fetchval("SELECT value FROM meta WHERE key = 'tenant_salt'"))


def count(status: str) -> int:
    """The row count of a command's status (`DELETE 3` -> 3)."""
    return int(status.rsplit(" ", 1)[-1])
