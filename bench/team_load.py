"""A realistic team load: many agent sessions in flight, streamed at a model's pace, on each store.

`sessions` coding agents (`bench.team_client`), each a tool loop on its own key, run `turns`
requests at once against one ctxproxy (one worker) whose upstream is `bench.team_upstream`: time
to first token 1-3 s, 30-80 tokens/s, a thought and a `bash` call per answer, 5% of requests
answered with a recall call (so the proxy detours), summaries taking as long as a model writes
300 tokens. The route's window is `WINDOW` tokens (`MAX_OUTPUT` reserved for the answer); every
fifth session opens a few turns short of it (`opening_pairs`), so ~20% of sessions cross their
trigger during the run -- the first request that no longer fits waits for its summary -- while
the others open small enough never to. The proxy is configured for the load
(`CAP_PER_SESSION`, `REDIS_CONNECTIONS_PER_SESSION`): at the defaults part of it is refused.

Measured per store backend (a fresh proxy and store each): proxy CPU per request (/proc, the
process tree, over the timed requests); RSS (peak, sampled every second, and at the end); the
event loop's lag p99 (`ctxproxy_event_loop_lag_seconds`, what the timed run added, interpolated
within buckets as Prometheus' histogram_quantile does); added time to first token = the client's
time to its first token minus the upstream's own (`ttft_of`, from the model's log: a detour's
recall round counts as upstream time); the requests that waited for a summary (the proxy's
`ctxproxy_summary_wait_seconds`, and per request from the logs: a summary of its session that
started after it was sent and ended before the upstream got it); errors.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.bodies import generated_session
from bench.overhead import run_loadgen
from bench.procs import Proc, free_port, rss_mb, runqueue_wait_s
from bench.stats import pct, r
from bench.team_client import opening
from bench.workers import ctxproxy_proc
from proxy.token_counter import TokenCounter

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 32_000
MAX_OUTPUT = 4_096
KEEP_RECENT = 8_000
"""The default (20,000) is sized for 128k windows: in 32k it leaves a compaction little to summarize."""
RESULT_CHARS = 2_000
CAP_PER_SESSION = 2
"""`server.max_concurrent_requests` per session: the cap counts a call until the app returns,
after its answer is recorded, so under load a session's next request can arrive before its last ends"""
REDIS_CONNECTIONS_PER_SESSION = 2
"""the Redis URL's `max_connections` per session: redis-py's default pool (100) refuses, not
queues, the store calls of more requests at once (`MaxConnectionsError`)"""
TURN_TOKENS = 700
"""What a turn of the run adds at most, generously: a thought and call, a cut tool result."""


def opening_pairs(sessions: int, turns: int, seed: int) -> list[int]:
    """Turns each session opens with: every fifth a few turns short of the window, the others
    small enough to stay under it through `turns` more. Counted as the proxy estimates before it
    has learned the model's count (the warm-up request must fit); the model counts a quarter of
    the body's bytes (`bench.team_upstream`), some 7% less here, so a crossing session crosses a
    few turns later than its opening alone says."""
    counter = TokenCounter.for_model("gpt-4o")
    results = [str(m["content"]) for m in generated_session(64, 1000)["messages"] if m["role"] == "tool"]
    budget = WINDOW - MAX_OUTPUT

    def tokens(s: int, pairs: int) -> int:
        messages, tools = opening(s, pairs, results, RESULT_CHARS)
        return sum(counter(m) for m in messages) + counter.count_tools(tools)

    def most(s: int, limit: int) -> int:
        pairs = 0
        while tokens(s, pairs + 1) <= limit:
            pairs += 1
        return pairs

    rng = random.Random(f"{seed}:openings")
    out = []
    for s in range(sessions):
        if s % 5 == 0:  # crosses after a few turns
            out.append(most(s, budget - rng.randint(4, 6) * TURN_TOKENS))
        else:
            out.append(rng.randint(2, max(2, most(s, int(budget * 0.85) - turns * TURN_TOKENS))))
    return out


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as resp:
        data: bytes = resp.read()
        return data


