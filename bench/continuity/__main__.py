"""`python -m bench.continuity`: run the sessions, print a table per counting mode and window."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from bench.continuity.run import COUNTINGS, run

GOALS = (
    "Goals: client errors 0; recall >= 95% and equal to the whole-history reference; tokens saved >= 85% "
    "on runs longer than 4x the window. Overflows are the 400s the scripted upstreams answered (main model "
    "and summarizer apart), per 100 of their requests; `over window` is the share of main requests whose "
    "input + max_tokens was over the window by the provider's own count; estimate error is |estimate - "
    "billed| / billed over the main calls (p50 / p99; estimate: the call record's predicted_tokens, else "
    "sent_tokens); `marked` is how many upstream requests carried a pruned-history marker, of the requests "
    "that pruned."
)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _cell(r: dict) -> list[str]:
    whole = "" if r["whole_correct"] is None or r["mode"] == "whole" else f" (whole {r['whole_correct']})"
    saved = f"{100 * r['tokens_saved']:.1f}%" + ("" if r["long_run"] else " (short run)")
    checkpoints = f"{r.get('checkpoints_committed', '-')} / {r.get('checkpoints_failed', '-')}"
    pruned = f"{r.get('pruned_events', '-')} ev in {r.get('pruned_requests', '-')} req"
    marked = f"{r['marked_requests']} of {r.get('pruned_requests', 0)}"
    estimate = f"{_pct(r.get('estimate_error_p50'))} / {_pct(r.get('estimate_error_p99'))}"
    summaries = f"{r['summary_overflows_per_100']} ({r['summary_over_window']} of {r['summary_requests']} over 16k)"
    return [
        r["wire"],
        r["mode"],
        str(r["requests"]),
        str(r["errors"]),
        f"{r['overflows_per_100']} ({r['upstream_overflows']} of {r['upstream_requests']})",
        summaries,
        checkpoints,
        pruned,
        marked,
        f"{r['facts_correct']}/{r['facts_asked']} ({100 * r['recall_rate']:.0f}%){whole}",
        saved,
        estimate,
        _pct(r["over_window_share"]),
    ]


HEAD = [
    "wire",
    "mode",
    "requests",
    "client errors",
    "overflows / 100 main",
    "overflows / 100 summary",
    "checkpoints ok / failed",
    "pruned",
    "marked",
    "facts right",
    "saved",
    "estimate err p50 / p99",
    "over window",
]


def tables(results: list[dict]) -> str:
    out = []
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in results:
        key = (r["counting"], r["window"]) if r["mode"] != "whole" else ("reference", 0)
        groups.setdefault(key, []).append(r)
    for (counting, window), rows in groups.items():
        title = "whole history, no proxy" if counting == "reference" else f"counting {counting}, window {window:,}"
        lines = [f"### {title}", "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        lines += ["| " + " | ".join(_cell(r)) + " |" for r in rows]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def main() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm's bundled map
    ap = argparse.ArgumentParser(prog="python -m bench.continuity")
    ap.add_argument("--counting", default=",".join(COUNTINGS), help="counting modes; the first one is the reference")
    ap.add_argument("--windows", default="8000,16000,32000")
    ap.add_argument("--wires", default="chat,anthropic,responses")
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--steps", type=int, default=11)
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-whole", action="store_true", help="skip the reference runs with the whole history")
    a = ap.parse_args()
    windows = [int(w) for w in a.windows.split(",")]
    countings = [c.strip() for c in a.counting.split(",") if c.strip()]
    started = time.monotonic()
    results = run(windows, a.wires.split(","), a.episodes, a.steps, a.concurrency, not a.no_whole, countings)
    took = time.monotonic() - started
    print(tables(results))
    print()
    print(GOALS)
    print()
    for r in results:
        if r["first_errors"] or r["overflow_messages"]:
            print(f"{r['counting']} {r['wire']} {r['window']} {r['mode']}: errors {r['first_errors'][:1]}")
            print(f"    upstream said: {r['overflow_messages'][:1]}")
    print(f"\n{len(results)} runs, {sum(r['requests'] for r in results):,} client requests in {took:.0f} s wall time")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
