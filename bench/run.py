"""`python -m bench`: every phase of issue #4, one command. See BENCHMARKS.md for the output."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.active import run_active
from bench.bodies import AGENT_SOURCE, TRANSCRIPTS, agent_body, scaling_body
from bench.native import native_profile
from bench.overhead import Cell, Target, run_overhead
from bench.procs import Proc, free_port
from bench.profile import profile_ctxproxy
from bench.report import render
from bench.rss import run_memory
from bench.savings import run_savings
from bench.scaling import run_compaction, run_scaling
from bench.sections import merge
from bench.store_calls import run_store_calls
from bench.targets import targets
from bench.team_load import run_team_load
from bench.workers import ctxproxy_proc, run_workers, start_workers

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / ".venv-litellm"
LITELLM_KEY = "sk-bench-litellm-master-0123456789abcdef"
MOCK_CHUNKS = 16
PACED_GAP_MS = 5.0
SUMMARY_DELAY_MS = 50.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_litellm(install: bool) -> tuple[Path | None, str]:
    exe = VENV / "bin" / "litellm"
    if exe.exists():
        return exe, "installed in bench/.venv-litellm"
    if not install:
        return None, "unavailable: bench/.venv-litellm not installed (run the full mode once to install it)"
    log("installing the LiteLLM proxy: python -m venv bench/.venv-litellm && pip install 'litellm[proxy]'")
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", str(VENV)],
            check=True,
            timeout=120,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        subprocess.run(
            [str(VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
            check=True,
            timeout=900,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"unavailable: install failed ({type(exc).__name__}: {str(exc)[:300]})"
    return (exe, "installed in bench/.venv-litellm") if exe.exists() else (None, "unavailable: no litellm script")


def litellm_version() -> str:
    try:
        out = subprocess.run(
            [str(VENV / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return "?"


def write_configs(run_dir: Path, mock_port: int) -> tuple[Path, Path]:
    ctx = run_dir / "ctxproxy.yaml"
    ctx.write_text(f"""store: sqlite:///{run_dir}/ctxproxy.db
server: {{host: 127.0.0.1, port: 8787}}
routes:
  - name: mock
    match: {{model: "*"}}
    upstream:
      base_url: http://127.0.0.1:{mock_port}/v1
      timeouts: {{connect: 10, first_byte: 60, idle: 60, total: 120}}
    policy: default
policies:
  default: {{context_window: 128000, max_output_tokens: 16384}}
""")
    lite = run_dir / "litellm.yaml"
    models = "".join(
        f"""  - model_name: {name}
    litellm_params: {{model: openai/{name}, api_base: "http://127.0.0.1:{mock_port}/v1", api_key: sk-mock}}
