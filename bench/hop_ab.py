"""A/B of ctxproxy trees against the bare hop, interleaved, for the CPU per request (issue 34).

    python -m bench.hop_ab /path/to/main,/path/to/branch[,/path/to/main] [--rounds 6]
        [--requests 100] [--chunks 16] [--cells sn] [--events]

Each tree (a checkout: a `git worktree add --detach` of each commit to compare) serves from its
own process and store, started with `PYTHONPATH=<tree>`; the bare hop (`bench.passthrough`) and
`bench.mock_upstream` (`--chunks` SSE events per stream, written at once) come from this tree.
Every round runs each cell against every target with the overhead phase's body and load
generator (`run_overhead`), the order rotated each round; the CPU per request of a target is
the median of its rounds [min-max]. Naming one tree twice gives an A/A control: its spread is the
machine's noise. Cells: `s`/`n` stream/non-stream at 1 client, `S`/`N` at 16.

`--events` measures in process instead: `bench/hop_events.py` run in each tree (the recall
watch's `Watched` + `StreamRelay` + the chat wire's observer over 16- and 200-event streams),
per event = (200 - 16) / 184, trees interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.bodies import agent_body
from bench.overhead import Cell, Target, run_overhead
from bench.procs import Proc, free_port
from bench.run import write_configs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CELLS = {
    "s": ("stream c=1", True, 1),
    "n": ("non-stream c=1", False, 1),
    "S": ("stream c=16", True, 16),
    "N": ("non-stream c=16", False, 16),
}


def servers(trees: list[str], rounds: int, requests: int, chunks: int, cells_asked: str, run_dir: Path) -> list[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("CTXPROXY_ADMIN_TOKEN", None)
    procs: list[Proc] = []
    try:
        mock_port = free_port()
        mock_argv = [sys.executable, "-m", "bench.mock_upstream", "--port", str(mock_port), "--chunks", str(chunks)]
        procs.append(Proc("mock", mock_argv, mock_port, "/health", cwd=str(ROOT), log=run_dir / "mock.log"))
        procs[-1].start()
        config, _ = write_configs(run_dir, mock_port)
        hop_port = free_port()
        upstream = f"http://127.0.0.1:{mock_port}/v1"
        hop_argv = [sys.executable, "-m", "bench.passthrough", "--upstream", upstream, "--port", str(hop_port)]
        hop = Proc("hop", hop_argv, hop_port, "/healthz", cwd=str(ROOT), env=env, log=run_dir / "hop.log")
        procs.append(hop)
        hop.start()
        targets = [Target("hop", hop_port, hop)]
        for i, tree in enumerate(trees):
            own = run_dir / f"tree{i}.yaml"
            own.write_text(config.read_text().replace("ctxproxy.db", f"tree{i}.db"))
            port = free_port()
            argv = [sys.executable, "-m", "proxy.cli", "serve", "--config", str(own), "--port", str(port)]
            argv += ["--log-level", "warning"]
            proc = Proc(
                f"tree{i}",
                argv,
                port,
                "/healthz",
                cwd=tree,
                env={**env, "PYTHONPATH": tree},
                log=run_dir / f"tree{i}.log",
            )
            procs.append(proc)
            proc.start(60)
            targets.append(Target(f"tree{i}", port, proc))
        body = run_dir / "body.json"
        body.write_text(json.dumps(agent_body()))
        cells = [
            Cell(name, stream, clients, requests if clients == 1 else max(1, requests // 8))
            for name, stream, clients in (CELLS[c] for c in cells_asked)
        ]
        per: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for rnd in range(rounds):
            order = targets[rnd % len(targets) :] + targets[: rnd % len(targets)]
            out = run_overhead(order, cells, 1, run_dir, body, 60, lambda msg: None)
            for row in out["rows"]:
                per.setdefault((row["cell"], row["target"]), []).append(row)
        lines = []
        for cell in cells:
            for t in targets:
                rows = per[(cell.name, t.name)]
                cpu = sorted(row["cpu_ms_per_request"] for row in rows)
                errors = sum(row["errors"] for row in rows)
                label = "hop" if t.name == "hop" else trees[int(t.name[4:])]
                lines.append(
                    f"{cell.name:<16} {label:<40} CPU/request {cpu[len(cpu) // 2]:.2f} "
                    f"[{cpu[0]:.2f}-{cpu[-1]:.2f}] ms, errors {errors}"
                )
        return lines
    finally:
        for proc in reversed(procs):
            proc.stop()


def events(trees: list[str], rounds: int) -> list[str]:
    lines = []
    for _ in range(rounds):
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": tree}
            done = subprocess.run(
                [sys.executable, str(HERE / "hop_events.py")], env=env, capture_output=True, text=True, timeout=600
            )
            lines.append(f"{tree:<40} {done.stdout.strip() or done.stderr.strip()[-300:]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(prog="python -m bench.hop_ab")
    args.add_argument("trees", help="comma-separated checkouts of ctxproxy")
    args.add_argument("--rounds", type=int, default=6)
    args.add_argument("--requests", type=int, default=100, help="per round and target, at 1 client")
    args.add_argument("--chunks", type=int, default=16)
    args.add_argument("--cells", default="sn")
    args.add_argument("--events", action="store_true", help="per event, in process")
    opts = args.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in opts.trees.split(",")]
    if opts.events:
        lines = events(trees, opts.rounds)
    else:
        with tempfile.TemporaryDirectory(prefix="ctxproxy-hop-ab-") as tmp:
            lines = servers(trees, opts.rounds, opts.requests, opts.chunks, opts.cells, Path(tmp))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
