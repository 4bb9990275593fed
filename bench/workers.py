"""All cores: ctxproxy with `--workers 2` vs one worker, the same 16-client loads, interleaved."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from bench.overhead import Cell, Target, run_overhead
from bench.procs import Proc, free_port

ROOT = Path(__file__).resolve().parent.parent


def ctxproxy_proc(name: str, config: Path, env: dict[str, str], log: Path, workers: int = 1) -> Proc:
    port = free_port()
    argv = [sys.executable, "-m", "proxy.cli", "serve", "--config", str(config), "--port", str(port)]
    # info: the startup lines say when every worker is up; no access log either way
    argv += ["--log-level", "warning"] if workers == 1 else ["--log-level", "info", "--workers", str(workers)]
    return Proc(name, argv, port, "/healthz", cwd=str(ROOT), env=env, log=log)


def start_workers(proc: Proc, workers: int, timeout: float = 120) -> None:
    """Start, then wait until every worker has finished its startup (healthz answers after the first)."""
    proc.start(timeout)
    deadline = time.monotonic() + timeout
    assert proc.log is not None
    while proc.log.read_text(errors="replace").count("Application startup complete.") < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name}: not every worker started within {timeout:g} s; log: {proc.log}")
        time.sleep(0.2)


def run_workers(
    one: Target, two: Target, rounds: int, run_dir: Path, base_body: Path, per_worker: int, max_seconds: float, log: Any
) -> dict[str, Any]:
    cells = [Cell("non-stream c=16", False, 16, per_worker), Cell("stream c=16", True, 16, per_worker)]
    out = run_overhead([one, two], cells, rounds, run_dir, base_body, max_seconds, log)
    ratios = {}
    for cell in cells:
        rows = {r["target"]: r for r in out["rows"] if r["cell"] == cell.name}
        a, b = rows.get(one.name), rows.get(two.name)
        if a and b and a["throughput_rps"] and b["throughput_rps"]:
            ratios[cell.name] = round(b["throughput_rps"] / a["throughput_rps"], 2)
    out["ratios"] = ratios
    return out