"""
        for name in ("gpt-4o", "bench-paced")
    )
    lite.write_text("model_list:\n" + models + "litellm_settings: {drop_params: true, telemetry: false}\n")
    return ctx, lite


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="a few seconds: 1 round, few requests, small replay set")
    p.add_argument("--rounds", type=int, help="interleaved rounds for overhead/scaling (default 5, quick 1)")
    p.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM proxy (never installs it)")
    p.add_argument(
        "--only",
        default="overhead,scaling,workers,memory,active,store,compaction,savings,team_load",
        help="comma list of phases: overhead,scaling,workers,memory,active,store,compaction,savings,team_load",
    )
    p.add_argument("--team-sessions", type=int, help="team_load: agent sessions at once (default 256, quick 8)")
    p.add_argument("--team-turns", type=int, help="team_load: requests per session (default 16, quick 6)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="also profile ctxproxy under load with py-spy (and perf, where installed)",
    )
    p.add_argument("--out", help="results directory (default bench/results/<stamp>)")
    p.add_argument("--no-benchmarks-md", action="store_true", help="do not rewrite BENCHMARKS.md (full mode does)")
    p.add_argument("--render", metavar="REPORT_JSON", help="only re-render BENCHMARKS.md from a report.json")
    p.add_argument(
        "--sections",
        action="store_true",
        help="put the sections this (partial) run renders into BENCHMARKS.md, keeping the others (bench/sections.py)",
    )
    args = p.parse_args(argv)
    if args.render:
        report = json.loads(Path(args.render).read_text())
        report["targets"] = targets(report)
        (ROOT / "BENCHMARKS.md").write_text(render(report))
        return 0
    phases = set(args.only.split(","))
    quick = args.quick
    if args.sections and quick:
        p.error("--sections puts full measurements into BENCHMARKS.md: not with --quick")
    rounds = args.rounds or (1 if quick else 5)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(args.out) if args.out else HERE / "results" / stamp
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    command = "python -m bench" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    report: dict[str, Any] = {
        "meta": {
            "mode": "quick" if quick else "full",
            "command": command.strip(),
            "run": run_dir.name,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.platform()}",
            "rounds": rounds,
            "load_average": {"start": [round(x, 2) for x in os.getloadavg()]},
        },
        "notes": [],
    }
    procs: list[Proc] = []
    try:
        mock_port = free_port()
        mock = Proc(
            "mock",
            [
                sys.executable,
                "-m",
                "bench.mock_upstream",
                "--port",
                str(mock_port),
                "--chunks",
                str(MOCK_CHUNKS),
                "--paced-gap-ms",
                str(PACED_GAP_MS),
                "--summary-delay-ms",
                str(SUMMARY_DELAY_MS),
            ],
            mock_port,
            "/health",
            cwd=str(ROOT),
            log=run_dir / "mock.log",
        )
        procs.append(mock)
        mock.start()
        ctx_cfg, lite_cfg = write_configs(run_dir, mock_port)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("CTXPROXY_ADMIN_TOKEN", None)
        need_proxies = bool(phases & {"overhead", "scaling", "workers"})
        tgt: dict[str, Target] = {"direct": Target("direct", mock_port, None)}
        if need_proxies:
            pt_port = free_port()
            pt = Proc(
                "passthrough",
                [
                    sys.executable,
                    "-m",
                    "bench.passthrough",
                    "--upstream",
                    f"http://127.0.0.1:{mock_port}/v1",
                    "--port",
                    str(pt_port),
                ],
                pt_port,
                "/healthz",
                cwd=str(ROOT),
                env=env,
                log=run_dir / "passthrough.log",
            )
            procs.append(pt)
            pt.start()
            tgt["passthrough"] = Target("passthrough", pt_port, pt)
            ctx = ctxproxy_proc("ctxproxy", ctx_cfg, env, run_dir / "ctxproxy.log")
            procs.append(ctx)
            ctx.start(60)
            tgt["ctxproxy"] = Target("ctxproxy", ctx.port, ctx)
        report["litellm"] = {"status": "skipped (--no-litellm)" if args.no_litellm else "not run"}
        if "overhead" in phases and not args.no_litellm:
            exe, status = ensure_litellm(install=not quick)
            report["litellm"] = {"status": status}
            if exe is not None:
                lite_port = free_port()
                lite = Proc(
                    "litellm",
                    [
                        str(exe),
                        "--config",
                        str(lite_cfg),
                        "--port",
                        str(lite_port),
                        "--host",
                        "127.0.0.1",
                        "--num_workers",
                        "1",
                    ],
                    lite_port,
                    "/health/liveliness",
                    cwd=str(run_dir),
                    env={
                        **env,
                        "LITELLM_MASTER_KEY": LITELLM_KEY,
                        "LITELLM_LOG": "ERROR",
                        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    },
                    log=run_dir / "litellm.log",
                )
                procs.append(lite)
                try:
                    lite.start(120)
                    tgt["litellm"] = Target("litellm", lite_port, lite, auth_key=LITELLM_KEY)
                    report["litellm"] = {
                        "status": f"litellm {litellm_version()} proxy, 1 worker, no database, "
                        "master key set, config: one model per mock route via api_base"
                    }
                except RuntimeError as exc:
                    report["litellm"] = {"status": f"unavailable: {exc}"}

        base_body = run_dir / "agent-body.json"
        base_body.write_text(json.dumps(agent_body()))
        if "overhead" in phases:
            n1, n16, npaced = (15, 5, 3) if quick else (60, 20, 10)
            cells = [
                Cell("non-stream c=1", False, 1, n1),
                Cell("stream c=1", True, 1, n1),
                Cell("non-stream c=16", False, 16, n16),
                Cell("stream c=16", True, 16, n16),
                Cell("paced stream c=1", True, 1, npaced, model="bench-paced", include_usage=True),
            ]
            order = [tgt[k] for k in ("direct", "passthrough", "ctxproxy", "litellm") if k in tgt]
            log(f"overhead: {rounds} round(s) x {len(cells)} loads x {len(order)} targets")
            report["overhead"] = run_overhead(
                order, cells, rounds, run_dir, base_body, max_seconds=8 if quick else 30, log=log
            )
            report["overhead"]["setup"] = (
                f"Body: 40 messages, ~20k tokens (o200k), {base_body.stat().st_size:,} bytes: system + task "
                f"of `{AGENT_SOURCE}` and its tool schema, then 19 tool call/result pairs (results >= 1,000 "
                "chars) cycled from the vendored SWE-agent runs in tests/data/transcripts/. Every request grows "
                "its worker's "
                "conversation by one turn (the mock's exact reply + a new user message), so ctxproxy always has "
                "the history stored (one unmeasured warm-up request per worker stores it) and ingests one new turn "
                "per request, below the compaction trigger (128k window). Mock: 0 ms delay, "
                f"{MOCK_CHUNKS} SSE events per stream written at once; 'paced' streams space them {PACED_GAP_MS:g} ms "
                "apart and ask for `include_usage` (so every target relays the same upstream events; added ms/chunk = "
                f"(first-to-last-event time - direct's) / (events - 1)). {rounds} round(s), targets rotated "
                "each round, loads interleaved. Latency p50/p99 pooled "
                "over rounds; added = minus direct's; req/s = requests / wall time; CPU = utime+stime of the proxy "
                "process tree from /proc per request; RSS at the end. The load generator is a separate raw-asyncio "
                "process; all processes share the machine's CPUs."
            )
        if "scaling" in phases:
            sizes = [50, 500, 2000]
            log(f"scaling: {sizes} stored events")
            report["scaling"] = run_scaling(
                [tgt["passthrough"], tgt["ctxproxy"]], sizes, 8 if quick else 40, 1 if quick else 3, run_dir, log
            )
            report["scaling"]["setup"] = (
                "One client, non-stream, each conversation stored first (warm-up), then grown one turn per request. "
                "Bodies hold N-1 user/assistant messages of real transcript text sized so the body stays ~80-100 kB "
                "whatever N (same bytes, different event counts); pass-through shown for the cost of the bytes alone."
            )
        if "workers" in phases:
            log("workers: ctxproxy --workers 2 vs 1 worker, 16 clients")
            two_cfg = run_dir / "ctxproxy-2w.yaml"
            two_cfg.write_text(ctx_cfg.read_text().replace("ctxproxy.db", "ctxproxy-2w.db"))
            two = ctxproxy_proc("ctxproxy-2w", two_cfg, env, run_dir / "ctxproxy-2w.log", workers=2)
            procs.append(two)
            start_workers(two, 2)
            report["workers"] = run_workers(
                tgt["ctxproxy"],
                Target("ctxproxy-2w", two.port, two),
                rounds,
                run_dir,
                base_body,
                5 if quick else 20,
                8 if quick else 30,
                log,
            )
            two.stop()
        if "memory" in phases:
            n_conv = 100 if quick else 1000
            log(f"memory: RSS of a fresh ctxproxy after {n_conv} conversations of 50 turns")
            mem_cfg = run_dir / "ctxproxy-mem.yaml"
            mem_cfg.write_text(ctx_cfg.read_text().replace("ctxproxy.db", "ctxproxy-mem.db"))
            mem = ctxproxy_proc("ctxproxy-mem", mem_cfg, env, run_dir / "ctxproxy-mem.log")
            procs.append(mem)
            mem.start(60)
            report["memory"] = run_memory(mem, n_conv, 50, log)
            mem.stop()
        if "active" in phases:
            sizes = [16, 64] if quick else [16, 256, 384, 1024]
            log(f"active: CPU per request with {sizes} conversations in use at once")
            report["active"] = run_active(ctx_cfg, env, run_dir, sizes, 2 if quick else 4, log)
        if "store" in phases:
            log("store: one request's store calls on the SqliteStore, in-process")
            report["store_calls"] = run_store_calls(run_dir, 1 if quick else 5, 40 if quick else 200, log)
        if "compaction" in phases:
            log("compaction: in-process Compactor with a fixed-latency summarizer stub")
            report["compaction"] = run_compaction(
                run_dir / "compaction.db",
                [16000, 32000] if not quick else [16000],
                300 if not quick else 80,
                SUMMARY_DELAY_MS,
                log,
            )
        if "team_load" in phases:
            sessions = args.team_sessions or (8 if quick else 256)
            turns = args.team_turns or (6 if quick else 16)
            log(f"team_load: {sessions} agent sessions, {turns} streamed requests each, on sqlite and redis")
            pace = {"ttft_s": (0.05, 0.2), "rate": (300.0, 600.0)} if quick else {}  # quick: a fast model
            report["team_load"] = run_team_load(run_dir, env, sessions, turns, log, **pace)
        if "savings" in phases:
            log("savings: offline replay")
            sessions = [(100, 1500)] if quick else [(300, 0), (300, 1500), (300, 5000)]
            windows = [16000] if quick else [8000, 16000, 32000, 128000, 200000]
            report["savings"] = run_savings(windows, 2 if quick else None, sessions, log)
            report["savings"]["setup"] = (
                ("2 transcripts" if quick else f"every transcript in {TRANSCRIPTS}")
                + f" plus generated sessions {sessions} (turns, min tool-result chars: real tool call/result pairs "
                "cycled), replayed with `proxy.replay.replay` (extractive summarizer stand-in, compaction lands "
                "before the next request). 'prefix reuse' = share of each request's tokens equal to the previous "
                "request's prefix; 'reuse w/o proxy' = the same for what the client sent."
            )
        if args.profile and "ctxproxy" in tgt:
            log("profile: py-spy on ctxproxy")
            secs = 5 if quick else 15
            report["profile"] = [profile_ctxproxy(tgt["ctxproxy"], run_dir, base_body, secs)]
            big = run_dir / "profile-2000-events.json"
            big.write_text(json.dumps(scaling_body(2000)))
            report["profile"].append(profile_ctxproxy(tgt["ctxproxy"], run_dir, big, secs, 1, "2000 stored events"))
            log("profile: perf on ctxproxy")
            report["native_profile"] = native_profile(tgt["ctxproxy"], run_dir, base_body, secs)
    finally:
        for proc in reversed(procs):
            proc.stop()
    report["meta"]["duration_s"] = round(time.time() - started, 1)
    report["meta"]["load_average"]["end"] = [round(x, 2) for x in os.getloadavg()]
    report["targets"] = targets(report)
    (run_dir / "report.json").write_text(json.dumps(report, indent=1))
    md = render(report)
    (run_dir / "report.md").write_text(md)
    results = HERE / "results"
    if run_dir.parent == results:
        shutil.copy(run_dir / "report.json", results / "latest.json")
        shutil.copy(run_dir / "report.md", results / "latest.md")
    if args.sections:
        source = f"This section: `{command}` on {report['meta']['date']}; the rest of this page is the run above."
        (ROOT / "BENCHMARKS.md").write_text(merge((ROOT / "BENCHMARKS.md").read_text(), md, source))
    elif not quick and not args.no_benchmarks_md and args.out is None:
        (ROOT / "BENCHMARKS.md").write_text(md)
    print(md)
    log(f"report: {run_dir / 'report.md'} and report.json")
    return 0
