"""Overhead: the same load against direct / pass-through / ctxproxy / LiteLLM, interleaved."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs import Proc, cpu_seconds, rss_mb
from bench.stats import mean, pct, r

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Target:
    name: str
    port: int
    proc: Proc | None  # None: the mock itself (direct)
    auth_key: str | None = None


@dataclass
class Cell:
    name: str
    stream: bool
    concurrency: int
    requests_per_worker: int
    model: str = "gpt-4o"
    include_usage: bool = False


@dataclass
class Acc:
    samples: list[dict[str, Any]] = field(default_factory=list)
    wall: float = 0.0
    cpu: float = 0.0
    cpu_known: bool = True
    errors: int = 0
    error_examples: list[str] = field(default_factory=list)
    rounds_rps: list[float] = field(default_factory=list)


def run_loadgen(
    spec: dict[str, Any],
    spec_path: Path,
    pid: int | None,
    timeout: float,
    on_ready: Any = None,
    module: str = "bench.loadgen",
) -> tuple[dict[str, Any], float | None]:
    """Start the load generator (`module`: `bench.loadgen`, or another that speaks its protocol),
    wait for READY (bodies built, warm-up done), read the target's CPU, say GO, read the result,
    read CPU again. Bounded by `timeout`; the generator is stopped by PID."""
    spec_path.write_text(json.dumps(spec))
    proc = subprocess.Popen(
        [sys.executable, "-m", module, str(spec_path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        if line.strip() != "READY":
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"load generator failed before READY: {line!r} {err[-2000:]}")
        if on_ready is not None:
            on_ready()
        cpu0 = cpu_seconds(pid) if pid else None
        proc.stdin.write("GO\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        cpu1 = cpu_seconds(pid) if pid else None
        if not line.startswith("{"):
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"load generator failed: {line!r} {err[-2000:]}")
        result: dict[str, Any] = json.loads(line)
        proc.wait(10)
        return result, (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def run_overhead(
    targets: list[Target], cells: list[Cell], rounds: int, run_dir: Path, base_body: Path, max_seconds: float, log: Any
) -> dict[str, Any]:
    acc: dict[tuple[str, str], Acc] = {}
    rss: dict[str, float] = {}
    seq = 0
    for rnd in range(rounds):
        order = targets[rnd % len(targets) :] + targets[: rnd % len(targets)]  # rotate: no config always first
        for cell in cells:
            for t in order:
                seq += 1
                spec = {
                    "host": "127.0.0.1",
                    "port": t.port,
                    "path": "/v1/chat/completions",
                    "base_body": str(base_body),
                    "stream": cell.stream,
                    "model": cell.model,
                    "include_usage": cell.include_usage,
                    "concurrency": cell.concurrency,
                    "requests_per_worker": cell.requests_per_worker,
                    "max_seconds": max_seconds,
                    "key_prefix": f"sk-bench-{run_dir.name}-{seq}",
                    "auth_key": t.auth_key,
                    "timeout": 60,
                }
                pid = t.proc.pid if t.proc else None
                result, cpu = run_loadgen(spec, run_dir / "spec.json", pid, timeout=max_seconds + 120)
                a = acc.setdefault((t.name, cell.name), Acc())
                a.samples += result["samples"]
                a.wall += result["wall_s"]
                a.errors += result["error_count"] + len(result["warmup_errors"])
                a.error_examples += (result["errors"] + result["warmup_errors"])[:2]
                a.rounds_rps.append(len(result["samples"]) / result["wall_s"] if result["wall_s"] else 0.0)
                if cpu is None:
                    a.cpu_known = False
                else:
                    a.cpu += cpu
                if t.proc:
                    rss[t.name] = max(rss.get(t.name, 0.0), rss_mb(t.proc.pid))
                p50 = pct([s["latency_ms"] for s in result["samples"]], 50) or 0
                log(
                    f"  round {rnd + 1}/{rounds} {cell.name:<22} {t.name:<12} {len(result['samples']):>4} ok "
                    f"{result['error_count']} err  p50 {p50:.2f} ms"
                )
    return summarize(acc, rss, targets, cells)


def summarize(
    acc: dict[tuple[str, str], Acc], rss: dict[str, float], targets: list[Target], cells: list[Cell]
) -> dict[str, Any]:
    rows = []
    for cell in cells:
        direct = acc.get(("direct", cell.name))
        d_lat = [s["latency_ms"] for s in direct.samples] if direct else []
        d_stream = mean([s["stream_ms"] for s in direct.samples]) if direct else None
        for t in targets:
            a = acc.get((t.name, cell.name))
            if a is None:
                continue
            lat = [s["latency_ms"] for s in a.samples]
            ttft = [s["ttft_ms"] for s in a.samples if s["ttft_ms"] is not None]
            n = len(a.samples)
            row: dict[str, Any] = {
                "target": t.name,
                "cell": cell.name,
                "stream": cell.stream,
                "concurrency": cell.concurrency,
                "requests": n,
                "errors": a.errors,
                "error_examples": a.error_examples[:3],
                "p50_ms": r(pct(lat, 50)),
                "p99_ms": r(pct(lat, 99)),
                "added_p50_ms": r(pct(lat, 50) - pct(d_lat, 50)) if lat and d_lat else None,  # type: ignore[operator]
                "added_p99_ms": r(pct(lat, 99) - pct(d_lat, 99)) if lat and d_lat else None,  # type: ignore[operator]
                "ttft_p50_ms": r(pct(ttft, 50)) if cell.stream else None,
                "ttft_p99_ms": r(pct(ttft, 99)) if cell.stream else None,
                "throughput_rps": r(n / a.wall if a.wall else None, 1),
                "cpu_ms_per_request": r(a.cpu * 1000 / n) if (t.proc and a.cpu_known and n) else None,
                "rss_mb": r(rss.get(t.name), 1) if t.proc else None,
            }
            if cell.stream:
                row["events_per_stream"] = r(mean([s["events"] for s in a.samples]), 1)
                row["stream_ms_mean"] = r(mean([s["stream_ms"] for s in a.samples]))
                row["max_gap_ms_p99"] = r(pct([s["max_gap_ms"] for s in a.samples], 99))
                sm = mean([s["stream_ms"] for s in a.samples])
                ev = mean([s["events"] for s in a.samples]) or 0
                if sm is not None and d_stream is not None and ev > 1 and "paced" in cell.name:
                    row["added_ms_per_chunk"] = r((sm - d_stream) / (ev - 1), 3)
            rows.append(row)
    return {"rows": rows}
