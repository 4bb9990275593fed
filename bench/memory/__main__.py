"""`python -m bench.memory`: run the sessions with memory on and off, print the report."""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench.memory.run import WIRES, run
from proxy.memory.tool import definition
from proxy.protocols import OPENAI_CHAT
from proxy.tool_settings import Memory
from tests.support.upstream_server import count_text_tokens

GOALS = (
    "Goals: latest value right >= 95%; stale answers after a correction 0; leaks across projects or tenants 0 "
    "(answers, and distractor values anywhere in the upstream requests of the asking conversation); forgotten "
    "memories returned 0 (likewise)."
)


def report(results: dict[str, dict], took: float, projects: int) -> str:
    head = [
        "wire / memory",
        "right",
        "stale",
        "leaks",
        "forgotten",
        "block tokens / request (mean, max)",
        "requests",
        "input tokens billed",
    ]
    lines = [
        f"## Memory bench ({projects} projects per wire, {took:.0f} s)",
        "",
        GOALS,
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for key, r in results.items():
        blocks = r["block_tokens"]
        tokens = f"{statistics.mean(blocks):.0f}, {max(blocks)} ({len(blocks)} requests)" if blocks else "-"
        lines.append(
            f"| {key} | {r['right']}/{r['asked']} ({100 * r['right'] / max(1, r['asked']):.0f}%) | {r['stale']} | "
            f"{r['leaked']} | {r['forgotten']} | {tokens} | {r['calls']} | {r['input_tokens']:,} |"
        )
    tool = count_text_tokens(json.dumps(definition(OPENAI_CHAT, Memory(enabled=True, scopes=("project",)))))
    lines.append(
        f"\nEvery request with memory also carries the tool's definition (~{tool} tokens as JSON), and every "
        "save, search or forget is one more upstream call (the `requests` column): in these short sessions "
        "(a few hundred tokens per request without memory) they, not the block, make most of the difference."
    )
    for wire in sorted({k.split("/")[0] for k in results}):
        on, off = results.get(f"{wire}/memory"), results.get(f"{wire}/none")
        if on and off and off["input_tokens"]:
            ratio = on["input_tokens"] / off["input_tokens"]
            lines.append(f"\n{wire}: the bill with memory is {ratio:.2f}x the bill without it.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--projects", type=int, default=6)
    parser.add_argument("--wires", default=",".join(WIRES))
    parser.add_argument("--json", default=None, help="write the results here too")
    opts = parser.parse_args()
    t0 = time.monotonic()
    results = run(opts.projects, [w for w in opts.wires.split(",") if w])
    print(report(results, time.monotonic() - t0, opts.projects))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
