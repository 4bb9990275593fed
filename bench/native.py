"""Where ctxproxy's CPU goes below Python: `perf` samples by shared object (`python -m bench --profile`).

py-spy (bench.profile) names Python functions; it cannot say how much of the time is the CPython
interpreter itself, SQLite, the kernel's socket and file work, or the C extensions (uvloop,
orjson, tiktoken, httptools). `perf record -e cpu-clock` on the proxy's PID during the same
16-client non-stream load can. Skipped with a note where `perf` is not installed or not allowed.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from bench.overhead import Target
from bench.profile import sampled_load

WHAT = {
    "libpython": "CPython: the interpreter, objects, dicts, strings",
    "[kernel": "kernel: socket and file syscalls, scheduling",
    "libcrypto": "OpenSSL (hashes)",
    "libc.": "libc: malloc/free, memcpy",
    "libsqlite3": "SQLite",
    "_tiktoken": "tiktoken (token counts)",
    "loop.cpython": "uvloop (the event loop)",
    "orjson": "orjson (JSON)",
    "_http_parser": "aiohttp's HTTP parser",
    "parser.cpython": "httptools (uvicorn's HTTP parser)",
    "_multidict": "multidict (aiohttp headers)",
    "_blake2": "blake2 (chain hashes)",
    "_sqlite3": "the sqlite3 module",
    "_json": "stdlib json",
    "_asyncio": "asyncio's C part",
}


def native_profile(ctx: Target, run_dir: Path, base_body: Path, seconds: float) -> dict[str, Any]:
    perf = shutil.which("perf")
    if perf is None:
        return {"note": "perf is not installed: no native profile"}
    assert ctx.proc is not None
    data = run_dir / "perf.data"
    cmd = [perf, "record", "-e", "cpu-clock", "-F", "499", "-p", str(ctx.proc.pid), "-o", str(data)]
    result, cpu, err = sampled_load(ctx, cmd, run_dir, base_body, seconds, 16, "perf", _interrupt)
    if not data.exists():
        return {"note": f"perf recorded nothing (not allowed here?): {err[-300:]}"}
    by_dso = _report(perf, data, "dso")
    if not by_dso:
        return {"note": f"perf recorded no samples: {err[-300:]}"}
    n = len(result["samples"])
    return {
        "note": f"perf -e cpu-clock at 499 Hz during {seconds:g} s of 16-client non-stream load ({n} requests, "
        f"{(cpu or 0) * 1000 / max(1, n):.2f} CPU ms/req), own time per shared object (no children)",
        "by_object": [{**row, "what": _what(row["name"])} for row in by_dso],
        "top_symbols": _report(perf, data, "dso,sym")[:15],
    }


def _interrupt(perf: subprocess.Popen[str]) -> None:
    perf.send_signal(signal.SIGINT)  # perf writes its file and exits
    perf.wait(30)


def _report(perf: str, data: Path, sort: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [perf, "report", "-i", str(data), "--stdio", "--no-children", "-g", "none", "--sort", sort],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    return parse_report(out)


def parse_report(out: str) -> list[dict[str, Any]]:
    """`perf report --stdio` lines ("    62.03%  libpython3.11.so.1.0") of at least 0.3%, in order."""
    rows = []
    for line in out.splitlines():
        pct, _, name = line.strip().partition("%")
        try:
            share = float(pct)
        except ValueError:
            continue
        if share >= 0.3:
            rows.append({"name": " ".join(name.split()), "pct": share})
    return rows


def _what(name: str) -> str:
    return next((what for key, what in WHAT.items() if name.startswith(key)), "")
