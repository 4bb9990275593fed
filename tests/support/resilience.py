"""Helpers of the measured resilience suite (tests/e2e/test_resilience*.py): the profile (CI size,
or the long one under ``CTXPROXY_LONG=1``), shared stores for several replicas, Prometheus
counters read from ``/metrics``, and direct inspection of what a store holds."""

from __future__ import annotations

import os
import re
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
import redis

LONG = os.environ.get("CTXPROXY_LONG") == "1"


def profile(ci: int, long: int) -> int:
    """``ci`` in the default run, ``long`` under ``CTXPROXY_LONG=1``."""
    return long if LONG else ci


def counter(url: str, name: str, **labels: str) -> float:
    """The sum of a Prometheus counter's samples on ``url``'s ``/metrics`` matching ``labels``."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if not m:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def redis_prefix() -> str:
    return f"resil-{uuid.uuid4().hex[:8]}:"


def sqlite_rows_of(db_path: Path, conversation_id: str, branch_ids: list[str]) -> dict[str, int]:
    """Rows any table still holds for a conversation (or its branches), by table."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        out: dict[str, int] = {}
        for table in ("conversations", "branches", "events", "calls", "checkpoints", "leases"):
            column = "id" if table == "conversations" else "conversation_id"
            n = db.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", (conversation_id,)).fetchone()[0]
            marks = ",".join("?" * len(branch_ids))
            if branch_ids and table in ("branches", "events", "calls", "checkpoints", "leases"):
                column = "id" if table == "branches" else "branch_id"
                n += db.execute(f"SELECT count(*) FROM {table} WHERE {column} IN ({marks})", branch_ids).fetchone()[0]
            if n:
                out[table] = n
        return out
    finally:
        db.close()


def sqlite_files_bytes(db_path: Path) -> bytes:
    """The database file and its WAL (and shared-memory index), as bytes on disk."""
    data = b""
    for suffix in ("", "-wal", "-shm", "-journal"):
        path = Path(f"{db_path}{suffix}")
        if path.exists():
            data += path.read_bytes()
    return data


def redis_keys_of(client: redis.Redis, prefix: str, conversation_id: str, branch_ids: list[str]) -> list[str]:
    """Keys (and identity-index members) under ``prefix`` that still name the conversation or its
    branches."""
    ids = [conversation_id, *branch_ids]
    found: list[str] = []
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        name = key.decode() if isinstance(key, bytes) else key
        if any(i in name for i in ids):
            found.append(name)
            continue
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        # the tenant-wide identity index: a set of conversation ids per chain hash
        if kind == "set" and name.startswith(f"{prefix}hash:") and client.sismember(key, conversation_id):
            found.append(f"{name}[{conversation_id}]")
        elif kind == "zset" and client.zscore(key, conversation_id) is not None and not name.endswith("tombstones"):
            found.append(f"{name}[{conversation_id}]")
    return found


def redis_values_containing(client: redis.Redis, prefix: str, needle: bytes) -> list[str]:
    """Keys under ``prefix`` whose value (any type) contains ``needle``."""
    hits: list[str] = []
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        blob = client.dump(key)
        # DUMP may compress (LZF); read the value itself too
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        parts: list[Any] = [blob or b""]
        if kind == "string":
            parts.append(client.get(key) or b"")
        elif kind == "list":
            parts.extend(client.lrange(key, 0, -1))
        elif kind == "hash":
            parts.extend(client.hgetall(key).values())
        elif kind == "set":
            parts.extend(client.smembers(key))
        elif kind == "zset":
            parts.extend(m for m, _ in client.zrange(key, 0, -1, withscores=True))
        if any(needle in (p if isinstance(p, bytes) else str(p).encode()) for p in parts):
            hits.append(key.decode() if isinstance(key, bytes) else key)
    return hits
