"""Client keys made through the admin API and the counters of budgets and rate limits
(proxy/store/access.py), each write one statement: a counter's addition is an upsert, atomic
however many replicas add to it at once."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict

from ... import codec
from ..access import ApiKey, Count
from .connection import Conn, PostgresConnection, count

PURGE_EVERY = 60.0
"""Seconds between deletions of expired counters (a counter is read as 0 once expired anyway)."""

_ADD = (
    "INSERT INTO counters (name, value, expires_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET "
    "value = CASE WHEN counters.expires_at < $4 THEN EXCLUDED.value ELSE counters.value + EXCLUDED.value END, "
    "expires_at = greatest(counters.expires_at, EXCLUDED.expires_at) RETURNING value"
)


def _key(record: str) -> ApiKey:
    fields = codec.loads(record)
    routes = fields.get("routes")
    fields["routes"] = None if routes is None else tuple(routes)
    return ApiKey(**fields)


class Access(PostgresConnection):
    _next_purge = 0.0
    """when expired counters are deleted next (epoch seconds)"""

    async def save_api_key(self, key: ApiKey) -> bool:
        status = await self._write(
            lambda conn: conn.execute(
                "INSERT INTO api_keys (id, digest, record, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                key.id,
                key.digest,
                codec.dumps_str(asdict(key)),
                key.created_at,
            )
        )
        return count(status) == 1

    async def api_key_by_digest(self, digest: str) -> ApiKey | None:
        record = await self._read(lambda conn: conn.fetchval("SELECT record FROM api_keys WHERE digest = $1", digest))
        return None if record is None else _key(record)

    async def list_api_keys(self) -> list[ApiKey]:
        rows = await self._read(lambda conn: conn.fetch("SELECT record FROM api_keys ORDER BY created_at, id"))
        return [_key(r[0]) for r in rows]

    async def delete_api_key(self, key_id: str) -> bool:
        status = await self._write(lambda conn: conn.execute("DELETE FROM api_keys WHERE id = $1", key_id))
        return count(status) == 1

    async def add_counts(self, counts: Sequence[Count]) -> list[float]:
        if not counts:
            return []
        now = time.time()
        if all(c.amount == 0 for c in counts):  # a read
            return await self._read(_read_counts, [c.name for c in counts], now)
        purge = now >= self._next_purge
        if purge:
            self._next_purge = now + PURGE_EVERY
        return await self._write(_add_counts, counts, now, purge)


async def _read_counts(conn: Conn, names: list[str], now: float) -> list[float]:
    rows = await conn.fetch(
        "SELECT name, value FROM counters WHERE name = ANY($1::text[]) AND expires_at >= $2", names, now
    )
    found = {str(name): float(value) for name, value in rows}
    return [found.get(name, 0.0) for name in names]


async def _add_counts(conn: Conn, counts: Sequence[Count], now: float, purge: bool) -> list[float]:
    if purge:
        await conn.execute("DELETE FROM counters WHERE expires_at < $1", now)  # indexed: the expired ones only
    return [float(await conn.fetchval(_ADD, c.name, c.amount, c.expires_at, now)) for c in counts]
