"""Markdown rendering of the JSON report (its targets are checked in bench/targets.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.active import section as active_section
from bench.targets import row_where
from bench.team_report import section as team_section

HERE = Path(__file__).resolve().parent
CLOSING_NOTE = HERE / "optimisations.md"
"""What was optimised and what each step measured (hand-written)."""
RECORDED = (
    HERE / "LOSSLESS.md",
    HERE / "continuity" / "RESULTS.md",
    HERE / "memory" / "RESULTS.md",
    HERE / "POSTGRES.md",
)
"""Sections measured by runs of their own, not by `python -m bench`, kept in BENCHMARKS.md as last
recorded: `python -m bench.lossless --record`, `python -m bench.continuity --record`, `python -m
bench.memory` and the PostgreSQL runs of docs/storage.md (the last two written in by hand)."""


def _f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _table(rows: list[dict[str, Any]], cols: list[tuple[str, str]]) -> list[str]:
    out = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        out.append("| " + " | ".join(_f(row.get(k)) for k, _ in cols) + " |")
    return out


def _loads(values: list[float] | None) -> str:
    return "/".join(f"{v:.2f}" for v in values) if values else "?"


def _store_calls(report: dict[str, Any]) -> list[str]:
    """The store phase's table, and its share of what one request costs in the overhead phase."""
    sw = report.get("store_calls")
    if not sw:
        return []
    lines = ["", "## Store calls per request (in-process, `bench.store_calls`)", "", sw["setup"] + ".", ""]
    lines += _table(
        sw["rows"],
        [("variant", "variant"), ("cpu_us_per_request", "CPU us per request"), ("vs_shipped", "vs shipped")],
    )
    rows = (report.get("overhead") or {}).get("rows", [])
    ctx = row_where(rows, target="ctxproxy", cell="non-stream c=16")
    hop = row_where(rows, target="passthrough", cell="non-stream c=16")
    shipped = sw["rows"][0]["cpu_us_per_request"] / 1000
    if ctx and hop and ctx.get("cpu_ms_per_request") and hop.get("cpu_ms_per_request"):
        lines += [
            "",
            f"The shipped calls are {shipped:.2f} ms: {shipped / ctx['cpu_ms_per_request']:.0%} of ctxproxy's "
            f"{ctx['cpu_ms_per_request']:.2f} ms CPU per request at 16 clients non-stream, and "
            f"{shipped / hop['cpu_ms_per_request']:.2f}x the bare hop's whole {hop['cpu_ms_per_request']:.2f} ms.",
        ]
    return lines


