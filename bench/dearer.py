"""`python -m bench.dearer`: which replayed runs cost more with ctxproxy than without, and where
one run's money goes, request by request.

The savings phase (`python -m bench --only savings`) replays every window and renders totals; to
work on a policy one wants the few runs that are dearer, at the windows in question, in seconds,
and then the requests of one of them. Same replays and prices as the savings phase
(`bench.savings.run_savings`, `bench.money`); nothing is written. Priced as the default,
`summarizer.mode: auto` (`shared` for the bench's policy, which names no summarizer model), or
with `--mode text` as ctxproxy's own summarizer makes the summaries.

Example::

    python -m bench.dearer --windows 32000                        # dearer runs, both models, auto
    python -m bench.dearer --windows 32000 --mode text            # ... in summarizer.mode text
    python -m bench.dearer --windows 32000 --run django-12286 --model claude-sonnet-4

A request row: what the client's history holds and what ctxproxy sent (tokens), `C` when a
compaction ran with it, the sent request's input read from the cache, written to it and plain,
the summary calls' dollars (in auto, the shared call's: the request it repeats, read from the
cache, plus the ask and the summary; or the own summarizer's where it falls back), the request's
dollars with and without ctxproxy, and the bill so far with over without.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from bench.money import PRICES, price_requests
from bench.savings import MONEY_MODELS, replay_inputs, requests_of, run_savings

SESSIONS = [(300, 0), (300, 1500), (300, 5000)]
"""the generated sessions the savings phase replays beside the transcripts (`bench.run`)"""
MODES = {"auto": ("with", ""), "text": ("with_text", "_text")}
"""`summarizer.mode` -> (its bill in a run's `money`, the suffix of its keys in a money row,
`bench.savings.money_summary`). `auto` is `shared` for the bench's policy (no summarizer model)."""


def dearer_runs(windows: list[int], models: Sequence[str], mode: str = "auto") -> list[str]:
    """Per window and model: the aggregate bill ratio in `mode`, then each run dearer in it."""
    savings = run_savings(windows, None, SESSIONS, lambda line: print(line, file=sys.stderr))
    return dearer_lines(savings, models, mode)


def dearer_lines(savings: dict[str, Any], models: Sequence[str], mode: str) -> list[str]:
    """`dearer_runs`' lines from a savings result (`bench.savings.run_savings`)."""
    bill, suffix = MODES[mode]
    lines = []
    for row in savings["money"]:
        if row["model"] not in models:
            continue
        lines.append(
            f"{row['window']:>7} {row['model']}, summarizer.mode {mode}: bill {row['bill_ratio' + suffix]}x of "
            f"the client's, {row['runs_dearer' + suffix]} runs dearer "
            f"({row['fitting_runs_dearer' + suffix]} that fit the window)"
        )
        for run in savings["runs"]:
            if run["window"] != row["window"]:
                continue
            bills = run["money"][row["model"]]
            with_d, without = bills[bill]["dollars"], bills["without"]["dollars"]
            if without and with_d > without * (1 + 1e-9):
                over = run["money"]["baseline_over_from"]
                lines.append(
                    f"        {with_d / without:.4f}x {run['name']} "
                    f"({run['turns']} requests; the client's history over the window from request {over})"
                )
    return lines


def request_rows(window: int, run: str, model: str, mode: str = "auto") -> list[str]:
    """The requests of the replayed runs (transcripts and generated sessions) whose name holds
    `run`, priced for `model` in `mode` (`auto`: the shared summary calls' dollars in the summary
    column, on the request they ran with)."""
    from proxy.catalog import ModelCatalog
    from proxy.policy_settings import Policy
    from proxy.projector import Projector
    from proxy.replay import replay

    projector = Projector(ModelCatalog())
    lines = []
    for name, messages, tools in replay_inputs(None, SESSIONS):
        if run not in name:
            continue
        report = replay(messages, tools, Policy(context_window=window), "gpt-4o", projector, name=name)
        price = PRICES[model]
        with_proxy = price_requests(requests_of(report, True, shared=mode == "auto"), price).per_request
        without = price_requests(requests_of(report, False), price).per_request
        lines.append(f"{name} at {window:,}, {model}, summarizer.mode {mode}")
        lines.append("  req   client    sent C |   read  write  plain  summary$ |    with$  without$ | so far")
        total_with = total_without = 0.0
        for turn, a, b in zip(report.turns, with_proxy, without, strict=False):
            total_with, total_without = total_with + a.dollars, total_without + b.dollars
            lines.append(
                f"  {turn.turn:>3} {turn.client_tokens:>8,} {turn.sent_tokens:>7,} {'C' if turn.compacted else ' '} | "
                f"{a.cache_read:>6,} {a.cache_write:>6,} {a.uncached:>6,} {a.summarizer_dollars:>9.4f} | "
                f"{a.dollars:>8.4f} {b.dollars:>9.4f} | {total_with / total_without if total_without else 1:.3f}x"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.dearer", description=__doc__.split("\n\n")[0])
    p.add_argument("--windows", default="32000", help="comma list of context windows (default 32000)")
    p.add_argument("--model", choices=MONEY_MODELS, help="one model's prices (default both; --run: Claude)")
    p.add_argument(
        "--mode",
        choices=tuple(MODES),
        default="auto",
        help="summarizer.mode to price: auto, the default (shared here: no summarizer model), or text",
    )
    p.add_argument("--run", help="print the requests of the runs whose name holds this")
    args: Any = p.parse_args(argv)
    windows = [int(w) for w in args.windows.split(",")]
    if args.run:
        for window in windows:
            print("\n".join(request_rows(window, args.run, args.model or "claude-sonnet-4", args.mode)))
    else:
        print("\n".join(dearer_runs(windows, [args.model] if args.model else MONEY_MODELS, args.mode)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
