"""Storage backends behind the `Store` protocol; `open_store` picks one by URL."""

from __future__ import annotations

from .base import Store, StoreError


def make_store(url: str) -> Store:
    if url.startswith("sqlite:///"):
        from .sqlite import SqliteStore

        return SqliteStore.from_url(url)
    raise StoreError(f"unsupported store URL scheme in {url.split('://', 1)[0]!r}; use sqlite:///PATH")


__all__ = ["Store", "StoreError", "make_store"]
