"""py-spy profiles of ctxproxy under load (`python -m bench --profile`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.overhead import Target, run_loadgen

ROOT = Path(__file__).resolve().parent.parent


def profile_ctxproxy(
    ctx: Target, run_dir: Path, base_body: Path, seconds: float, concurrency: int = 16, label: str = "agent body"
) -> dict[str, Any]:
    """py-spy (installed from PyPI if missing) on the ctxproxy PID during a non-stream load."""
    spy = shutil.which("py-spy")
    if spy is None:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "py-spy"],
            timeout=300,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        spy = shutil.which("py-spy")
    if spy is None:
        return {"note": "py-spy could not be installed"}
    assert ctx.proc is not None
    out = run_dir / f"profile-{label.replace(' ', '-')}.raw"
    cmd = [
        spy,
        "record",
        "--pid",
        str(ctx.proc.pid),
        "--duration",
        str(int(seconds)),
        "--rate",
        "250",
        "--format",
        "raw",
        "--output",
        str(out),
        "--nonblocking",
    ]
    result, cpu, err = sampled_load(
        ctx, cmd, run_dir, base_body, seconds, concurrency, "profile", lambda sampler: sampler.wait(seconds + 60)
    )
    if not out.exists():
        return {"note": f"py-spy produced no profile: {err[-500:]}"}
    self_c: Counter[str] = Counter()
    total_c: Counter[str] = Counter()
    samples = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        samples += n
        self_c[_frame(frames[-1])] += n
        for f in {_frame(x) for x in frames}:
            total_c[f] += n
    if not samples:
        return {"note": "no samples"}

    def top(c: Counter[str], own: bool = False) -> list[dict[str, Any]]:
        items = [(f, n) for f, n in c.most_common() if not own or f.startswith(("proxy/", "policies/"))]
        return [{"function": f, "pct": round(100 * n / samples, 1)} for f, n in items[:25]]

    return {
        "label": label,
        "note": f"{label}: {samples} samples at 250 Hz over {seconds:g} s of {concurrency}-client non-stream load "
        f"({len(result['samples'])} requests, {(cpu or 0) * 1000 / max(1, len(result['samples'])):.2f} "
        f"CPU ms/req; idle samples included; raw stacks in {out.name})",
        "samples": samples,
        "top_self": top(self_c),
        "top_total": top(total_c, own=True),
    }


def sampled_load(
    ctx: Target,
    cmd: list[str],
    run_dir: Path,
    base_body: Path,
    seconds: float,
    concurrency: int,
    name: str,
    finish: Callable[[subprocess.Popen[str]], object],
) -> tuple[dict[str, Any], float | None, str]:
    """A non-stream load of `concurrency` clients with `cmd`, a sampler of the proxy's PID, started
    after the load generator's warm-up (right before GO) and ended by `finish` once the load is
    over (killed if it is still running after that, or on an error). Returns the load's result,
    the proxy's CPU seconds and the sampler's stderr."""
    assert ctx.proc is not None
    holder: list[subprocess.Popen[str]] = []

    def start() -> None:
        holder.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        time.sleep(0.5)

    spec = {
        "host": "127.0.0.1",
        "port": ctx.port,
        "path": "/v1/chat/completions",
        "base_body": str(base_body),
        "stream": False,
        "concurrency": concurrency,
        "requests_per_worker": 400 if concurrency == 1 else 120,
        "max_seconds": seconds,
        "key_prefix": f"sk-{name}-{run_dir.name}-{concurrency}",
    }
    try:
        result, cpu = run_loadgen(spec, run_dir / f"spec-{name}.json", ctx.proc.pid, seconds + 120, start)
        if holder:
            finish(holder[0])
    finally:
        for sampler in holder:
            if sampler.poll() is None:
                sampler.kill()
                sampler.wait(5)
    err = holder[0].stderr.read() if holder and holder[0].stderr else ""
    return result, cpu, err


def _frame(frame: str) -> str:
    """'func (path/to/file.py:123)' -> 'file.py:func' with the path shortened to the package."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("/site-packages/", f"{ROOT}/", "/lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{name}"
