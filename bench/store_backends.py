"""`python -m bench.store_backends`: the store work of one proxy turn on every backend, in one run.

One client, sequential, so the figure is the store's own latency per turn (round trips, locks,
commits), not the proxy's: each turn does what a proxy turn does to the store
(`bench.cluster_store.turn_latencies`: extend at the remembered head -- the first turn looks the
history up and appends --, read the active checkpoint and the last call, record the call with
the answer). Backends, interleaved per round, each a fresh store:

* `sqlite`           a file in a temp directory (WAL, synchronous=NORMAL: the default);
* `redis`            one private redis-server (no persistence);
* `cluster`          a local Redis Cluster, three primaries and three replicas;
* `postgres`         a private PostgreSQL with fsync on, as a production server runs: every
                     commit flushed to disk before it is acknowledged;
* `postgres-async`   the same server, `synchronous_commit=off` in the URL (a session setting):
                     commits acknowledged before their flush, SQLite NORMAL's and Redis's window.

Prints p50/p99 per turn and each backend's p50 as a ratio to SQLite's of the same run; writes
bench/results/store-backends-<stamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.cluster_store import turn_latencies
from proxy.store import make_store
from tests.support.postgres_server import PostgresServer
from tests.support.redis_server import RedisCluster, RedisServer

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store_backends", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--size", type=int, default=2000, help="characters per message")
    parser.add_argument("--no-cluster", action="store_true", help="skip the six-node Redis Cluster")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ctxproxy-store-backends-"))
    single = RedisServer().start()
    cluster = None if args.no_cluster else RedisCluster().start()
    postgres = PostgresServer(fsync=True).start()

    def url(name: str, tag: str) -> str:
        if name == "sqlite":
            return f"sqlite:///{work}/{tag}.db"
        if name == "redis":
            return f"{single.url}?prefix={tag}:"
        if name == "cluster":
            assert cluster is not None
            return f"{cluster.url}/?prefix={tag}:"
        extra = "&synchronous_commit=off" if name == "postgres-async" else ""
        return postgres.url() + f"?schema={tag}{extra}"

    names = ["sqlite", "redis", *([] if cluster is None else ["cluster"]), "postgres", "postgres-async"]
    samples: dict[str, list[float]] = {name: [] for name in names}

    async def run() -> None:
        for rnd in range(args.rounds):
            for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
                store = make_store(url(name, f"b{uuid.uuid4().hex[:8]}"))
                await store.open()
                try:
                    samples[name].extend(await turn_latencies(store, args.turns, args.size))
                finally:
                    await store.close()
                print(f"round {rnd + 1}/{args.rounds} {name:<15} p50 {statistics.median(samples[name]):.2f} ms")

    try:
        asyncio.run(run())
    finally:
        single.stop()
        if cluster is not None:
            cluster.stop()
        postgres.close()
    base = statistics.median(samples["sqlite"])
    rows: list[dict[str, Any]] = []
    for name, lat in samples.items():
        lat = sorted(lat)
        p50 = statistics.median(lat)
        p99 = lat[max(0, int(len(lat) * 0.99) - 1)]
        rows.append({"backend": name, "turns": len(lat), "p50_ms": round(p50, 2), "p99_ms": round(p99, 2)})
        rows[-1]["p50_vs_sqlite"] = round(p50 / base, 2)
    print(f"\nstore work of one proxy turn, one client, {args.size}-char messages, {args.turns} turns a store\n")
    print("| backend | turns | p50 ms | p99 ms | p50 vs sqlite |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['backend']} | {row['turns']} | {row['p50_ms']} | {row['p99_ms']} | {row['p50_vs_sqlite']} |")
    out = ROOT / "bench" / "results" / f"store-backends-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    print(f"\nreport: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
