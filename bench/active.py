"""Active conversations: proxy CPU per request when many conversations are in use at once.

The overhead phase has 16 clients, one conversation each: every per-process cache holds all 16.
A team's proxy serves many more. Here 16 clients each take K conversations in turn (a key each;
`bench.loadgen`'s `conversations_per_worker`), so 16 x K conversations of 500 stored events
(~80 kB bodies, `bench.bodies.scaling_body`) are active at once and each grows one turn per
round. Each cell runs on a fresh ctxproxy (so one cell's conversations never sit in the next
one's caches); CPU per request from /proc over the timed requests, RSS at the cell's end.

Settings: the defaults, and caches sized for the largest cell by the rule in docs/operations.md (histories
about 9x the body bytes of every active conversation, a projection memo, a calibration and the
token counts of every active branch's messages, each with a quarter to spare for the
conversations that were in use before). What a request costs when its conversation fell out of a
cache is what it costs to derive everything again: hash the history's chain, count its tokens,
parse the whole body, project every message.

Two more cells run 64 conversations under one API key (one tenant, as a team's agents sharing a
key), on the defaults: once with first messages that differ, once with conversations that open
alike (the same first three messages), since the caches index bodies by credential and
histories by first message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bodies import scaling_body
from bench.overhead import run_loadgen
from bench.procs import rss_mb
from bench.stats import pct, r
from bench.workers import ctxproxy_proc

EVENTS = 500
CLIENTS = 16
ONE_KEY = 64
"""Conversations run under one API key (one tenant), as a team's agents sharing a key do."""


