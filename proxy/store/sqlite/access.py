"""Client keys made through the admin API and the counters of budgets and rate limits
(proxy/store/access.py), each write one transaction."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict

from ... import codec
from ..access import ApiKey, Count
from .connection import Db, SqliteConnection


def _key(record: str) -> ApiKey:
    fields = codec.loads(record)
    routes = fields.get("routes")
    fields["routes"] = None if routes is None else tuple(routes)
    return ApiKey(**fields)


class Access(SqliteConnection):
    _next_purge = 0.0
    """when expired counters are deleted next (epoch seconds)"""

    async def save_api_key(self, key: ApiKey) -> bool:
        def insert(db: Db) -> bool:
            cursor = db.execute(
                "INSERT OR IGNORE INTO api_keys (id, digest, record, created_at) VALUES (?, ?, ?, ?)",
                (key.id, key.digest, codec.dumps_str(asdict(key)), key.created_at),
            )
            return cursor.rowcount == 1

        return self._write(insert)

    async def api_key_by_digest(self, digest: str) -> ApiKey | None:
        row = self._read(lambda db: db.execute("SELECT record FROM api_keys WHERE digest = ?", (digest,)).fetchone())
        return None if row is None else _key(row[0])

    async def list_api_keys(self) -> list[ApiKey]:
        rows = self._read(lambda db: db.execute("SELECT record FROM api_keys ORDER BY created_at, id").fetchall())
        return [_key(r[0]) for r in rows]

    async def delete_api_key(self, key_id: str) -> bool:
        return self._write(lambda db: db.execute("DELETE FROM api_keys WHERE id = ?", (key_id,)).rowcount == 1)

    async def add_counts(self, counts: Sequence[Count]) -> list[float]:
        if not counts:
            return []
        now = time.time()
        if all(c.amount == 0 for c in counts):  # a read: no transaction
            return self._read(_read_counts, [c.name for c in counts], now)
        purge = now >= self._next_purge
        if purge:
            self._next_purge = now + PURGE_EVERY
        return self._write(_add_counts, counts, now if purge else None)


PURGE_EVERY = 60.0
"""Seconds between deletions of expired counters (a counter is read as 0 once expired anyway)."""


def _read_counts(db: Db, names: list[str], now: float) -> list[float]:
    marks = ",".join("?" * len(names))
    rows = db.execute(
        f"SELECT name, value FROM counters WHERE name IN ({marks}) AND expires_at >= ?", (*names, now)
    ).fetchall()
    found = {str(name): float(value) for name, value in rows}
    return [found.get(name, 0.0) for name in names]


def _add_counts(db: Db, counts: Sequence[Count], purge_before: float | None) -> list[float]:
    if purge_before is not None:
        db.execute("DELETE FROM counters WHERE expires_at < ?", (purge_before,))  # indexed: the expired ones only
    now = time.time()
    out: list[float] = []
    for count in counts:
        row = db.execute(
            "INSERT INTO counters (name, value, expires_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
            "value = CASE WHEN counters.expires_at < ? THEN excluded.value ELSE counters.value + excluded.value END, "
            "expires_at = MAX(counters.expires_at, excluded.expires_at) RETURNING value",
            (count.name, count.amount, count.expires_at, now),
        ).fetchone()
        out.append(float(row[0]))
    return out
