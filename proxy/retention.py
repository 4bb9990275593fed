"""Retention: delete records older than the configured ages, in a background task of the app.

Calls and retired (superseded / failed) checkpoints are purged by time. Old conversations go
whole, through `Store.delete_conversation`, so nothing they own is orphaned and the tombstone
fences late writes exactly as an admin delete does. Any replica may run it: every step is
idempotent, and two replicas purging at once only repeat each other's deletes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from .config import Retention
from .errors import StoreError
from .store.base import Store

log = logging.getLogger("ctxproxy.retention")

DAY = 86400.0
BATCH = 500


@dataclass
class Purged:
    calls: int = 0
    checkpoints: int = 0
    conversations: int = 0


async def purge_once(store: Store, retention: Retention, now: float | None = None) -> Purged:
    now = time.time() if now is None else now
    purged = Purged()
    if retention.calls_days is not None:
        purged.calls = await store.purge_calls(now - retention.calls_days * DAY)
    if retention.checkpoints_days is not None:
        purged.checkpoints = await store.purge_checkpoints(now - retention.checkpoints_days * DAY)
    if retention.events_days is not None:
        before = now - retention.events_days * DAY
        while True:
            ids = await store.stale_conversations(before, BATCH)
            for conversation_id in ids:
                if await store.delete_conversation(conversation_id):
                    purged.conversations += 1
            if len(ids) < BATCH:
                break
    return purged


def enabled(retention: Retention) -> bool:
    return any(d is not None for d in (retention.events_days, retention.checkpoints_days, retention.calls_days))


async def run_forever(store: Store, retention: Retention) -> None:
    """The lifespan's task: purge now, then every `interval_seconds`; a store failure waits for
    the next round."""
    while True:
        try:
            purged = await purge_once(store, retention)
            if purged.calls or purged.checkpoints or purged.conversations:
                log.info(
                    "retention purged %d calls, %d checkpoints, %d conversations",
                    purged.calls,
                    purged.checkpoints,
                    purged.conversations,
                )
        except StoreError as exc:
            log.error("retention pass failed: %s", exc)
        await asyncio.sleep(retention.interval_seconds)
