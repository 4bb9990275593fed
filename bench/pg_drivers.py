"""`python -m bench.pg_drivers`: asyncpg against psycopg 3 on the PostgreSQL store's hot path, in
one run, as ratios to asyncpg.

The two statements shapes a proxy turn puts on PostgreSQL, on a private server
(tests/support/postgres_server.py) and one schema per driver:
- turn: one transaction that locks the conversation row, inserts an event and moves the branch
  head (what `append` and `record_answered` do), then reads the event back by its chain hash
  (`find_longest`'s probe);
- concurrent: the same turn from 32 tasks over a pool of 4 connections (a worker under load).

Each driver uses its pool and its prepared statements (asyncpg prepares every statement and
caches it per connection; psycopg 3 prepares a statement after its `prepare_threshold` uses).
Rounds interleave the drivers; the figure is the median turns per second over rounds, and the
table gives each driver's ratio to asyncpg of the same round.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg
import psycopg_pool

from tests.support.postgres_server import PostgresServer

SCHEMA = """
    CREATE TABLE conversations (id TEXT PRIMARY KEY, updated_at DOUBLE PRECISION NOT NULL);
    CREATE TABLE branches (id TEXT PRIMARY KEY, head_seq BIGINT NOT NULL);
    CREATE TABLE events (branch_id TEXT, seq BIGINT, chain_hash TEXT NOT NULL, message TEXT NOT NULL,
        PRIMARY KEY (branch_id, seq));
    CREATE INDEX events_hash ON events (chain_hash);
"""
TURNS = 400
ROUNDS = 5
TASKS, POOL = 32, 4
MESSAGE = '{"role": "tool", "content": "' + "x" * 600 + '"}'

Turn = Callable[[int, int], Awaitable[None]]


async def _asyncpg(url: str, schema: str, size: int) -> tuple[Turn, Callable[[], Awaitable[None]]]:
    pool = await asyncpg.create_pool(url, min_size=size, max_size=size, server_settings={"search_path": schema})

    async def turn(conv: int, seq: int) -> None:
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("UPDATE conversations SET updated_at = $1 WHERE id = $2", time.time(), f"c{conv}")
            await conn.execute(
                "INSERT INTO events (branch_id, seq, chain_hash, message) VALUES ($1, $2, $3, $4)",
                f"b{conv}",
                seq,
                f"h{conv}.{seq}",
                MESSAGE,
            )
            await conn.execute("UPDATE branches SET head_seq = $1 WHERE id = $2", seq, f"b{conv}")
        async with pool.acquire() as conn:
            await conn.fetchrow("SELECT branch_id, seq FROM events WHERE chain_hash = $1", f"h{conv}.{seq}")

    return turn, pool.close


async def _psycopg(url: str, schema: str, size: int) -> tuple[Turn, Callable[[], Awaitable[None]]]:
    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        conn.prepare_threshold = 0
        await conn.execute(f"SET search_path = {schema}")
        await conn.commit()

    pool = psycopg_pool.AsyncConnectionPool(url, min_size=size, max_size=size, configure=configure, open=False)
    await pool.open(wait=True)

    async def turn(conv: int, seq: int) -> None:
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute("UPDATE conversations SET updated_at = %s WHERE id = %s", (time.time(), f"c{conv}"))
                await conn.execute(
                    "INSERT INTO events (branch_id, seq, chain_hash, message) VALUES (%s, %s, %s, %s)",
                    (f"b{conv}", seq, f"h{conv}.{seq}", MESSAGE),
                )
                await conn.execute("UPDATE branches SET head_seq = %s WHERE id = %s", (seq, f"b{conv}"))
            cur = await conn.execute("SELECT branch_id, seq FROM events WHERE chain_hash = %s", (f"h{conv}.{seq}",))
            await cur.fetchone()

    return turn, pool.close


DRIVERS: dict[str, Callable[[str, str, int], Awaitable[tuple[Turn, Callable[[], Awaitable[None]]]]]] = {
    "asyncpg": _asyncpg,
    "psycopg": _psycopg,
}


async def _prepare(url: str, schema: str, conversations: int) -> None:
    conn = await asyncpg.connect(url)
    await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path = {schema}")
    await conn.execute(SCHEMA)
    for c in range(conversations):
        await conn.execute("INSERT INTO conversations VALUES ($1, 0)", f"c{c}")
        await conn.execute("INSERT INTO branches VALUES ($1, 0)", f"b{c}")
    await conn.close()


async def _rate(url: str, driver: str, concurrent: bool, round_: int) -> float:
    schema = f"bench_{driver}_{int(concurrent)}_{round_}"
    await _prepare(url, schema, TASKS)
    turn, close = await DRIVERS[driver](url, schema, POOL if concurrent else 1)
    try:
        start = time.perf_counter()
        if concurrent:
            per_task = TURNS // TASKS

            async def task(conv: int) -> None:
                for seq in range(1, per_task + 1):
                    await turn(conv, seq)

            await asyncio.gather(*(task(c) for c in range(TASKS)))
            done = per_task * TASKS
        else:
            for seq in range(1, TURNS + 1):
                await turn(0, seq)
            done = TURNS
        return done / (time.perf_counter() - start)
    finally:
        await close()


async def run(url: str) -> dict[str, dict[str, list[float]]]:
    rates: dict[str, dict[str, list[float]]] = {shape: {d: [] for d in DRIVERS} for shape in ("turn", "concurrent")}
    for round_ in range(ROUNDS):
        for shape, rate in rates.items():
            for driver in DRIVERS:
                rate[driver].append(await _rate(url, driver, shape == "concurrent", round_))
    return rates


def main() -> int:
    server = PostgresServer().start()
    try:
        rates = asyncio.run(run(server.url()))
    finally:
        server.close()
    print("| shape | driver | turns/s (median) | ratio to asyncpg (median of rounds) |")
    print("|---|---|---|---|")
    for shape, by_driver in rates.items():
        for driver, values in by_driver.items():
            ratios = [v / base for v, base in zip(values, by_driver["asyncpg"], strict=True)]
            print(f"| {shape} | {driver} | {statistics.median(values):.0f} | {statistics.median(ratios):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