def metrics_of(port: int) -> dict[str, float]:
    """/metrics as {series: value}."""
    out = {}
    for line in _get(f"http://127.0.0.1:{port}/metrics").decode().splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def _sum(delta: dict[str, float], name: str, *labels: str) -> float:
    return sum(v for k, v in delta.items() if k.partition("{")[0] == name and all(x in k for x in labels))


def lag_p99(delta: dict[str, float]) -> float | None:
    """p99 of the lag histogram's observations in `delta`, seconds, interpolated within buckets."""
    name = "ctxproxy_event_loop_lag_seconds_bucket"
    buckets = sorted((float(k.split('le="')[1].split('"')[0]), v) for k, v in delta.items() if k.startswith(name + "{"))
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    low, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= 0.99 * total:
            if bound == float("inf"):
                return low
            return low + (bound - low) * (0.99 * total - below) / max(count - below, 1e-9)
        low, below = bound, count
    return None


def ttft_of(rounds: list[dict[str, Any]]) -> float:
    """The upstream's own time to the first token of what the client got: whole recall rounds,
    then the last round's time to its first token."""
    rounds = sorted(rounds, key=lambda e: e["arrival"])
    return sum(e["end"] - e["arrival"] for e in rounds[:-1]) + rounds[-1]["first"] - rounds[-1]["arrival"]


def _ms(values: list[float], q: float) -> float | None:
    return r(pct([v * 1000 for v in values], q))


def analyse(samples: list[dict[str, Any]], log: list[dict[str, Any]], go: float) -> dict[str, Any]:
    """Per-request figures from the client's samples and the model's log (one clock)."""
    mains: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in log:
        if e["kind"] == "main":
            mains.setdefault((e["s"], e["t"]), []).append(e)
    summaries = [e for e in log if e["kind"] == "summary"]
    groups: dict[str, list[float]] = {"all": [], "plain": [], "detour": [], "waited": []}
    before: list[float] = []
    for sample in samples:
        rounds = mains.get((sample["s"], sample["t"]))
        if "error" in sample or "first" not in sample or not rounds:
            continue
        arrival = min(e["arrival"] for e in rounds)
        before.append(arrival - sample["send"])
        added = sample["first"] - sample["send"] - ttft_of(rounds)
        detour = any(e["recall"] for e in rounds)
        waited = any(
            sample["s"] in e["sessions"] and e["arrival"] >= sample["send"] and e["end"] <= arrival for e in summaries
        )
        groups["all"].append(added)
        groups["detour" if detour else "waited" if waited else "plain"].append(added)
        if detour and waited:
            groups["waited"].append(added)
    compacted = {s for e in summaries if e["arrival"] >= go for s in e["sessions"]}
    return {
        "added_ttft": {
            k: {"n": len(v), "p50_ms": _ms(v, 50), "p99_ms": _ms(v, 99), "max_ms": _ms(v, 100)}
            for k, v in groups.items()
        },
        "before_upstream_p50_ms": _ms(before, 50),
        "before_upstream_p99_ms": _ms(before, 99),
        "waited_by_logs": len(groups["waited"]),
        "detours_by_logs": len(groups["detour"]),
        "sessions_compacted": len(compacted),
        "summaries": sum(1 for e in summaries if e["arrival"] >= go),
    }


class RssPeak(threading.Thread):
    """The process tree's RSS, sampled every second until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.peak = max(self.peak, rss_mb(self.pid))


def run_backend(
    backend: str, store_url: str, run_dir: Path, env: dict[str, str], spec: dict[str, Any], log: Any
) -> dict[str, Any]:
    """One fresh model, proxy and client run on `store_url`."""
    port = free_port()
    model = Proc(
        f"team-upstream-{backend}",
        [
            *(sys.executable, "-m", "bench.team_upstream", "--port", str(port), "--seed", str(spec["seed"])),
            *("--ttft", ",".join(map(str, spec["ttft_s"])), "--rate", ",".join(map(str, spec["rate"]))),
        ],
        port,
        "/health",
        cwd=str(ROOT),
        log=run_dir / f"team-upstream-{backend}.log",
    )
    config = run_dir / f"ctxproxy-team-{backend}.yaml"
    config.write_text(
        f"""store: "{store_url}"
