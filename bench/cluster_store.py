"""`python -m bench.cluster_store`: the Redis store's cost per turn and per conversation, on one
redis-server vs a local Redis Cluster (three primaries, three replicas), with and without WAIT.

One client, sequential, so the figure is the store's own latency (round trips and script time),
not the proxy's: each turn does what a proxy turn does to the store (append the new user message
at the head the previous answer left -- `extend`; the first turn finds the stored prefix and
appends --, read the active checkpoint and the last call, record the call with the answer).
Configurations are interleaved per round. Then memory: `used_memory` summed over the primaries
before and after storing conversations of a given size, per conversation and per stored event.

Writes bench/results/cluster-store-<stamp>.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.procs import free_port
from proxy import identify
from proxy.store import make_store
from proxy.store.base import CallRecord, NewEvent, Position, ResponseTurn, Store
from proxy.store.redis import RedisStore
from tests.support.redis_server import RedisCluster, RedisServer

ROOT = Path(__file__).resolve().parent.parent
TENANT = "t_bench"


def _message(conv: str, i: int, size: int) -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": f"{conv} turn {i}: " + "x" * size}


async def turn_latencies(store: Store, turns: int, size: int) -> list[float]:
    """Per-turn store latency (ms) of one conversation growing `turns` user+assistant pairs."""
    history: list[dict[str, Any]] = []
    conv = await store.create_conversation(TENANT, None)
    head: tuple[Position, str] | None = None  # where the previous answer was stored, its hash
    out = []
    for t in range(turns):
        history.append(_message(conv.id, 2 * t, size))
        started = time.perf_counter()
        hashes = identify.chain(TENANT, history)
        request = NewEvent("user", history[-1], hashes[-1], "request")
        pos = await store.extend(head[0], head[1], [request]) if head is not None else None
        if pos is None:  # the first turn: the lookup
            match = await store.find_longest(hashes, TENANT, None)
            start = match.position if match else Position(conv.id, conv.main_branch_id, 0)
            have = match.count if match else 0
            new = [NewEvent(m["role"], m, h, "request") for m, h in zip(history[have:], hashes[have:], strict=True)]
            pos = await store.append(start, new, None, stamp=False)
        await store.active_checkpoint(pos.branch_id)
        await store.last_call(pos.branch_id, "main")
        answer = _message(conv.id, 2 * t + 1, size)
        call = CallRecord(uuid.uuid4().hex, TENANT, "r", "m", "main", False, time.time(), conv.id, pos.branch_id)
        call.response = answer
        history.append(answer)
        answer_hash = identify.message_hash(hashes[-1], answer)
        where = await store.record_answered(
            call, ResponseTurn(pos, "sys", NewEvent("assistant", answer, answer_hash, "response"))
        )
        head = (where, answer_hash) if isinstance(where, Position) else None
        out.append((time.perf_counter() - started) * 1000)
    return out


def _used(nodes: list[RedisServer], prefix: str) -> dict[int, int]:
    """MEMORY USAGE (exact: SAMPLES 0) summed over the keys under `prefix`, per node."""
    out = {}
    for node in nodes:
        client = node.client()
        try:
            keys = list(client.scan_iter(match=prefix + "*", count=1000))
            out[node.port] = sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)
        finally:
            client.close()
    return out


async def _memory(url: str, nodes: list[RedisServer], convs: int, turns: int, size: int) -> dict[str, float]:
    prefix = f"mem-{uuid.uuid4().hex[:6]}:"
    store = make_store(url + ("/" if "cluster" in url else "") + f"?prefix={prefix}")
    assert isinstance(store, RedisStore)
    await store.open()
    try:
        for _ in range(convs):
            await turn_latencies(store, turns, size)
    finally:
        await store.close()
    per_node = _used(nodes, prefix)
    total, events = sum(per_node.values()), convs * turns * 2
    return {
        "bytes_per_conversation": round(total / convs),
        "bytes_per_event": round(total / events),
        "payload_bytes_per_event": size + 60,
        "share_per_node": [round(v / total, 2) for v in per_node.values()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_store", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--size", type=int, default=2000, help="characters per message")
    args = parser.parse_args(argv)
    single = RedisServer(port=free_port()).start()
    cluster = RedisCluster().start()
    urls = {
        "redis": single.url,
        "cluster": cluster.url + "/",
        "cluster+wait": cluster.url + "/?wait_replicas=1&wait_timeout_ms=200",
    }
    samples: dict[str, list[float]] = {name: [] for name in urls}

    async def run() -> dict[str, Any]:
        for rnd in range(args.rounds):
            for name in list(urls)[rnd % 3 :] + list(urls)[: rnd % 3]:
                url = urls[name]
                joiner = "&" if "?" in url else "?"
                store = make_store(f"{url}{joiner}prefix=b-{uuid.uuid4().hex[:6]}:")
                assert isinstance(store, RedisStore)
                await store.open()
                try:
                    samples[name].extend(await turn_latencies(store, args.turns, args.size))
                finally:
                    await store.close()
                print(
                    f"round {rnd + 1}/{args.rounds} {name:<13} p50 {statistics.median(samples[name]):.2f} ms",
                    flush=True,
                )
        return {
            "redis": await _memory(single.url, [single], 20, args.turns, args.size),
            "cluster": await _memory(cluster.url, cluster.primaries(), 20, args.turns, args.size),
        }

    try:
        memory = asyncio.run(run())
    finally:
        single.stop()
        cluster.stop()
    rows = []
    base = statistics.median(samples["redis"])
    for name, lat in samples.items():
        lat = sorted(lat)
        p50 = statistics.median(lat)
        rows.append(
            {
                "config": name,
                "turns": len(lat),
                "p50_ms": round(p50, 2),
                "p99_ms": round(lat[int(len(lat) * 0.99) - 1], 2),
                "ratio_p50": round(p50 / base, 2),
            }
        )
    print(f"\nstore operations of one proxy turn, one client, {args.size}-char messages, {args.turns} turns\n")
    print("| config | turns | p50 ms | p99 ms | p50 vs one server |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['config']} | {row['turns']} | {row['p50_ms']} | {row['p99_ms']} | {row['ratio_p50']} |")
    print("\n| backend | bytes per conversation | bytes per event | message payload | share per primary |")
    print("|---|---|---|---|---|")
    for name, m in memory.items():
        print(
            f"| {name} | {m['bytes_per_conversation']} | {m['bytes_per_event']} | {m['payload_bytes_per_event']} | "
            f"{m['share_per_node']} |"
        )
    out = ROOT / "bench" / "results" / f"cluster-store-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows, "memory": memory}, indent=2))
    print(f"\nreport: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
