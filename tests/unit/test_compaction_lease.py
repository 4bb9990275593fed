"""The compaction lease in `Compactor`: a branch leased by another replica is skipped; a job holds
(and renews) the lease while it runs, passes its fencing token on, and releases it after."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from proxy.catalog import ModelCatalog
from proxy.compaction import Compactor
from proxy.metrics import Metrics
from proxy.record import Recorder
from proxy.store.base import StoredCheckpoint
from proxy.store.sqlite import SqliteStore


async def _store(tmp_path: Path) -> tuple[SqliteStore, str]:
    store = SqliteStore(str(tmp_path / "lease.db"))
    await store.open()
    conv = await store.create_conversation("t", None)
    return store, conv.main_branch_id


async def test_a_branch_leased_elsewhere_is_skipped(tmp_path: Path) -> None:
    store, branch = await _store(tmp_path)
    try:
        assert await store.acquire_lease(branch, "other-replica", 30) is not None
        metrics = Metrics()
        compactor = Compactor(store, None, None, Recorder(store, metrics, ModelCatalog({}), []))  # type: ignore[arg-type]
        job: Any = SimpleNamespace(branch_id=branch)
        assert await compactor._run(job) is None
        assert metrics.compactions.values[("skipped",)] == 1
        assert compactor.failed == 0
    finally:
        await store.close()


class _Recording(Compactor):
    def __init__(self, store: SqliteStore, hold: float) -> None:
        super().__init__(store, None, None, Recorder(store, Metrics(), ModelCatalog({}), []))  # type: ignore[arg-type]
        self.hold = hold
        self.tokens: list[int] = []
        self.held_by_us: list[bool] = []

    async def _compact(self, job: Any, token: int) -> StoredCheckpoint | None:
        self.tokens.append(token)
        await asyncio.sleep(self.hold)
        # Renewed meanwhile: still ours after more than one TTL.
        self.held_by_us.append(await self.store.acquire_lease(job.branch_id, "other-replica", 30) is None)
        return None


async def test_the_lease_is_held_renewed_and_released(tmp_path: Path) -> None:
    store, branch = await _store(tmp_path)
    try:
        compactor = _Recording(store, hold=0.5)
        compactor.lease_ttl = 0.2
        job: Any = SimpleNamespace(branch_id=branch)
        await compactor._run(job)
        assert compactor.held_by_us == [True]
        assert len(compactor.tokens) == 1
        # Released: another replica gets it at once, with a higher token.
        other = await store.acquire_lease(branch, "other-replica", 30)
        assert other is not None and other > compactor.tokens[0]
    finally:
        await store.close()
