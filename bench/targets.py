"""The issue's goals, each met / missed / n/a with the numbers behind it, from a report."""

from __future__ import annotations

from typing import Any


def row_where(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def _mode(money_row: dict[str, Any]) -> str:
    """What the bill with ctxproxy prices: the default mode, from reports that have the text
    variant beside it (`bench.savings.money_summary`); nothing for older reports (text mode)."""
    return "summarizer.mode auto: " if "bill_ratio_text" in money_row else ""


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the issue: met / missed / n/a, with the numbers behind it."""
    out: list[dict[str, Any]] = []

    def add(name: str, ok: bool | None, detail: str) -> None:
        out.append({"target": name, "met": ok, "detail": detail})

    rows = report.get("overhead", {}).get("rows", [])
    for cell in ("non-stream c=1", "stream c=1", "non-stream c=16", "stream c=16"):
        ctx, ref = row_where(rows, target="ctxproxy", cell=cell), row_where(rows, target="passthrough", cell=cell)
        if ctx and ref and ctx["added_p50_ms"] is not None and ref["added_p50_ms"] is not None:
            limit = 1.5 * max(ref["added_p50_ms"], 0.0)
            add(
                f"added p50 latency <= 1.5x pass-through ({cell})",
                ctx["added_p50_ms"] <= limit,
                f"ctxproxy +{ctx['added_p50_ms']:.2f} ms vs pass-through +{ref['added_p50_ms']:.2f} ms "
                f"(ratio {ctx['added_p50_ms'] / ref['added_p50_ms']:.2f}x)"
                if ref["added_p50_ms"] > 0
                else "",
            )
        if ctx and ref and ctx.get("cpu_ms_per_request") and ref.get("cpu_ms_per_request"):
            ratio = ctx["cpu_ms_per_request"] / ref["cpu_ms_per_request"]
            add(
                f"CPU per request <= 1.5x pass-through ({cell})",
                ratio <= 1.5,
                f"ctxproxy {ctx['cpu_ms_per_request']:.2f} ms vs pass-through {ref['cpu_ms_per_request']:.2f} ms "
                f"({ratio:.2f}x)",
            )
    for cell in ("non-stream c=16", "stream c=16"):
        ctx, lite = row_where(rows, target="ctxproxy", cell=cell), row_where(rows, target="litellm", cell=cell)
        if ctx and lite and lite.get("throughput_rps"):
            ratio = ctx["throughput_rps"] / lite["throughput_rps"]
            add(
                f">= 10x LiteLLM proxy throughput ({cell})",
                ratio >= 10,
                f"ctxproxy {ctx['throughput_rps']:.0f} rps vs LiteLLM {lite['throughput_rps']:.0f} rps ({ratio:.1f}x)",
            )
        elif ctx:
            add(
                f">= 10x LiteLLM proxy throughput ({cell})",
                None,
                f"LiteLLM proxy unavailable: {report.get('litellm', {}).get('status')}",
            )
    paced_ctx = row_where(rows, target="ctxproxy", cell="paced stream c=1")
    paced_ref = row_where(rows, target="passthrough", cell="paced stream c=1")
    if paced_ctx and paced_ctx.get("added_ms_per_chunk") is not None:
        ref_txt = (
            f"; pass-through {paced_ref['added_ms_per_chunk']:+.3f} ms"
            if paced_ref and paced_ref.get("added_ms_per_chunk") is not None
            else ""
        )
        add(
            "streaming: no added per-chunk delay (<= 0.1 ms/chunk)",
            paced_ctx["added_ms_per_chunk"] <= 0.1,
            f"ctxproxy {paced_ctx['added_ms_per_chunk']:+.3f} ms per chunk over direct{ref_txt}",
        )
    srows = [x for x in report.get("scaling", {}).get("rows", []) if x["target"] == "ctxproxy"]
    if srows:
        lo, hi = min(srows, key=lambda x: x["stored_events"]), max(srows, key=lambda x: x["stored_events"])
        if lo["cpu_ms_per_request"] and hi["cpu_ms_per_request"]:
            ratio = hi["cpu_ms_per_request"] / lo["cpu_ms_per_request"]
            add(
                f"CPU/request at {hi['stored_events']:,} events <= 1.2x at {lo['stored_events']}",
                ratio <= 1.2,
                f"{hi['cpu_ms_per_request']:.2f} ms vs {lo['cpu_ms_per_request']:.2f} ms ({ratio:.2f}x)",
            )
    store = {r["variant"]: r for r in (report.get("store_calls") or {}).get("rows", [])}
    beside = next((r for v, r in store.items() if v.startswith("beside")), None)
    if beside and "shipped" in store:
        add(
            f"store calls per request {beside['variant']} <= 1.2x in a fresh store",
            beside["vs_shipped"] <= 1.2,
            f"{beside['cpu_us_per_request']:.0f} us vs {store['shipped']['cpu_us_per_request']:.0f} us "
            f"({beside['vs_shipped']:.2f}x)",
        )
    active = (report.get("active") or {}).get("rows", [])
    for name in dict.fromkeys(row["caches"] for row in active):
        cells = [row for row in active if row["caches"] == name and row["cpu_ms_per_request"]]
        if len(cells) < 2:
            continue
        lo, hi = cells[0], cells[-1]
        ratio = hi["cpu_ms_per_request"] / lo["cpu_ms_per_request"]
        goal = not name.startswith("defaults")
        add(
            f"CPU/request with {hi['conversations']:,} conversations active <= 1.2x with {lo['conversations']} "
            f"(caches {name}{'' if goal else '; reported, no goal'})",
            ratio <= 1.2 if goal else None,
            f"{hi['cpu_ms_per_request']:.2f} ms vs {lo['cpu_ms_per_request']:.2f} ms ({ratio:.2f}x); RSS "
            f"{hi['rss_mb']:.0f} MB",
        )
    base = active[0] if active else None
    for row in (report.get("active") or {}).get("one_key", []):
        if base is None or not row["cpu_ms_per_request"] or not base["cpu_ms_per_request"]:
            continue
        ratio = row["cpu_ms_per_request"] / base["cpu_ms_per_request"]
        add(
            f"CPU/request, {row['conversations']} conversations under one API key, openings {row['openings']} "
            f"<= 1.2x {base['conversations']} under a key each (default caches)",
            ratio <= 1.2,
            f"{row['cpu_ms_per_request']:.2f} ms vs {base['cpu_ms_per_request']:.2f} ms ({ratio:.2f}x)",
        )
    for s in report.get("savings", {}).get("summary", []):
        if s["group"] != "runs > 4x window" or not s["runs"]:
            continue
        w = s["window"]
        add(
            f"savings >= 85% on runs > 4x window ({w:,})",
            s["min_savings"] >= 0.85,
            f"{s['runs']} runs: aggregate {s['savings']:.1%}, worst run {s['min_savings']:.1%}",
        )
        add(
            f"prefix reuse >= 80% of baseline ({w:,})",
            (s["min_reuse_vs_baseline"] or 0) >= 0.8,
            f"aggregate {s['prefix_reuse']:.1%} vs baseline {s['baseline_prefix_reuse']:.1%}; worst run ratio "
            f"{s['min_reuse_vs_baseline']:.2f}",
        )
    money = report.get("savings", {}).get("money", [])
    for m in money:
        w, model = m["window"], m["model"]
        add(
            f"bill with ctxproxy <= without ({model}, {w:,})",
            m["runs_dearer"] == 0,
            f"{_mode(m)}${m['bill_with']:.2f} vs ${m['bill_without']:.2f} ({m['bill_ratio']:.3f}x); worst run "
            f"{m['worst_run_bill_ratio']:.3f}x; {m['runs_dearer']} of {m['runs']} runs dearer",
        )
    for m in money:
        if "fitting_runs_dearer" not in m:  # a report from before the column
            continue
        fitting = m["runs"] - m["runs_over_window"]
        add(
            f"bill with ctxproxy <= without, runs the client can send ({m['model']}, {m['window']:,})",
            m["fitting_runs_dearer"] == 0,
            f"{_mode(m)}{m['fitting_runs_dearer']} of {fitting} runs that fit the window dearer; worst "
            f"{m['worst_fitting_run_bill_ratio'] or 0:.3f}x",
        )
    for m in money:
        if m["model"] != money[0]["model"]:
            continue
        add(
            f"prefix reuse >= 80% of the no-proxy baseline, all runs ({m['window']:,})",
            (m["reuse_ratio"] or 0) >= 0.8,
            f"{m['prefix_reuse']:.1%} vs {m['baseline_prefix_reuse']:.1%} ({m['reuse_ratio']:.3f})",
        )
    for cell, ratio in report.get("workers", {}).get("ratios", {}).items():
        add(f"throughput at 2 workers vs 1 ({cell}; reported, no goal)", None, f"{ratio:.2f}x")
    mem = report.get("memory")
    if mem:
        add(
            f"RSS after {mem['conversations']:,} conversations of {mem['turns']} turns (reported, no goal)",
            None,
            f"{mem['rss_before_mb']:.0f} MB -> {mem['rss_after_mb']:.0f} MB ({mem['kb_per_conversation']:.0f} kB "
            "per conversation)",
        )
    over = [s for s in report.get("savings", {}).get("summary", []) if s["group"] == "all runs" and s["runs"]]
    if over:
        n = sum(s["requests_over_window"] for s in over)
        refused = sum(s.get("requests_refused", 0) for s in over)
        add(
            "zero requests sent over the window (all runs, all windows)",
            n == 0,
            f"{n} sent over the window; {refused} refused with a 400 (system prefix, tools and newest user "
            "message alone over the window: no proxy can send them)",
        )
    return out
