"""Savings: offline replay (proxy.replay) of every transcript and generated sessions per window."""

from __future__ import annotations

import time
from typing import Any

from bench.bodies import generated_session, transcript_files
from bench.stats import r


def run_savings(
    windows: list[int], files_limit: int | None, sessions: list[tuple[int, int]], log: Any
) -> dict[str, Any]:
    from proxy.catalog import ModelCatalog
    from proxy.config import Policy
    from proxy.projection import Projector
    from proxy.replay import load_transcript, replay

    projector = Projector(ModelCatalog())
    inputs: list[tuple[str, list[Any], Any]] = []
    for path in transcript_files()[:files_limit]:
        messages, tools, title = load_transcript(str(path))
        inputs.append((path.stem, messages, tools))
    for turns, min_chars in sessions:
        s = generated_session(turns, min_chars)
        inputs.append((s["name"], s["messages"], s["tools"]))
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
                    "compactions": sum(d["compactions"] for d in sel),
                    "prefix_reuse": r(sum(d["prefix_reuse"] * d["sent_tokens"] for d in sel) / sent if sent else 0, 4),
                    "baseline_prefix_reuse": r(
                        sum(d["baseline_prefix_reuse"] * d["client_tokens"] for d in sel) / client if client else 0, 4
                    ),
                    "min_reuse_vs_baseline": min(ratios) if ratios else None,
                }
            )
    return {"runs": runs, "summary": summary}
