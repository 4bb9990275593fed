"""The compaction lease in `Compactor`: a branch leased by another replica is skipped; a job holds
(and renews) the lease while it runs, passes its fencing token on, and releases it after."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from proxy.catalog import ModelCatalog
from proxy.compaction import Compactor
from proxy.errors import StoreError
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


class _FlakyStore(SqliteStore):
    """A store whose lease fails `outages` times, as while PostgreSQL or Redis restarts."""

    outages = 0

    async def acquire_lease(self, branch_id: str, owner: str, ttl: float) -> int | None:
        if self.outages:
            self.outages -= 1
            raise StoreError("connection refused")
        return await super().acquire_lease(branch_id, owner, ttl)


async def test_a_store_failure_retries_after_a_short_fixed_delay(tmp_path: Path) -> None:
    """A store outage is not the history's fault: the branch is not given the 30 s - 10 min
    back-off of a summary that failed, and repeated outages do not escalate it."""
    store = _FlakyStore(str(tmp_path / "flaky.db"))
    await store.open()
    try:
        branch = (await store.create_conversation("t", None)).main_branch_id
        compactor = _Recording(store, hold=0.0)
        compactor.store_retry = 0.2
        job: Any = SimpleNamespace(branch_id=branch)
        for _ in range(3):
            store.outages = 1
            assert await compactor._run(job) is None
            assert compactor.request(job) is None  # backing off
            await asyncio.sleep(0.25)
        task = compactor.request(job)
        assert task is not None
        await task
        assert len(compactor.tokens) == 1  # the job ran once the store was back
        assert compactor.failed == 3
    finally:
        await store.close()


async def test_a_failed_summary_still_backs_off_for_half_a_minute(tmp_path: Path) -> None:
    store, branch = await _store(tmp_path)
    try:
        compactor = _Recording(store, hold=0.0)
        compactor.store_retry = 0.2
        job: Any = SimpleNamespace(branch_id=branch)
        compactor._fail(branch)
        await asyncio.sleep(0.25)
        assert compactor.request(job) is None
        until, failures = compactor._backoff[branch]
        assert failures == 1 and until - time.monotonic() > 25
        compactor._fail(branch, store=True)  # a store outage later keeps the count of summary failures
        assert compactor._backoff[branch][1] == 1
    finally:
        await store.close()
