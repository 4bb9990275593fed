"""`python -m bench.continuity`: run the sessions, print a table per counting mode and window."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
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


SHADOW_HEAD = ["counting", "window", "wire", "mode", "rewrite pairs", "diverged", "kinds", "A/A pairs", "A/A floor"]


def _rate(rate: float | None, span: list[float] | None) -> str:
    return "-" if rate is None or span is None else f"{_pct(rate)} [{_pct(span[0])}, {_pct(span[1])}]"


def shadow_table(results: list[dict]) -> str:
    """`--shadow`: per counting mode, window, wire and mode (recall on or off), how often a
    rewritten request's next step differed from its unrewritten twin's, beside the A/A floor
    (unrewritten requests sent twice), with 95% bootstrap intervals."""
    lines = ["| " + " | ".join(SHADOW_HEAD) + " |", "|" + "---|" * len(SHADOW_HEAD)]
    for r in results:
        if r["mode"] == "whole" or "shadow_pairs" not in r:
            continue
        cells = [
            r["counting"],
            f"{r['window']:,}",
            r["wire"],
            r["mode"],
            str(r["shadow_pairs"]),
            _rate(r["shadow_rate"], r["shadow_interval"]),
            ", ".join(r["shadow_kinds"]) or "-",
            str(r["aa_pairs"]),
            _rate(r["aa_rate"], r["aa_interval"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


RECORD = Path(__file__).resolve().parent / "RESULTS.md"
"""The last recorded run (`--record`); `python -m bench` renders it into BENCHMARKS.md."""
SUMMARY_HEAD = [
    "counting",
    "window",
    "client errors",
    "overflows / 100 upstream requests (main; summarizer; all)",
    "checkpoints committed / failed",
    "pruned events (requests marked / pruning)",
    "facts right: recall / whole",
    "tokens saved",
    "estimate error p50 / p99",
]


def _total(rows: list[dict], key: str) -> int:
    return sum(int(r.get(key) or 0) for r in rows)


def summary(results: list[dict]) -> str:
    """One row per counting mode and window, the three wires' recall runs together."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in results:
        if r["mode"] == "recall":
            groups.setdefault((r["counting"], r["window"]), []).append(r)
    lines = ["| " + " | ".join(SUMMARY_HEAD) + " |", "|" + "---|" * len(SUMMARY_HEAD)]
    for (counting, window), rows in groups.items():
        total = functools.partial(_total, rows)
        main = 100 * total("upstream_overflows") / max(1, total("upstream_requests"))
        summaries = 100 * total("summary_overflows") / max(1, total("summary_requests"))
        every = 100 * (total("upstream_overflows") + total("summary_overflows"))
        every /= max(1, total("upstream_requests") + total("summary_requests"))
        saved = [r["tokens_saved"] for r in rows]
        p50 = max(r["estimate_error_p50"] or 0 for r in rows)
        p99 = max(r["estimate_error_p99"] or 0 for r in rows)
        cells = [
            counting,
            f"{window:,}",
            str(total("errors")),
            f"{main:.2f} ({total('upstream_overflows')}); {summaries:.2f} ({total('summary_overflows')}); "
            f"all {every:.2f}",
            f"{total('checkpoints_committed')} / {total('checkpoints_failed')}",
            f"{total('pruned_events')} ({total('marked_requests')} / {total('pruned_requests')})",
            f"{total('facts_correct')}/{total('facts_asked')} / {total('whole_correct')}/{total('facts_asked')}",
            f"{100 * min(saved):.1f}-{100 * max(saved):.1f}%",
            f"{100 * p50:.1f}% / {100 * p99:.1f}%",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record(results: list[dict], took: float, argv: list[str], before: tuple[str, list[dict]] | None = None) -> str:
    """The section BENCHMARKS.md shows: how it was run, the summary (and an earlier run's, to
    compare: `before`, (what it ran, its rows)), every table."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    requests = sum(r["requests"] for r in results)
    return "\n\n".join(
        [
            "## Continuity against upstreams that count their own way (`python -m bench.continuity`)",
            f"Run on {stamp} ({os.cpu_count()} CPUs): `{' '.join(['python -m bench.continuity', *argv])}`, "
            f"{len(results)} runs, {requests:,} client requests, {took:.0f} s. Each run is one session of "
            "30 episodes x 11 steps (about 245k tokens of history: 8-30x the window) through one proxy, "
            "against scripted upstreams that count tokens their own way and a summarizer the proxy "
            "knows nothing of (`openai/acme-summarizer`, 16k window, 10-30% over its length instruction). "
            "The recall runs of the three wires, per counting mode and window (each cell sums or spans the "
            "wires; estimate error: the worst wire's):",
            summary(results),
            *([f"The same bench on {before[0]}:", summary(before[1])] if before else []),
            GOALS,
            "Every run:",
            tables(results),
            *(
                [
                    "Shadow pairs (`--shadow`, docs/shadow.md), rewrite pairs beside the A/A floor:",
                    shadow_table(results),
                ]
                if any(r.get("shadow_pairs") or r.get("aa_pairs") for r in results)
                else []
            ),
        ]
    )


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
    ap.add_argument(
        "--shadow",
        type=float,
        default=0.0,
        help="shadow pairs for this share of requests (0-1; docs/shadow.md); the upstream-side columns then "
        "count the shadow calls too",
    )
    ap.add_argument("--no-whole", action="store_true", help="skip the reference runs with the whole history")
    ap.add_argument("--record", action="store_true", help=f"write the results to {RECORD.name} (for BENCHMARKS.md)")
    ap.add_argument(
        "--before", nargs=2, metavar=("WHAT", "JSON"), help="with --record: an earlier run's --json to compare"
    )
    a = ap.parse_args()
    windows = [int(w) for w in a.windows.split(",")]
    countings = [c.strip() for c in a.counting.split(",") if c.strip()]
    started = time.monotonic()
    wires = a.wires.split(",")
    results = run(windows, wires, a.episodes, a.steps, a.concurrency, not a.no_whole, countings, a.shadow)
    took = time.monotonic() - started
    print(tables(results))
    print()
    print(GOALS)
    if a.shadow:
        print()
        print(shadow_table(results))
    print()
    for r in results:
        if r["first_errors"] or r["overflow_messages"]:
            print(f"{r['counting']} {r['wire']} {r['window']} {r['mode']}: errors {r['first_errors'][:1]}")
            print(f"    upstream said: {r['overflow_messages'][:1]}")
    print(f"\n{len(results)} runs, {sum(r['requests'] for r in results):,} client requests in {took:.0f} s wall time")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    if a.record:
        before = (a.before[0], json.loads(Path(a.before[1]).read_text())) if a.before else None
        argv = [arg for arg in sys.argv[1:] if arg != "--record"]
        if a.before:
            argv = argv[: argv.index("--before")] + argv[argv.index("--before") + 3 :]
        RECORD.write_text(record(results, took, argv, before) + "\n")


if __name__ == "__main__":
    main()
