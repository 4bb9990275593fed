"""Savings: offline replay (proxy.replay) of every transcript and generated sessions per window,
in tokens and in money (`bench.money`: list prices with each provider's prompt caching).

The bill with ctxproxy is the default's, `summarizer.mode: auto`: `shared` (the compaction asks
the conversation's own model, repeating its last request, read from the prompt cache) where the
policy names no `summarizer.model`, as the bench's does; `mode: text` (ctxproxy's own summarizer
requests) and text with a small `summarizer.model` are priced beside it as variants."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.bodies import generated_session, transcript_files
from bench.money import PRICES, SMALL_SUMMARIZER, Request, price_requests, with_summarizer_at
from bench.stats import r
from proxy.protocols.anthropic.cache_control import MAX_CACHE_CONTROL, NEAR_LOOKBACK

MONEY_MODELS = ("gpt-4.1", "claude-sonnet-4")
SUMMARY_BREAKPOINT = True
"""the Anthropic projection carries a cache_control breakpoint on the summary block
(proxy.protocols.anthropic.cache_control.mark_summary)"""
POINT_BREAKPOINT = True
"""... and one on the last tool result trimmed as old (`mark_point`, `Projection.cache_point`),
and on the previous one when it is more than `NEAR_LOOKBACK` blocks back"""


def requests_of(report: Any, proxied: bool, shared: bool = False) -> list[Request]:
    """The run's upstream calls with ctxproxy (`proxied`) or as the client sent them (the whole
    history, whatever the window). Breakpoints are Claude Code's: the end of tools + system and
    the last message, which moves every turn; with ctxproxy also its own on the summary block,
    the cache point and (more than `NEAR_LOOKBACK` blocks back) the previous point, of which the
    API's cap of 4 keeps the newest (`cap_own_markers`: the client's are never dropped).
    `shared`: the compactions as `summarizer.mode: shared` makes them, each a request that repeats
    an earlier one (its blocks and breakpoints) plus the ask."""
    system = report.prefix_blocks - 1
    if not proxied:
        out = []
        for t in report.turns:
            n = report.prefix_blocks + t.events
            out.append(Request(report.client_blocks[:n], (system, n - 1), t.output_tokens))
        return out
    points = [_breakpoints(t, system) for t in report.turns]
    out = []
    for k, t in enumerate(report.turns):
        calls = (t.shared_fallback if shared else t.summarizer_calls) or ()
        asks = (
            tuple(_shared_call(report.turns[i], points[i], ask, summary) for i, ask, summary in t.shared_calls)
            if shared
            else ()
        )
        if not t.error:
            out.append(Request(t.blocks, points[k], t.output_tokens, calls, asks))
        elif calls or asks:  # a refused request's compaction is paid all the same
            out.append(Request((), (), 0, calls, asks))
    return out


def _breakpoints(t: Any, system: int) -> tuple[int, ...]:
    if t.error:
        return ()
    client = {system, len(t.blocks) - 1}
    own = []
    if SUMMARY_BREAKPOINT and t.summary_at is not None:
        own.append(t.summary_at)
    if POINT_BREAKPOINT and t.point_at is not None:
        own.append(t.point_at)
        if t.previous_at is not None and t.point_at - t.previous_at > NEAR_LOOKBACK:  # as the wire does
            own.append(t.previous_at)
    own = sorted(set(own) - client)
    kept = own[len(own) - max(0, MAX_CACHE_CONTROL - len(client)) :] if own else []  # cap_own_markers
    return tuple(sorted(client | set(kept)))


def _shared_call(repeated: Any, points: tuple[int, ...], ask: int, summary: int) -> Request:
    """A shared summary call: the request `repeated` as it was sent, its breakpoints unmoved,
    then the ask (plain input) and the summary (output)."""
    last = repeated.blocks[-1][0] if repeated.blocks else 0
    return Request((*repeated.blocks, (hash((last, "ask", ask)), ask)), points, summary)


def money_of(report: Any) -> dict[str, Any]:
    """Per model: the bill with ctxproxy in `summarizer.mode: auto`, the default (`with`), in
    `mode: text` (`with_text`), with the text mode's summarizer calls at the provider's small model
    (`with_small_summarizer`: a route that names `summarizer.model`, which `auto` serves in text
    mode), and without ctxproxy (the uncapped history); and when the client's own requests stop
    fitting the window (`baseline_over_from`: 1-based request, None: never). `with` follows the
    mode the replayed policy resolves to (`ReplayReport.mode`): the bench's policy names no
    summarizer model, so `auto` is `shared` as the replay models it (`requests_of`)."""
    over = next((t.turn for t in report.turns if t.client_tokens + report.max_output > report.window), None)
    out: dict[str, Any] = {"baseline_over_from": over}
    auto = requests_of(report, True, shared=report.mode == "shared")
    text, without = requests_of(report, True), requests_of(report, False)
    for model in MONEY_MODELS:
        price = PRICES[model]
        text_bill = price_requests(text, price)
        out[model] = {
            "with": price_requests(auto, price).to_dict(),
            "with_text": text_bill.to_dict(),
            "with_small_summarizer": round(with_summarizer_at(text_bill, PRICES[SMALL_SUMMARIZER[model]]), 6),
            "without": price_requests(without, price).to_dict(),
        }
    return out


def replay_inputs(files_limit: int | None, sessions: list[tuple[int, int]]) -> list[tuple[str, list[Any], Any]]:
    """(name, messages, tools) of every transcript (the first `files_limit`) and generated session
    (turns, min tool-result chars) the savings phase replays."""
    from proxy.replay import load_transcript

    inputs: list[tuple[str, list[Any], Any]] = []
    for path in transcript_files()[:files_limit]:
        messages, tools, _ = load_transcript(str(path))
        inputs.append((path.stem, messages, tools))
    for turns, min_chars in sessions:
        s = generated_session(turns, min_chars)
        inputs.append((s["name"], s["messages"], s["tools"]))
    return inputs


def run_savings(
    windows: list[int], files_limit: int | None, sessions: list[tuple[int, int]], log: Any
) -> dict[str, Any]:
    from proxy.catalog import ModelCatalog
    from proxy.policy_settings import Policy
    from proxy.projector import Projector
    from proxy.replay import replay

    projector = Projector(ModelCatalog())
    inputs = replay_inputs(files_limit, sessions)
    runs = []
    t0 = time.perf_counter()
    for window in windows:
        policy = Policy(context_window=window)
        for name, messages, tools in inputs:
            report = replay(messages, tools, policy, "gpt-4o", projector, name=name)
            d = report.to_dict()
            final = report.turns[-1].client_tokens if report.turns else 0
            d.update(
                {
                    "source": "generated" if name.startswith("generated") else "transcript",
                    "final_client_context": final,
                    "longer_than_4x_window": final > 4 * window,
                    "reuse_vs_baseline": r(d["prefix_reuse"] / d["baseline_prefix_reuse"], 3)
                    if d["baseline_prefix_reuse"]
                    else None,
                    "max_request_share_of_window": r((report.max_sent + report.max_output) / window, 3),
                }
            )
            d["money"] = money_of(report)
            runs.append(d)
        log(f"  window {window}: {len(inputs)} runs replayed ({time.perf_counter() - t0:.1f} s so far)")
    summary = []
    for window in windows:
        for group, pick in (("all runs", lambda d: True), ("runs > 4x window", lambda d: d["longer_than_4x_window"])):
            sel = [d for d in runs if d["window"] == window and pick(d)]
            if not sel:
                summary.append({"window": window, "group": group, "runs": 0})
                continue
            client = sum(d["client_tokens"] for d in sel)
            sent = sum(d["sent_tokens"] for d in sel)
            ratios = [d["reuse_vs_baseline"] for d in sel if d["reuse_vs_baseline"] is not None]
            summary.append(
                {
                    "window": window,
                    "group": group,
                    "runs": len(sel),
                    "turns": sum(d["turns"] for d in sel),
                    "client_tokens": client,
                    "sent_tokens": sent,
                    "savings": r(1 - sent / client if client else 0, 4),
                    "min_savings": r(min(d["savings"] for d in sel), 4),
                    "max_request": max(d["max_request"] for d in sel),
                    "max_request_share_of_window": max(d["max_request_share_of_window"] for d in sel),
                    "requests_over_window": sum(d["requests_over_window"] for d in sel),
                    "requests_refused": sum(d.get("requests_refused", 0) for d in sel),
                    "compactions": sum(d["compactions"] for d in sel),
                    "prefix_reuse": r(sum(d["prefix_reuse"] * d["sent_tokens"] for d in sel) / sent if sent else 0, 4),
                    "baseline_prefix_reuse": r(
                        sum(d["baseline_prefix_reuse"] * d["client_tokens"] for d in sel) / client if client else 0, 4
                    ),
                    "min_reuse_vs_baseline": min(ratios) if ratios else None,
                }
            )
    return {"runs": runs, "summary": summary, "money": money_summary(runs, windows)}


def _total(bills: list[dict[str, Any]], key: str) -> float:
    return sum(b[key] for b in bills)


def _bill_ratios(runs: list[dict[str, Any]], model: str, bill: Callable[[dict[str, Any]], float]) -> list[float]:
    """Per run (that costs anything without the proxy): `bill` of its `model` bills over the bill without."""
    return [
        bill(d["money"][model]) / d["money"][model]["without"]["dollars"]
        for d in runs
        if d["money"][model]["without"]["dollars"]
    ]


def _dearer(ratios: list[float]) -> int:
    return sum(1 for x in ratios if x > 1.0 + 1e-9)


def money_summary(runs: list[dict[str, Any]], windows: list[int]) -> list[dict[str, Any]]:
    """Per window and model: bills with / without ctxproxy (all runs; and the runs the client
    could send at all), prefix reuse with / without, compactions, the summarizer's share. The
    bill with ctxproxy is the default's (`summarizer.mode: auto`, run bills' `with`); `_text`
    keys are the same runs in `mode: text`, `_small_summarizer` ones in text mode with the
    summarizer at the provider's small model."""
    rows = []
    for window in windows:
        sel = [d for d in runs if d["window"] == window]
        fits = [d for d in sel if d["money"]["baseline_over_from"] is None]
        sent = sum(d["sent_tokens"] for d in sel)
        client = sum(d["client_tokens"] for d in sel)
        reuse = sum(d["prefix_reuse"] * d["sent_tokens"] for d in sel) / sent if sent else 0.0
        base = sum(d["baseline_prefix_reuse"] * d["client_tokens"] for d in sel) / client if client else 0.0
        for model in MONEY_MODELS:
            w = [d["money"][model]["with"] for d in sel]
            wo = [d["money"][model]["without"] for d in sel]
            ratios = _bill_ratios(sel, model, lambda bills: bills["with"]["dollars"])
            fit_ratios = _bill_ratios(fits, model, lambda bills: bills["with"]["dollars"])
            text = _total([d["money"][model]["with_text"] for d in sel], "dollars")
            text_ratios = _bill_ratios(sel, model, lambda bills: bills["with_text"]["dollars"])
            fit_text_ratios = _bill_ratios(fits, model, lambda bills: bills["with_text"]["dollars"])
            small = sum(d["money"][model]["with_small_summarizer"] for d in sel)
            small_ratios = _bill_ratios(sel, model, lambda bills: bills["with_small_summarizer"])
            with_d, without_d = _total(w, "dollars"), _total(wo, "dollars")
            rows.append(
                {
                    "window": window,
                    "model": model,
                    "runs": len(sel),
                    "runs_over_window": len(sel) - len(fits),
                    "bill_without": r(without_d, 2),
                    "bill_with": r(with_d, 2),
                    "bill_ratio": r(with_d / without_d, 3) if without_d else None,
                    "worst_run_bill_ratio": r(max(ratios), 3) if ratios else None,
                    "worst_fitting_run_bill_ratio": r(max(fit_ratios), 3) if fit_ratios else None,
                    "runs_dearer": _dearer(ratios),
                    "fitting_runs_dearer": _dearer(fit_ratios),
                    "cache_read_share_with": r(_total(w, "cache_read") / max(1, sum(_input(b) for b in w)), 3),
                    "cache_read_share_without": r(_total(wo, "cache_read") / max(1, sum(_input(b) for b in wo)), 3),
                    "prefix_reuse": r(reuse, 4),
                    "baseline_prefix_reuse": r(base, 4),
                    "reuse_ratio": r(reuse / base, 3) if base else None,
                    "compactions": sum(d["compactions"] for d in sel),
                    "summarizer_share": r(_total(w, "summarizer_dollars") / with_d, 4) if with_d else 0.0,
                    "bill_with_text": r(text, 2),
                    "bill_ratio_text": r(text / without_d, 3) if without_d else None,
                    "worst_run_text": r(max(text_ratios), 3) if text_ratios else None,
                    "runs_dearer_text": _dearer(text_ratios),
                    "fitting_runs_dearer_text": _dearer(fit_text_ratios),
                    "small_summarizer": SMALL_SUMMARIZER[model],
                    "bill_ratio_small_summarizer": r(small / without_d, 3) if without_d else None,
                    "runs_dearer_small_summarizer": _dearer(small_ratios),
                }
            )
    return rows


def _input(bill: dict[str, Any]) -> int:
    return int(bill["uncached"] + bill["cache_read"] + bill["cache_write"])
