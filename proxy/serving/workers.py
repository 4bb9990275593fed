"""`ctxproxy serve --workers N`: N processes on one listening socket, one store.

uvicorn's supervisor spawns the workers and shares the socket; each worker builds its own app
from the same config file (`app`, the factory it imports). Everything that must be one across
the processes is in the store: SQLite in WAL mode takes writers from several processes (each
write one `BEGIN IMMEDIATE` transaction, waiting up to its busy timeout), Redis is shared by
design, and compaction is single-flight per branch through the store's lease (the same one
that fences separate replicas). What stays per process is only derived from content or
advisory: the history cache, the token-count memo, the calibration of estimates, the metrics
counters (Prometheus scrapes see one worker per scrape).

Before the workers start, the supervisor opens the store once: migrations and the tenant salt
are created by one process, not raced by N.
"""

from __future__ import annotations

import asyncio
import logging
import os

from ..config import Config
from ..config_file import load_config
from ..credentials import resolve_keys
from ..errors import ConfigError
from ..store import make_store
from . import heap
from .gate import Edge, Gate
from .request_head import protocol_class

CONFIG_ENV = "CTXPROXY_WORKER_CONFIG"
LOG_LEVEL_ENV = "CTXPROXY_WORKER_LOG_LEVEL"
FACTORY = "proxy.serving.workers:app"


def prepare(config_path: str, config: Config, log_level: str) -> str:
    """Check that the store can be shared, create its schema and salt once, and tell the
    workers where the config is; returns the app factory for uvicorn."""
    store_url = config.store
    if store_url.removeprefix("sqlite:///") == ":memory:":
        raise ConfigError([f"store {store_url!r}: --workers needs a store file or Redis (memory is per process)"])
    asyncio.run(_open_once(config))
    os.environ[CONFIG_ENV] = os.path.abspath(config_path)
    os.environ[LOG_LEVEL_ENV] = log_level
    return FACTORY


async def _open_once(config: Config) -> None:
    store = make_store(config.store)
    await store.open()
    try:
        await store.tenant_salt()
    finally:
        await store.close()


def app() -> Edge:
    """The app of one worker (called by uvicorn in each spawned process), behind its edge."""
    from .app import create_app

    level = os.environ.get(LOG_LEVEL_ENV, "info").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = load_config(os.environ[CONFIG_ENV])
    resolve_keys(config)
    heap.tune()
    return Edge(create_app(config, config_path=os.environ[CONFIG_ENV]), config.server, Gate())


def __getattr__(name: str) -> type[asyncio.Protocol]:
    """`proxy.serving.workers:WorkerH11` and `:WorkerHttpTools`: a worker's guarded HTTP protocol, with
    the limits of the worker's config file (uvicorn imports it by name in each worker)."""
    kinds = {"WorkerH11": "h11", "WorkerHttpTools": "httptools"}
    if name not in kinds:
        raise AttributeError(name)
    return protocol_class(kinds[name], load_config(os.environ[CONFIG_ENV]).limits)
