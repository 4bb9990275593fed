"""Retention (`proxy/retention.py`): what one pass deletes for each configured age."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from proxy import identify
from proxy.config import Retention
from proxy.config_file import parse_config
from proxy.errors import ConfigError
from proxy.retention import DAY, enabled, purge_once
from proxy.store.base import CallRecord, CheckpointCandidate, NewEvent, Position
from proxy.store.sqlite import SqliteStore


def _call(conv_id: str, branch_id: str, call_id: str, started_at: float) -> CallRecord:
    return CallRecord(
        id=call_id,
        tenant="t",
        route="main",
        model="m",
        purpose="main",
        stream=False,
        started_at=started_at,
        conversation_id=conv_id,
        branch_id=branch_id,
        status="complete",
    )


async def test_purge_once(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "r.db"))
    await store.open()
    try:
        now = time.time()
        conv = await store.create_conversation("t", None)
        history = [
            {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"},
        ]
        hashes = identify.chain("t", history)
        await store.append(
            Position(conv.id, conv.main_branch_id, 0),
            [NewEvent(m["role"], m, h, "request") for m, h in zip(history, hashes, strict=True)],
            None,
        )
        await store.record_call(_call(conv.id, conv.main_branch_id, "old", now - 10 * DAY))
        await store.record_call(_call(conv.id, conv.main_branch_id, "new", now - 1 * DAY))
        for parent, through in ((0, 1), (1, 2)):
            await store.commit_checkpoint(
                CheckpointCandidate(
                    conv.id, conv.main_branch_id, parent, 1, through, hashes[through - 1], "s", 1, None, 1
                )
            )

        # Nothing configured: nothing deleted.
        assert not enabled(Retention())
        purged = await purge_once(store, Retention(), now)
        assert (purged.calls, purged.checkpoints, purged.conversations) == (0, 0, 0)

        retention = Retention(calls_days=5, checkpoints_days=1, events_days=30)
        assert enabled(retention)
        purged = await purge_once(store, retention, now + 2 * DAY)
        assert (purged.calls, purged.checkpoints, purged.conversations) == (1, 1, 0)
        assert [c.id for c in await store.list_calls(conv.id, 10, 0)] == ["new"]
        assert [c.status for c in await store.list_checkpoints(conv.id)] == ["active"]

        # A month without activity: the whole conversation goes, through delete_conversation.
        purged = await purge_once(store, retention, now + 31 * DAY)
        assert purged.conversations == 1
        assert await store.get_conversation(conv.id) is None
        assert await store.list_calls(conv.id, 10, 0) == []
        assert await store.list_checkpoints(conv.id) == []
    finally:
        await store.close()


def test_retention_config() -> None:
    base = {"routes": [{"name": "r", "upstream": {"base_url": "http://127.0.0.1:1/v1"}}]}
    config = parse_config(base)
    assert config.retention == Retention()
    assert config.retention.interval_seconds == 3600
    config = parse_config({**base, "retention": {"events_days": 90, "calls_days": 30, "interval_seconds": 60}})
    assert (config.retention.events_days, config.retention.checkpoints_days, config.retention.calls_days) == (
        90,
        None,
        30,
    )
    with pytest.raises(ConfigError):
        parse_config({**base, "retention": {"events_days": 0}})
    with pytest.raises(ConfigError):
        parse_config({**base, "retention": {"forever": True}})
    assert parse_config(base).policies["default"].store_failure == "fail"
    with pytest.raises(ConfigError):
        parse_config({**base, "policies": {"default": {"store_failure": "ignore"}}})
