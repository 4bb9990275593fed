"""What the request handlers share: built once in the app's lifespan, passed nowhere else."""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field

from .compaction import Compactor
from .config import Config, ConfigError, Route
from .history_cache import HistoryCache
from .metrics import Metrics
from .projection import Projector
from .store.base import Store
from .upstream.http import UpstreamClient


def resolve_secrets(config: Config, env: dict[str, str] | None = None) -> dict[str, str]:
    """Upstream keys by route name, read from the env vars the config names. Missing ones are a
    start-up error, not a 401 from the upstream at the first request."""
    env = dict(os.environ) if env is None else env
    secrets: dict[str, str] = {}
    problems: list[str] = []
    for index, route in enumerate(config.routes):
        name = route.upstream.api_key_env
        if name is None:
            continue
        value = env.get(name)
        if not value:
            problems.append(f"routes.{index}.upstream.api_key_env: environment variable {name} is not set")
            continue
        secrets[route.name] = value
    if problems:
        raise ConfigError(problems)
    return secrets


class BoundedSet:
    """Remembers the most recent `size` keys; `add` says whether the key was new."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str) -> bool:
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self.size:
            self._keys.popitem(last=False)
        return True


@dataclass
class Services:
    config: Config
    store: Store
    upstream: UpstreamClient
    upstream_keys: dict[str, str]
    admin_token: str | None
    projector: Projector
    compactor: Compactor
    history: HistoryCache = field(default_factory=HistoryCache)
    salt: bytes = b""
    known_blobs: BoundedSet = field(default_factory=BoundedSet)
    metrics: Metrics = field(default_factory=Metrics)
    metrics_token: str | None = None

    def upstream_key(self, route: Route) -> str | None:
        return self.upstream_keys.get(route.name)
