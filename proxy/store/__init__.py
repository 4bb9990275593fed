"""Storage backends behind the `Store` protocol; `make_store` picks one by URL."""

from __future__ import annotations

from ..errors import StoreError
from .base import Store


def make_store(url: str) -> Store:
    if url.startswith("sqlite:///"):
        from .sqlite import SqliteStore

        return SqliteStore.from_url(url)
    if url.startswith(("redis://", "rediss://", "redis+cluster://", "rediss+cluster://")):
        from .redis import RedisStore  # imports the redis client only when it is used

        return RedisStore.from_url(url)
    raise StoreError(
        f"unsupported store URL scheme in {url.split('://', 1)[0]!r}; use sqlite:///PATH, redis://HOST:PORT/DB or redis+cluster://HOST:PORT[,HOST:PORT...]"
    )


__all__ = ["Store", "make_store"]