server: {{max_concurrent_requests: {CAP_PER_SESSION * spec["sessions"]}}}
routes:
  - name: team
    match: {{model: "*"}}
    upstream:
      base_url: http://127.0.0.1:{port}/v1
      timeouts: {{connect: 10, first_byte: 120, idle: 60, total: 300}}
    policy: default
policies:
  default: {{context_window: {WINDOW}, max_output_tokens: {MAX_OUTPUT}, keep_recent_tokens: {KEEP_RECENT}}}
"""
    )
    proxy = ctxproxy_proc(f"ctxproxy-team-{backend}", config, env, run_dir / f"ctxproxy-team-{backend}.log")
    model.start()
    try:
        proxy.start(60)
        spec = {**spec, "host": "127.0.0.1", "port": proxy.port, "run": f"{run_dir.name}-{backend}"}
        marks: dict[str, Any] = {}
        peak = RssPeak(proxy.pid)

        def ready() -> None:
            marks["before"], marks["go"] = metrics_of(proxy.port), time.perf_counter()
            marks["runqueue"] = runqueue_wait_s(proxy.pid)
            peak.start()

        timeout = spec["max_seconds"] + 600
        result, cpu = run_loadgen(
            spec, run_dir / f"team-{backend}.json", proxy.pid, timeout, ready, "bench.team_client"
        )
        peak.done.set()
        rss = rss_mb(proxy.pid)
        runqueue = runqueue_wait_s(proxy.pid) - marks["runqueue"]
        after = metrics_of(proxy.port)
        served = json.loads(_get(f"http://127.0.0.1:{port}/team/log"))
        (run_dir / f"team-upstream-{backend}.json").write_text(json.dumps({"go": marks["go"], "log": served}))
    finally:
        proxy.stop()
        model.stop()
    before = marks["before"]
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    samples = result["samples"]
    done = [s for s in samples if "error" not in s]
    errors = [s["error"] for s in samples if "error" in s] + result["warmup_errors"]
    row = {
        "backend": backend,
        "requests": len(done),
        "errors": len(errors),
        "error_examples": errors[:5],
        "wall_s": round(result["wall_s"], 1),
        "throughput_rps": r(len(done) / result["wall_s"]) if result["wall_s"] else None,
        "cpu_ms_per_request": r((cpu or 0.0) * 1000 / len(done)) if done else None,
        "rss_peak_mb": round(max(peak.peak, rss), 1),
        "rss_end_mb": round(rss, 1),
        "loop_lag_p99_ms": r((lag_p99(delta) or 0.0) * 1000),
        "runqueue_wait_s": round(runqueue, 1),
        "loop_lag_samples": int(_sum(delta, "ctxproxy_event_loop_lag_seconds_count")),
        "summary_waits": int(_sum(delta, "ctxproxy_summary_wait_seconds_count")),
        "summary_waits_not_committed": int(_sum(delta, "ctxproxy_summary_wait_seconds_count", "not_committed")),
        "summary_wait_s": r(_sum(delta, "ctxproxy_summary_wait_seconds_sum"), 1),
        "recall_rounds": int(_sum(delta, "ctxproxy_recall_total", 'outcome="round"')),
        "compactions": int(_sum(delta, "ctxproxy_compactions_total", 'result="committed"')),
        "forks": int(_sum(delta, "ctxproxy_forks_total")),
        "body_kb_max": round(max((s["bytes"] for s in samples), default=0) / 1024, 1),
        **analyse(samples, served, marks["go"]),
    }
    a = row["added_ttft"]["all"]
    log(
        f"  team {backend}: {row['requests']} req, {row['errors']} err, cpu {row['cpu_ms_per_request']} ms/req, "
        f"RSS {row['rss_peak_mb']} MB, lag p99 {row['loop_lag_p99_ms']} ms, added TTFT p50/p99 "
        f"{a['p50_ms']}/{a['p99_ms']} ms, summary waits {row['summary_waits']}"
    )
    return row


def run_team_load(
    run_dir: Path,
    env: dict[str, str],
    sessions: int,
    turns: int,
    log: Any,
    backends: tuple[str, ...] = ("sqlite", "redis"),
    max_seconds: float = 600,
    seed: int = 34,
    ttft_s: tuple[float, float] = (1.0, 3.0),
    rate: tuple[float, float] = (30.0, 80.0),
) -> dict[str, Any]:
    """The phase on each backend in `backends` (sqlite: a file in `run_dir`; redis: a private
    redis-server, no persistence); `ttft_s` and `rate` (tokens/s) bound the model's pace."""
    from tests.support.redis_server import RedisServer  # starts a private server; imported only when used

    spec = {
        "sessions": sessions,
        "turns": turns,
        "seed": seed,
        "start_pairs": opening_pairs(sessions, turns, seed),
        "result_chars": RESULT_CHARS,
        "max_seconds": max_seconds,
        "timeout": 300,
        "stagger_s": 4.0,
        "tool_s": [0.2, 1.0],
        "ttft_s": list(ttft_s),
        "rate": list(rate),
    }
    rows = []
    for backend in backends:
        if backend == "redis":
            server = RedisServer().start()
            try:
                url = f"{server.url}?prefix=team:&max_connections={REDIS_CONNECTIONS_PER_SESSION * sessions}"
                rows.append(run_backend(backend, url, run_dir, env, spec, log))
            finally:
                server.stop()
        else:
            rows.append(run_backend(backend, f"sqlite:///{run_dir}/ctxproxy-team.db", run_dir, env, spec, log))
    crossing = sum(1 for s in range(sessions) if s % 5 == 0)
    return {
        "rows": rows,
        "sessions": sessions,
        "turns": turns,
        "crossing_sessions": crossing,
        "setup": (
            f"{sessions} agent sessions at once, {turns} streamed requests each after a warm-up request that "
            f"stores the history it opens with ({min(spec['start_pairs'])}-{max(spec['start_pairs'])} turns); "
            f"window {WINDOW:,} tokens ({MAX_OUTPUT:,} for the answer), default policy but `keep_recent_tokens: "
            f"{KEEP_RECENT:,}` (the default is sized for 128k windows), default caches; "
            f"{crossing} sessions ({crossing / sessions:.0%}) open 4-6 turns short of the window "
            "(by the proxy's own estimate); the model: "
            f"time to first token {ttft_s[0]:g}-{ttft_s[1]:g} s, {rate[0]:g}-{rate[1]:g} tokens/s (40-160 tokens "
            "of thought and a `bash` call per answer), "
            "5% of requests answered with a recall call, a summary the time of 300 tokens; the agent runs its "
            "tool 0.2-1 s between requests; one ctxproxy worker, a fresh proxy and store per backend "
            "(redis: a private redis-server without persistence). Load generator and model in processes of "
            f"their own on the same machine. Sized for the load: `server.max_concurrent_requests: "
            f"{CAP_PER_SESSION * sessions}` and the Redis URL's "
            f"`max_connections={REDIS_CONNECTIONS_PER_SESSION * sessions}`; at the defaults (256 and redis-py's "
            "pool of 100) part of this load is refused with 503 (`overloaded`: the cap counts a call until the "
            "app returns, after its answer is recorded, and a session's next request can come first; "
            "`store_unavailable`: redis-py's `MaxConnectionsError`)"
        ),
    }
