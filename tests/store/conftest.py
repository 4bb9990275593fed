"""Fixtures for the store tests: a private redis-server for the whole session, and the contract
suite's backends (`BACKENDS`; the `stores` and `store` fixtures run a test on each)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from proxy.store.base import Store
from proxy.store.postgres import PostgresStore
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from tests.support.postgres_server import session_postgres
from tests.support.redis_server import RedisServer, session_cluster, session_server, set_session_server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    set_session_server(server)
    try:
        yield server
    finally:
        set_session_server(None)
        server.stop()


def _sqlite(tmp_path: Path, name: str) -> Store:
    return SqliteStore(str(tmp_path / f"{name}.db"))


def _redis_root(tmp_path: Path) -> str:
    # A fresh key prefix per test (tmp_path is unique per test); the name picks a store inside it.
    return "ctxtest:" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:16] + ":"


def _redis(tmp_path: Path, name: str) -> Store:
    return RedisStore(session_server().url, prefix=f"{_redis_root(tmp_path)}{name}:")


def _redis_cleanup(tmp_path: Path) -> None:
    client = session_server().client()
    try:
        keys = list(client.scan_iter(match=_redis_root(tmp_path) + "*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def _cluster(tmp_path: Path, name: str) -> Store:
    return RedisStore(session_cluster().url, prefix=f"{_redis_root(tmp_path)}{name}:")


def _cluster_cleanup(tmp_path: Path) -> None:
    cluster = session_cluster()
    for node in cluster.primaries():
        client = node.client()
        try:
            with client.pipeline(transaction=False) as pipe:
                for key in list(client.scan_iter(match=_redis_root(tmp_path) + "*", count=1000)):
                    pipe.unlink(key)  # one key a command: a cluster node refuses keys of several slots
                pipe.execute()
        finally:
            client.close()


def _postgres_schema(tmp_path: Path, name: str) -> str:
    # A schema per store of a test: the name picks one, tmp_path makes them the test's own.
    return "t" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:16] + "_" + name


def _postgres(tmp_path: Path, name: str) -> Store:
    return PostgresStore(session_postgres().url() + f"?schema={_postgres_schema(tmp_path, name)}&pool_max=4")


def _postgres_cleanup(tmp_path: Path) -> None:
    session_postgres().drop_schemas("t" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:16] + "_")


BACKENDS: dict[str, Callable[[Path, str], Store]] = {
    "sqlite": _sqlite,
    "redis": _redis,
    "redis-cluster": _cluster,
    "postgres": _postgres,
}
# Per-backend needs of the `stores` fixture: a fixture to start first, a cleanup after each test.
_SERVER_FIXTURE = {"redis": "redis_server", "redis-cluster": "redis_cluster", "postgres": "postgres_server"}
_CLEANUP: dict[str, Callable[[Path], None]] = {
    "redis": _redis_cleanup,
    "redis-cluster": _cluster_cleanup,
    "postgres": _postgres_cleanup,
}


class Stores:
    """Opens stores of one backend; everything opened is closed when the test ends."""

    def __init__(self, make: Callable[[Path, str], Store], tmp_path: Path) -> None:
        self._make = make
        self._tmp_path = tmp_path
        self.opened: list[Store] = []

    async def open(self, name: str = "main") -> Store:
        store = self._make(self._tmp_path, name)
        await store.open()
        self.opened.append(store)
        return store

    async def reopen(self, store: Store, name: str = "main") -> Store:
        await store.close()
        return await self.open(name)


@pytest.fixture(
    params=[pytest.param(name, marks=[pytest.mark.cluster] if name == "redis-cluster" else []) for name in BACKENDS]
)
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    if request.param in _SERVER_FIXTURE:
        request.getfixturevalue(_SERVER_FIXTURE[request.param])
    factory = Stores(BACKENDS[request.param], tmp_path)
    yield factory
    for store in factory.opened:
        await store.close()
    if request.param in _CLEANUP:
        _CLEANUP[request.param](tmp_path)


@pytest.fixture
async def store(stores: Stores) -> Store:
    return await stores.open()
