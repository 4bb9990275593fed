"""The Redis client, its scripts, and the one boundary where Redis and socket errors become ours.

Short socket timeouts, one immediate retry on a broken connection only (a stale pooled connection
after a restart), never on timeouts; every public method is `guarded`, so every Redis or socket
error leaves it as StoreError (the app answers 503). The pool reconnects on the next call.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Self, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from ...errors import StoreError
from .scripts import sources

DEFAULT_PREFIX = "ctxproxy:"
SOCKET_TIMEOUT = 1.5
CONNECT_TIMEOUT = 1.5
BATCH = 1000

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def guarded(fn: F) -> F:
    """Every Redis or socket failure leaves the method as StoreError (the app answers 503)."""

    @functools.wraps(fn)
    async def wrapper(self: RedisConnection, *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(self, *args, **kwargs)
        except StoreError:
            raise
        except (TimeoutError, RedisError, OSError) as exc:
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
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self._r: aioredis.Redis | None = None
        self._scripts: dict[str, Any] = {}
        self.location = _redacted(url)

    @classmethod
    def from_url(cls, url: str) -> Self:
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
    @guarded
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
        self._scripts = {name: client.register_script(src) for name, src in sources().items()}
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

    async def _purge(self, script: str, before: float) -> int:
        total = 0
        while True:  # bounded batches: one script never blocks the server for long
            deleted, seen = await self._run(script, num(before), BATCH)
            total += int(deleted)
            if int(seen) < BATCH:
                return total

    @guarded
    async def ping(self) -> bool:
        return bool(await self.r.ping())

    @guarded
    async def tenant_salt(self) -> bytes:
        key = self._k("meta", "tenant_salt")
        await self.r.set(key, secrets.token_hex(32), nx=True)
        value = await self.r.get(key)
        if value is None:
            raise StoreError("tenant salt vanished")
        return bytes.fromhex(value)


def num(value: float) -> str:
    """A float as Redis reads it back exactly (scores, timestamps)."""
    return repr(float(value))


def scoped(tenant: str, value: str) -> str:
    """``{len(tenant)}:{tenant}:{value}``: unambiguous whatever either part contains."""
    return f"{len(tenant)}:{tenant}:{value}"


def _redacted(url: str) -> str:
    """The URL without credentials or query, for error messages and logs."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname or 'localhost'}:{parts.port or 6379}{parts.path or ''}"
    except ValueError:
        return "(unparsable redis URL)"
