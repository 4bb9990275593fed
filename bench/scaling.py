"""Scaling: proxy CPU per request vs stored events; compaction time with a fixed-latency stub."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.bodies import generated_session, scaling_body
from bench.overhead import Target, run_loadgen
from bench.stats import mean, pct, r


def run_scaling(
    targets: list[Target], sizes: list[int], requests: int, rounds: int, run_dir: Path, log: Any
) -> dict[str, Any]:
    bodies = {}
    for n in sizes:
        path = run_dir / f"scaling-{n}.json"
        path.write_text(json.dumps(scaling_body(n)))
        bodies[n] = path
    acc: dict[tuple[str, int], dict[str, Any]] = {}
    for rnd in range(rounds):
        for n in sizes if rnd % 2 == 0 else sizes[::-1]:
            for t in targets:
                spec = {
                    "host": "127.0.0.1",
                    "port": t.port,
                    "path": "/v1/chat/completions",
                    "base_body": str(bodies[n]),
                    "stream": False,
                    "concurrency": 1,
                    "requests_per_worker": requests,
                    "max_seconds": 60,
                    "key_prefix": f"sk-scale-{run_dir.name}-{rnd}-{n}",
                    "auth_key": t.auth_key,
                }
                assert t.proc is not None
                result, cpu = run_loadgen(spec, run_dir / "spec.json", t.proc.pid, timeout=180)
                a = acc.setdefault((t.name, n), {"lat": [], "cpu": 0.0, "n": 0, "errors": 0, "bytes": None})
                a["lat"] += [s["latency_ms"] for s in result["samples"]]
                a["cpu"] += cpu or 0.0
                a["n"] += len(result["samples"])
                a["errors"] += result["error_count"] + len(result["warmup_errors"])
                a["bytes"] = result["body_bytes"]
                log(
                    f"  round {rnd + 1}/{rounds} {n:>5} events {t.name:<12} cpu "
                    f"{(cpu or 0) * 1000 / max(1, len(result['samples'])):.2f} ms/req"
                )
    rows = []
    for t in targets:
        for n in sizes:
            a = acc[(t.name, n)]
            rows.append(
                {
                    "target": t.name,
                    "stored_events": n,
                    "requests": a["n"],
                    "errors": a["errors"],
                    "body_bytes": a["bytes"],
                    "p50_ms": r(pct(a["lat"], 50)),
                    "cpu_ms_per_request": r(a["cpu"] * 1000 / a["n"]) if a["n"] else None,
                }
            )
    return {"rows": rows}


async def _compaction(db: Path, windows: list[int], turns: int, stub_ms: float, log: Any) -> dict[str, Any]:
    from bench.mock_upstream import SUMMARY_TEXT, USAGE
    from proxy.catalog import ModelCatalog
    from proxy.compaction import Compactor
    from proxy.config import Route, Upstream
    from proxy.history_cache import HistoryCache
    from proxy.ingest import Arrival, ingest
    from proxy.metrics import Metrics
    from proxy.policy_settings import Policy
    from proxy.projector import Asked, Projector
    from proxy.protocols import OPENAI_CHAT
    from proxy.protocols.openai_chat.usage import from_openai_chat
    from proxy.record import Recorder
    from proxy.rolling import CompactionJob
    from proxy.store import make_store
    from proxy.summarizer import SummaryResult

    class StubSummarizer:
        calls = 0

        async def summarize(
            self,
            wire: Any,
            route: Any,
            policy: Any,
            model: str,
            messages: Any,
            auth: Any,
            max_tokens: int | None = None,
        ) -> SummaryResult:
            StubSummarizer.calls += 1
            await asyncio.sleep(stub_ms / 1000)
            return SummaryResult(SUMMARY_TEXT, model, USAGE, from_openai_chat(USAGE), 200)

    store = make_store(f"sqlite:///{db}")
    await store.open()
    projector = Projector(ModelCatalog())
    route = Route(name="bench", upstream=Upstream(base_url="http://127.0.0.1:9/v1"))
    recorder = Recorder(store, Metrics(), projector.catalog, [route])
    compactor = Compactor(store, StubSummarizer(), projector, recorder)  # type: ignore[arg-type]
    model = "gpt-4o"
    out = []
    try:
        for window in windows:
            policy = Policy(context_window=window)
            session = generated_session(turns)
            messages = session["messages"][:-1]
            tenant = f"t_compaction_{window}"
            ingested = await ingest(store, HistoryCache(), OPENAI_CHAT, Arrival(tenant, messages))
            prefix, history = ingested.prefix, ingested.history
            hashes = ingested.hashes
            branch = ingested.identity.branch_id
            counter = projector.counter(model)
            body = {"model": model, "tools": session["tools"]}
            walls, cpus, chunks, failed, events = [], [], [], 0, []
            for index, message in enumerate(history):
                if message.get("role") != "assistant" or index == 0:
                    continue
                checkpoint = await store.active_checkpoint(branch)
                items = projector.items(history[:index], hashes[:index], counter)
                asked = Asked(policy, model, body, prefix, items, branch)
                projection = projector.project_request(asked, checkpoint).projection
                plan = projection.record.compaction
                if plan is None:
                    continue
                job = CompactionJob(
                    tenant=ingested.identity.tenant,
                    conversation_id=ingested.identity.conversation_id,
                    branch_id=branch,
                    route=route,
                    policy=policy,
                    model=model,
                    prefix=prefix,
                    items=items,
                    hashes=hashes[:index],
                    plan=plan,
                    previous=checkpoint,
                    client_auth={},
                    wire=OPENAI_CHAT,
                )
                w0, c0 = time.perf_counter(), time.process_time()
                task = compactor.request(job)
                committed = await task if task is not None else None
                walls.append((time.perf_counter() - w0) * 1000)
                cpus.append((time.process_time() - c0) * 1000)
                chunks.append(len(plan.chunks))
                events.append(plan.through_seq - plan.from_seq + 1)
                if committed is None:
                    failed += 1
            n = len(walls)
            stub_total = sum(chunks) * stub_ms
            out.append(
                {
                    "window": window,
                    "session_turns": turns,
                    "compactions": n,
                    "failed": failed,
                    "summarizer_calls_per_compaction": r(mean(chunks)),
                    "events_per_compaction": r(mean(events), 1),
                    "stub_latency_ms": stub_ms,
                    "wall_ms_p50": r(pct(walls, 50)),
                    "wall_ms_max": r(max(walls) if walls else None),
                    "overhead_ms_mean": r((sum(walls) - stub_total) / n) if n else None,
                    "cpu_ms_mean": r(mean(cpus)),
                    "cpu_ms_max": r(max(cpus) if cpus else None),
                }
            )
            log(
                f"  window {window}: {n} compactions, wall p50 {out[-1]['wall_ms_p50']} ms, "
                f"cpu mean {out[-1]['cpu_ms_mean']} ms"
            )
    finally:
        await store.close()
    return {"rows": out, "note": f"in-process Compactor + SQLite store; summarizer stub answers after {stub_ms:g} ms"}


def run_compaction(db: Path, windows: list[int], turns: int, stub_ms: float, log: Any) -> dict[str, Any]:
    try:
        return asyncio.run(asyncio.wait_for(_compaction(db, windows, turns, stub_ms, log), 300))
    except Exception as exc:  # noqa: BLE001 - internal APIs move; report, do not crash the bench
        return {"rows": [], "error": f"{type(exc).__name__}: {exc}"}
