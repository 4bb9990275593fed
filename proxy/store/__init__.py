"""Storage backends behind the `Store` protocol; `make_store` picks one by URL (urls.py)."""

from __future__ import annotations

from ..errors import StoreError
from .base import Store
from .urls import FORMS, scheme_of


def make_store(url: str) -> Store:
    scheme = scheme_of(url)
    if scheme is not None and scheme.backend == "sqlite":
        from .sqlite import SqliteStore

        return SqliteStore.from_url(url)
    if scheme is not None and scheme.backend == "redis":
        from .redis import RedisStore  # imports the redis client only when it is used

        return RedisStore.from_url(url)
    if scheme is not None and scheme.backend == "postgres":
        from .postgres import PostgresStore  # imports asyncpg only when it is used

        return PostgresStore.from_url(url)
    raise StoreError(f"unsupported store URL scheme in {url.split('://', 1)[0]!r}; use {FORMS}")


def store_problem(url: str) -> str | None:
    """What is wrong with the store URL that can be seen without connecting: a SQLite file whose
    directory does not exist, a PostgreSQL URL's malformed option. (Whether a Redis or a
    PostgreSQL answers is `ctxproxy doctor`'s question.)"""
    scheme = scheme_of(url)
    if scheme is not None and scheme.backend == "sqlite":
        from .sqlite.connection import missing_directory

        return missing_directory(url.removeprefix(scheme.prefix) or "ctxproxy.db")
    if scheme is not None and scheme.backend == "postgres":
        try:
            make_store(url)
        except StoreError as exc:
            return str(exc)
    return None


__all__ = ["Store", "make_store", "store_problem"]
