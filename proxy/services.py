"""The objects the app wires together, built once in `create_app`'s lifespan and frozen.

Handlers reach them as `request.app.state.ctx`; nothing else is shared between requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .admission import Admission
from .compaction import Compactor
from .config import Caches, Config, Route
from .credentials import Keys
from .history_cache import HistoryCache
from .metrics import Metrics
from .projector import Projector
from .recall.memory import RejectedTool
from .record import Recorder
from .renderings import DEFAULT_TRANSIENT, Transient
from .shadow.runner import Shadows
from .store.base import Store
from .upstream import RoutedUpstream


@dataclass(frozen=True)
class Services:
    config: Config
    keys: Keys
    store: Store
    upstream: RoutedUpstream
    projector: Projector
    compactor: Compactor
    recorder: Recorder
    metrics: Metrics
    history: HistoryCache
    salt: bytes
    """The store's tenant salt: a client key becomes a tenant only as a salted fingerprint."""
    shadows: Shadows
    """Shadow pairs (`proxy/shadow/`): started after answers, drained by the lifespan."""
    admission: Admission
    """Budgets and rate limits (`proxy/admission.py`), and the clock they and key expiry read."""
    recalls_rejected: RejectedTool = field(default_factory=RejectedTool)
    """Routes and models whose upstream rejected the recall tool (in process memory)."""
    config_path: str | None = None
    """The config file the proxy was started with (absolute), for the commands it shows."""

    def __post_init__(self) -> None:
        self.metrics.watch(self.projector.cache_sizes, self.projector.cache_lookups)
        self.metrics.watch(self.history.sizes, self.history.lookups)
        self.history.on_evicted(self.projector.forget)
        self.metrics.watch_compactions(self.compactor.running_jobs)
        self.metrics.watch(self.compactor.shared.sizes, self.compactor.shared.lookups)
        self.metrics.watch_rejected(self.recalls_rejected.pairs)

    def clock(self) -> float:
        return self.admission.now()

    def upstream_key(self, route: Route) -> str | None:
        return self.keys.upstream_key(route)


def history_cache(caches: Caches, transient: Transient = DEFAULT_TRANSIENT) -> HistoryCache:
    """The history cache as the config's `caches:` section bounds it, hashing chains with the
    configured transient-part rule (`Transient.of(config.transient_parts, ...)`)."""
    return HistoryCache(
        max_bytes=int(caches.history_mb * 1024 * 1024),
        per_key=caches.histories_per_first_message,
        bodies_per_credential=caches.bodies_per_credential,
        transient=transient,
    )