def sized(conversations: int, body_bytes: int, events: int) -> dict[str, int]:
    """The `caches:` docs/operations.md gives for `conversations` active at once of `body_bytes` / `events`."""
    return {
        "history_mb": max(160, -(-9 * conversations * body_bytes // 2**20)),
        "projection_branches": max(256, conversations + conversations // 4),
        "calibrations": max(256, conversations + conversations // 4),
        "token_counts": max(100_000, conversations * events * 5 // 4),
    }


def run_active(
    base_config: Path, env: dict[str, str], run_dir: Path, sizes: list[int], turns: int, log: Any
) -> dict[str, Any]:
    body = run_dir / f"active-{EVENTS}.json"
    body.write_text(json.dumps(scaling_body(EVENTS)))
    body_bytes = body.stat().st_size
    settings: list[tuple[str, dict[str, int] | None]] = [
        ("defaults", None),
        (f"sized for {max(sizes):,}", sized(max(sizes), body_bytes, EVENTS)),
    ]
    cell = Cell(base_config, env, run_dir, body, turns, log)
    rows = [cell.run(f"{i}-{n}", name, caches, n) for i, (name, caches) in enumerate(settings) for n in sizes]
    one_key = [
        cell.run(f"key-{mark}", "defaults", None, ONE_KEY, mark, openings)
        for mark, openings in ((1, "distinct"), (3, "alike"))
    ]
    return {
        "rows": rows,
        "one_key": one_key,
        "setup": (
            f"{CLIENTS} clients, non-stream, each taking its conversations in turn; every conversation holds "
            f"{EVENTS} stored events ({body_bytes:,}-byte body) and grows by one turn per round, {turns} rounds "
            "after a warm-up that stores each; a fresh ctxproxy for each cell"
        ),
    }


@dataclass
class Cell:
    """One cell of the phase: a fresh ctxproxy, the load, its CPU per request and RSS."""

    base_config: Path
    env: dict[str, str]
    run_dir: Path
    body: Path
    turns: int
    log: Any

    def run(
        self, cell: str, name: str, caches: dict[str, int] | None, n: int, mark: int | None = None, openings: str = ""
    ) -> dict[str, Any]:
        """`n` conversations in use; with `mark`, all under one API key (bench.loadgen's `mark_message`)."""
        run_dir = self.run_dir
        config = run_dir / f"ctxproxy-active-{cell}.yaml"
        text = self.base_config.read_text().replace("ctxproxy.db", f"ctxproxy-active-{cell}.db")
        if caches is not None:
            text += "caches: " + json.dumps(caches) + "\n"
        config.write_text(text)
        proc = ctxproxy_proc(f"ctxproxy-active-{cell}", config, self.env, run_dir / f"ctxproxy-active-{cell}.log")
        proc.start(60)
        try:
            spec = {
                "host": "127.0.0.1",
                "port": proc.port,
                "path": "/v1/chat/completions",
                "base_body": str(self.body),
                "stream": False,
                "concurrency": CLIENTS,
                "conversations_per_worker": max(1, n // CLIENTS),
                "requests_per_worker": self.turns,
                "max_seconds": 300,
                "timeout": 120,
                "key_prefix": f"sk-active-{run_dir.name}-{cell}",
            }
            if mark is not None:
                spec.update(auth_key=f"sk-active-{run_dir.name}-{cell}", mark_message=mark)
            result, cpu = run_loadgen(spec, run_dir / "spec.json", proc.pid, timeout=900)
            rss = rss_mb(proc.pid)
        finally:
            proc.stop()
        done = len(result["samples"])
        lat = [s["latency_ms"] for s in result["samples"]]
        row = {
            "caches": name,
            "settings": caches,
            "conversations": n,
            "openings": openings,
            "requests": done,
            "errors": result["error_count"] + len(result["warmup_errors"]),
            "p50_ms": r(pct(lat, 50)),
            "p99_ms": r(pct(lat, 99)),
            "cpu_ms_per_request": r((cpu or 0.0) * 1000 / done) if done else None,
            "rss_mb": round(rss, 1),
        }
        keys = f"one key, openings {openings}" if mark is not None else "a key each"
        self.log(
            f"  {name:<16} {n:>5} active ({keys}): cpu {row['cpu_ms_per_request']} ms/req, "
            f"p50 {row['p50_ms']} ms, RSS {row['rss_mb']} MB"
        )
        return row


def section(report: dict[str, Any]) -> list[str]:
    """BENCHMARKS.md's section of this phase."""
    active = report.get("active")
    if not active:
        return []
    lines = ["", "## Active conversations: CPU per request vs conversations in use at once", ""]
    lines += [active["setup"] + ".", ""]
    lines += ["| caches | active conversations | req | err | p50 ms | p99 ms | CPU ms/req | vs fewest | RSS MB |"]
    lines += ["|---|---|---|---|---|---|---|---|---|"]
    for row in active["rows"]:
        first = next(x for x in active["rows"] if x["caches"] == row["caches"])
        ratio = (
            f"{row['cpu_ms_per_request'] / first['cpu_ms_per_request']:.2f}x"
            if row["cpu_ms_per_request"] and first["cpu_ms_per_request"]
            else "—"
        )
        lines.append(
            f"| {row['caches']} | {row['conversations']:,} | {row['requests']:,} | {row['errors']} | {row['p50_ms']} | "
            f"{row['p99_ms']} | {row['cpu_ms_per_request']} | {ratio} | {row['rss_mb']:,.1f} |"
        )
    settings = next((x["settings"] for x in active["rows"] if x["settings"]), None)
    if settings:
        lines += ["", "Sized: `caches: " + json.dumps(settings) + "`."]
    if active.get("one_key"):
        base = active["rows"][0]
        lines += [
            "",
            f"Under one API key (one tenant), default caches, vs {base['conversations']} under a key each:",
            "",
        ]
        lines += ["| conversations | openings | req | err | p50 ms | p99 ms | CPU ms/req | vs a key each | RSS MB |"]
        lines += ["|---|---|---|---|---|---|---|---|---|"]
        for row in active["one_key"]:
            ratio = row["cpu_ms_per_request"] / base["cpu_ms_per_request"] if row["cpu_ms_per_request"] else None
            lines.append(
                f"| {row['conversations']:,} | {row['openings']} | {row['requests']:,} | {row['errors']} | "
                f"{row['p50_ms']} | {row['p99_ms']} | {row['cpu_ms_per_request']} | "
                f"{f'{ratio:.2f}x' if ratio else '—'} | {row['rss_mb']:,.1f} |"
            )
        lines += [
            "",
            "'distinct': each conversation's first message differs; 'alike': the first three messages are "
            "the same in all and the fourth differs, as agents started in one repository or by one harness.",
        ]
    return lines
