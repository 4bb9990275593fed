"""`python -m bench.continuity`: run the sessions, print a table per wire and window."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.continuity.run import run


def table(results: list[dict]) -> str:
    head = (
        "| wire | window | mode | requests | errors | over window | facts right | saved | prefix reuse "
        "| recall rounds / 100 turns | added ms per detour |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [
        f"| {r['wire']} | {r['window']} | {r['mode']} | {r['requests']} | {r['errors']} | {r['over_window']} "
        f"| {r['facts_correct']}/{r['facts_asked']} ({100 * r['recall_rate']:.0f}%) | {100 * r['tokens_saved']:.1f}% "
        f"| {100 * r['prefix_reuse']:.1f}% | {r['recall_rounds_per_100_turns']} | {r['detour_added_ms']} |"
        for r in results
    ]
    return "\n".join([head, *rows])


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.continuity")
    ap.add_argument("--windows", default="8000,16000,32000")
    ap.add_argument("--wires", default="chat,anthropic,responses")
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--steps", type=int, default=11)
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-whole", action="store_true", help="skip the reference runs with the whole history")
    a = ap.parse_args()
    windows = [int(w) for w in a.windows.split(",")]
    results = run(windows, a.wires.split(","), a.episodes, a.steps, a.concurrency, whole=not a.no_whole)
    print(table(results))
    for r in results:
        if r["wrong"] or r["first_errors"]:
            print(f"{r['wire']} {r['window']} {r['mode']}: wrong {r['wrong']} errors {r['first_errors']}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
