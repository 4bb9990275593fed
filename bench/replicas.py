"""`python -m bench.replicas`: ctxproxy on SQLite vs on Redis, Redis Cluster and PostgreSQL with 1
and 2 replicas.

Same mock upstream, body and load generator as the overhead phase (`bench.run`): a ~20k-token
agent conversation that grows one turn per request. Configurations, interleaved per round:

* `sqlite`      one proxy process, SQLite store;
* `redis-1`     one proxy process, a private redis-server (started here, stopped by PID);
* `redis-2`     two proxy processes on that redis-server, half of the clients on each (a load
                balancer's round robin, without the balancer's own cost);
* `cluster-1`   one proxy process on a local Redis Cluster (three primaries, three replicas, the
                tests' `RedisCluster`: six redis-server processes, stopped by PID);
* `cluster-2`   two proxy processes on that cluster;
* `postgres-1`  one proxy process on a private PostgreSQL (fsync on, as in production: the
                tests' `PostgresServer`, stopped by PID);
* `postgres-2`  two proxy processes on that PostgreSQL.

Reports requests/s, p50/p99 latency and added p50/p99 over the mock alone. Writes
bench/results/replicas-<stamp>.json and prints a markdown table. `--quick` for a few seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.bodies import agent_body
from bench.overhead import run_loadgen
from bench.procs import Proc, free_port
from bench.stats import pct, r
from tests.support.postgres_server import PostgresServer
from tests.support.redis_server import RedisCluster

ROOT = Path(__file__).resolve().parent.parent


def _proxy(name: str, store: str, mock_port: int, work: Path) -> Proc:
    port = free_port()
    config = work / f"{name}.yaml"
    config.write_text(
        f"store: {json.dumps(store)}\n"
        "routes:\n"
        f"  - {{name: m, match: {{model: '*'}}, upstream: {{base_url: 'http://127.0.0.1:{mock_port}/v1'}}}}\n"
        "policies:\n  default: {context_window: 128000, max_output_tokens: 4096}\n"
    )
    argv = [
        sys.executable,
        "-m",
        "proxy.cli",
        "serve",
        "--config",
        str(config),
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    return Proc(name, argv, port, "/healthz", cwd=str(ROOT), log=work / f"{name}.log")


def _load(
    ports: list[int], clients: int, per_worker: int, seconds: float, body: Path, work: Path, tag: str
) -> tuple[list[float], float]:
    """`clients` workers split over `ports`, all started together; latencies and wall time."""
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one(i: int, port: int) -> None:
        spec = {
            "host": "127.0.0.1",
            "port": port,
            "path": "/v1/chat/completions",
            "base_body": str(body),
            "stream": False,
            "model": "gpt-4o",
            "include_usage": False,
            "concurrency": clients // len(ports),
            "requests_per_worker": per_worker,
            "max_seconds": seconds,
            "key_prefix": f"sk-replicas-{tag}-{i}",
            "timeout": 60,
        }
        result, _ = run_loadgen(spec, work / f"spec-{tag}-{i}.json", None, timeout=seconds + 120)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(ports)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies = [s["latency_ms"] for res in results for s in res["samples"]]
    errors = sum(res["error_count"] + len(res["warmup_errors"]) for res in results)
    if errors:
        raise RuntimeError(f"{tag}: {errors} errors: {[res['errors'][:2] for res in results]}")
    return latencies, max(res["wall_s"] for res in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replicas", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    per_worker = 10 if args.quick else 40
    seconds = 10.0 if args.quick else 30.0
    clients = 16
    if shutil.which("redis-server") is None:
        print("redis-server is not installed (apt-get install redis-server)", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="ctxproxy-replicas-"))
    body = work / "agent-body.json"
    body.write_text(json.dumps(agent_body()))
    mock_port, redis_port = free_port(), free_port()
    mock = Proc(
        "mock",
        [sys.executable, "-m", "bench.mock_upstream", "--port", str(mock_port)],
        mock_port,
        "/health",
        cwd=str(ROOT),
        log=work / "mock.log",
    )
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    cluster = RedisCluster().start()
    postgres = PostgresServer(fsync=True).start()
    procs = [
        _proxy("sqlite", f"sqlite:///{work}/ctxproxy.db", mock_port, work),
        _proxy("redis-a", redis_url, mock_port, work),
        _proxy("redis-b", redis_url, mock_port, work),
        _proxy("cluster-a", cluster.url, mock_port, work),
        _proxy("cluster-b", cluster.url, mock_port, work),
        _proxy("postgres-a", postgres.url(), mock_port, work),
        _proxy("postgres-b", postgres.url(), mock_port, work),
    ]
    samples: dict[str, list[float]] = {}
    walls: dict[str, float] = {}
    counts: dict[str, int] = {}
    try:
        mock.start()
        time.sleep(0.3)  # redis-server binds in milliseconds; the proxies' health checks need it
        for proc in procs:
            proc.start()
        configs = {
            "direct": [mock_port],
            "sqlite": [procs[0].port],
            "redis-1": [procs[1].port],
            "redis-2": [procs[1].port, procs[2].port],
            "cluster-1": [procs[3].port],
            "cluster-2": [procs[3].port, procs[4].port],
            "postgres-1": [procs[5].port],
            "postgres-2": [procs[5].port, procs[6].port],
        }
        for rnd in range(rounds):
            names = list(configs)
            names = names[rnd % len(names) :] + names[: rnd % len(names)]
            for name in names:
                lat, wall = _load(configs[name], clients, per_worker, seconds, body, work, f"{name}-{rnd}")
                samples.setdefault(name, []).extend(lat)
                walls[name] = walls.get(name, 0.0) + wall
                counts[name] = counts.get(name, 0) + len(lat)
                print(
                    f"round {rnd + 1}/{rounds} {name:<8} {len(lat):>5} req  p50 {pct(lat, 50) or 0:.2f} ms", flush=True
                )
    finally:
        for proc in procs:
            proc.stop()
        mock.stop()
        redis.terminate()
        redis.wait(10)
        cluster.stop()
        postgres.close()
    base50, base99 = pct(samples["direct"], 50) or 0.0, pct(samples["direct"], 99) or 0.0
    rows = []
    for name in ("direct", "sqlite", "redis-1", "redis-2", "cluster-1", "cluster-2", "postgres-1", "postgres-2"):
        lat = samples[name]
        p50, p99 = pct(lat, 50) or 0.0, pct(lat, 99) or 0.0
        rows.append(
            {
                "config": name,
                "requests": counts[name],
                "rps": r(counts[name] / walls[name], 1),
                "p50_ms": r(p50),
                "p99_ms": r(p99),
                "added_p50_ms": r(p50 - base50),
                "added_p99_ms": r(p99 - base99),
            }
        )
    print(f"\n{clients} clients, non-stream, 20k-token agent body growing one turn per request, {rounds} rounds\n")
    print("| config | requests | req/s | p50 ms | p99 ms | added p50 | added p99 |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['config']} | {row['requests']} | {row['rps']} | {row['p50_ms']} | {row['p99_ms']} | "
            f"{row['added_p50_ms']} | {row['added_p99_ms']} |"
        )
    out = ROOT / "bench" / "results" / f"replicas-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"clients": clients, "rounds": rounds, "rows": rows}, indent=2))
    print(f"\nreport: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