def render(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        f"# ctxproxy benchmarks ({meta['mode']})",
        "",
        f"Produced by `{meta['command']}` on {meta['date']} ({meta['machine']}); "
        f"{meta['duration_s']:.0f} s. Raw numbers: `bench/results/{meta['run']}/report.json`.",
        "",
    ]
    load = meta.get("load_average")
    if load:
        lines += [
            f"Machine load (1/5/15-minute load averages, {os.cpu_count()} CPUs): {_loads(load.get('start'))} at the "
            f"start, {_loads(load.get('end'))} at the end. Other work on the machine inflates latencies and "
            "lowers req/s; CPU per request and ratios within this run are the comparable numbers.",
            "",
        ]
    lines += [
        "How to run: `python -m bench` (full, several minutes; installs the LiteLLM proxy into "
        "`bench/.venv-litellm` on first use; `--profile` adds py-spy profiles of ctxproxy and, where `perf` is "
        "installed, a native one), "
        "`python -m bench --quick` (seconds; skips LiteLLM unless already installed), "
        "`--no-litellm`, `--only overhead,scaling,workers,memory,active,store,compaction,savings,team_load`, "
        "`--rounds N` "
        "(`--team-sessions N --team-turns N` size the team load). "
        "Results go to `bench/results/<stamp>/report.{md,json}`; a full run rewrites this file. "
        "`python -m bench --render bench/results/<stamp>/report.json` re-renders it.",
        "",
    ]
    lines += ["## Targets", ""]
    tg = report.get("targets", [])
    lines += _table(
        [{**t, "met": {True: "met", False: "**missed**", None: "n/a"}[t["met"]]} for t in tg],
        [("target", "target"), ("met", "result"), ("detail", "numbers")],
    )
    ov = report.get("overhead", {})
    if ov.get("rows"):
        lines += ["", "## Overhead", "", ov.get("setup", ""), ""]
        lines += _table(
            ov["rows"],
            [
                ("cell", "load"),
                ("target", "target"),
                ("requests", "req"),
                ("errors", "err"),
                ("p50_ms", "p50 ms"),
                ("p99_ms", "p99 ms"),
                ("added_p50_ms", "added p50"),
                ("added_p99_ms", "added p99"),
                ("ttft_p50_ms", "TTFT p50"),
                ("throughput_rps", "req/s"),
                ("cpu_ms_per_request", "CPU ms/req"),
                ("rss_mb", "RSS MB"),
                ("added_ms_per_chunk", "added ms/chunk"),
            ],
        )
    lines += ["", f"LiteLLM proxy: {report.get('litellm', {}).get('status', 'not run')}"]
    sc = report.get("scaling", {})
    if sc.get("rows"):
        lines += ["", "## Scaling: CPU per request vs stored events", "", sc.get("setup", ""), ""]
        lines += _table(
            sc["rows"],
            [
                ("target", "target"),
                ("stored_events", "stored events"),
                ("requests", "req"),
                ("errors", "err"),
                ("body_bytes", "body bytes (first, last)"),
                ("p50_ms", "p50 ms"),
                ("cpu_ms_per_request", "CPU ms/req"),
            ],
        )
    wk = report.get("workers", {})
    if wk.get("rows"):
        lines += [
            "",
            "## All cores: `--workers 2` vs 1 worker",
            "",
            "The overhead body and loads above at 16 clients, against ctxproxy with one worker and with "
            "`ctxproxy serve --workers 2` (its own SQLite file, WAL), interleaved. CPU and RSS are the whole "
            "process tree (supervisor and workers). The load generator and the mock share the same cores.",
            "",
        ]
        lines += _table(
            wk["rows"],
            [
                ("cell", "load"),
                ("target", "target"),
                ("requests", "req"),
                ("errors", "err"),
                ("p50_ms", "p50 ms"),
                ("p99_ms", "p99 ms"),
                ("throughput_rps", "req/s"),
                ("cpu_ms_per_request", "CPU ms/req"),
                ("rss_mb", "RSS MB"),
            ],
        )
    mem = report.get("memory")
    if mem:
        lines += [
            "",
            "## Memory per idle conversation",
            "",
            f"A fresh ctxproxy (one worker) stores {mem['conversations']:,} conversations, one request each whose "
            f"history holds {mem['turns']} user/assistant turns ({mem['body_bytes']:,} bytes), each on its own key; "
            f"8 clients; {mem['ok']:,} answered, {mem['errors']} errors, {mem['wall_s']:g} s. RSS (from /proc) after "
            f"one warm-up conversation: {mem['rss_before_mb']:.1f} MB; after all: {mem['rss_after_mb']:.1f} MB, "
            f"{mem['kb_per_conversation']:.1f} kB per conversation. What stays per conversation is the history "
            "cache (bounded by `caches.history_mb`, LRU) and SQLite's page cache.",
        ]
    lines += active_section(report)
    lines += team_section(report)
    lines += _store_calls(report)
    cp = report.get("compaction", {})
    if cp.get("rows") or cp.get("error"):
        error = f" ERROR: {cp['error']}" if cp.get("error") else ""
        lines += ["", "## Compaction time", "", cp.get("note", "") + error, ""]
        lines += _table(
            cp.get("rows", []),
            [
                ("window", "window"),
                ("session_turns", "session turns"),
                ("compactions", "compactions"),
                ("failed", "failed"),
                ("summarizer_calls_per_compaction", "summarizer calls/compaction"),
                ("events_per_compaction", "events/compaction"),
                ("wall_ms_p50", "wall ms p50"),
                ("wall_ms_max", "wall ms max"),
                ("overhead_ms_mean", "wall − stub ms (mean)"),
                ("cpu_ms_mean", "CPU ms mean"),
                ("cpu_ms_max", "CPU ms max"),
            ],
        )
    sv = report.get("savings", {})
    if sv.get("summary"):
        lines += [
            "",
            "## Savings (offline replay, `proxy.replay`, model gpt-4o, default policy)",
            "",
            sv.get("setup", ""),
            "",
        ]
        lines += _table(
            sv["summary"],
            [
                ("window", "window"),
                ("group", "runs"),
                ("runs", "n"),
                ("turns", "requests"),
                ("client_tokens", "client input tokens"),
                ("sent_tokens", "upstream input tokens"),
                ("savings", "saved"),
                ("min_savings", "worst run"),
                ("max_request", "max request"),
                ("max_request_share_of_window", "max (req+reserve)/window"),
                ("requests_over_window", "over window"),
                ("requests_refused", "refused (400)"),
                ("compactions", "compactions"),
                ("prefix_reuse", "prefix reuse"),
                ("baseline_prefix_reuse", "reuse w/o proxy"),
                ("min_reuse_vs_baseline", "worst reuse/baseline"),
            ],
        )
        if sv.get("money"):
            lines += [
                "",
                "### Money (list prices with prompt caching, `bench.money`)",
                "",
                "Per window and model, every run above priced request by request: OpenAI gpt-4.1 (automatic "
                "prefix caching from 1,024 tokens in 128-token steps, cached input at 25%), Anthropic Claude "
                "Sonnet 4 (Claude Code's breakpoints -- end of tools + system and the newest message -- plus, "
                "with ctxproxy, its own on the summary block, on the last tool result trimmed as old (the cache "
                "point) and on the previous point when it is more than 16 blocks back, the oldest of its own "
                "dropped over the API's 4, never the client's; 20-block lookback, cache writes 1.25x, reads "
                "0.1x). Output and the summary calls are included. 'bill with', 'ratio', 'worst run' and 'runs "
                "dearer' are the default's, `summarizer.mode: auto`, which is `shared` for this policy (no "
                "`summarizer.model`): each compaction one call of the route's model that repeats the last "
                "request answered before it (read from the cache as that request was) plus the ask, or the own "
                "summarizer's calls where that request does not hold the range. 'without' is the client's own "
                "requests: for a run that outgrows the window the client cannot send it at all ('over window' "
                "runs: cannot run from the request listed below), so its bill is that of the uncapped history, "
                "what a larger window would cost. 'runs dearer that fit the window': of the runs the client can "
                "send whole, those that cost more with ctxproxy (a request that fits goes as sent before the "
                "first summary: `late_trim`). 'mode: text': the same runs with ctxproxy's own summarizer "
                "requests (same model, plain input). 'ratio with it': text mode with the summarizer's calls "
                "priced at the provider's small model, which a route can name as `summarizer.model` (then "
                "`auto` is text; gpt-4.1-mini, Claude Haiku 4.5); the bench's stand-in summaries are the same, "
                "a real small model's are not.",
                "",
            ]
            lines += _table(
                sv["money"],
                [
                    ("window", "window"),
                    ("model", "model"),
                    ("runs", "runs"),
                    ("runs_over_window", "client over window"),
                    ("bill_without", "bill without $"),
                    ("bill_with", "bill with (auto) $"),
                    ("bill_ratio", "ratio"),
                    ("worst_run_bill_ratio", "worst run"),
                    ("runs_dearer", "runs dearer"),
                    ("fitting_runs_dearer", "runs dearer that fit the window"),
                    ("cache_read_share_with", "cached input with"),
                    ("cache_read_share_without", "cached input without"),
                    ("prefix_reuse", "prefix reuse with"),
                    ("baseline_prefix_reuse", "without"),
                    ("reuse_ratio", "reuse ratio"),
                    ("compactions", "compactions"),
                    ("summarizer_share", "summarizer share of bill"),
                    ("bill_ratio_text", "ratio mode: text"),
                    ("worst_run_text", "worst run text"),
                    ("runs_dearer_text", "runs dearer text"),
                    ("small_summarizer", "summarizer.model small"),
                    ("bill_ratio_small_summarizer", "ratio with it"),
                    ("runs_dearer_small_summarizer", "runs dearer with it"),
                ],
            )
        long_runs = [d for d in sv.get("runs", []) if d["longer_than_4x_window"]]
        for d in long_runs:
            money = d.get("money") or {}
            d["client_over_from"] = money.get("baseline_over_from")
            for key, model in (("bill_gpt", "gpt-4.1"), ("bill_claude", "claude-sonnet-4")):
                if model in money:
                    d[key] = f"{money[model]['with']['dollars']:.2f} / {money[model]['without']['dollars']:.2f}"
        if long_runs:
            lines += ["", "Runs longer than 4x the window:", ""]
            lines += _table(
                long_runs,
                [
                    ("window", "window"),
                    ("name", "run"),
                    ("turns", "requests"),
                    ("final_client_context", "final context"),
                    ("savings", "saved"),
                    ("max_request", "max request"),
                    ("requests_over_window", "over window"),
                    ("compactions", "compactions"),
                    ("prefix_reuse", "prefix reuse"),
                    ("baseline_prefix_reuse", "reuse w/o proxy"),
                    ("client_over_from", "client cannot run from request"),
                    ("bill_gpt", "gpt-4.1 $ with / without"),
                    ("bill_claude", "sonnet-4 $ with / without"),
                ],
            )
    for prof in report.get("profile") or []:
        lines += ["", f"## Profile: ctxproxy, {prof.get('label', '')} (py-spy)", "", prof.get("note", ""), ""]
        lines += _table(prof.get("top_self", [])[:15], [("function", "function (self time)"), ("pct", "% samples")])
        lines += [""]
        lines += _table(
            prof.get("top_total", [])[:25], [("function", "proxy/policies function (inclusive)"), ("pct", "% samples")]
        )
    native = report.get("native_profile")
    if native:
        lines += ["", "## Native profile: ctxproxy, agent body (perf)", "", native.get("note", ""), ""]
        lines += _table(
            native.get("by_object", []), [("name", "shared object"), ("what", "what it is"), ("pct", "% samples")]
        )
        lines += [""]
        lines += _table(native.get("top_symbols", []), [("name", "shared object and symbol"), ("pct", "% samples")])
    if report.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    lines += ["\n" + path.read_text().rstrip() for path in RECORDED if path.exists()]
    if CLOSING_NOTE.exists():
        lines += ["", CLOSING_NOTE.read_text().rstrip()]
    return "\n".join(lines) + "\n"
