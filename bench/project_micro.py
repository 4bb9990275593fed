"""Micro-benchmark of `policies.projection.project` (issue #4): cost vs history length.

Histories of 50 / 500 / 2,000 items are the real transcripts in shared/transcripts/openai/
(bench.bodies.TRANSCRIPTS; the vendored set alone is too short for 2,000) concatenated (prefix =
the first transcript's system message, tool definitions counted into `Budget.fixed_tokens`),
each cut so it ends like a request does (a user or tool message). Every size is projected
without a checkpoint and with one covering all but the newest ~20k tokens; the 40-message
~20k-token agent body of the main benchmark is projected as is. The window is 128k with 16k
reserved for output (gpt-4o defaults of the proxy), `PolicyConfig()` defaults, a warmed
`TokenCounter`; each figure is the median of `--runs` calls (>= 20).

Each case runs twice: without a cache (`policies.projection.project`, everything derived from
scratch), and ", cache": `policies.memo.project_cached` with a `ProjectionCache` that saw the
previous request (the same `Item` objects minus the newest three, as the proxy's history cache
hands them over) — the steady state of a long session.

"grow by one turn" is what the proxy does on every request: the cache saw the previous request
(the history one turn shorter: up to the previous user or tool message that ended a request),
the call adds that turn (the assistant reply and its tool results or the next user message),
the item list is a new list of the same `Item` objects plus new ones. Each timed call gets a
fresh cache warmed by the previous request, cycling over the last 5 turns before the size.
These cases use a 1M window (gpt-4.1) so 2,000 events stay under the trigger — the state before
the first compaction, which issue #4 is about — and a 128k window with a checkpoint (the state
after it).

    python -m bench.project_micro                      # the table
    python -m bench.project_micro --save before.json   # keep the numbers
    python -m bench.project_micro --baseline before.json   # before/after columns

`--package NAME` benchmarks another copy of the package (NAME.projection.project), e.g. a
pristine copy of `policies` put on PYTHONPATH under another name.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bodies import TRANSCRIPTS, agent_body, transcript_files

SIZES = (50, 500, 2000)
TAIL_TOKENS = 20_000
WINDOW, MAX_OUTPUT = 128_000, 16_384
GROW_WINDOW = 1_047_576  # gpt-4.1: 2,000 events stay under the trigger
SUMMARY = "## Goal\nKeep the agent going.\n## Key facts\n" + "\n".join(
    f"- [e{i}] fact number {i}: path/to/file_{i}.py line {i * 7}" for i in range(60)
)


def _corpus() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Any]]:
    """(prefix, concatenated history, tools of the first transcript)."""
    files = transcript_files()
    if not files:
        raise SystemExit(f"no transcripts under {TRANSCRIPTS}")
    prefix: list[dict[str, Any]] = []
    tools: list[Any] = []
    history: list[dict[str, Any]] = []
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        messages = data["messages"]
        start = 0
        while start < len(messages) and messages[start].get("role") in ("system", "developer"):
            start += 1
        if not prefix:
            prefix, tools = messages[:start], list(data.get("tools") or [])
        history.extend(messages[start:])
    if len(history) < max(SIZES):
        raise SystemExit(
            f"{len(history)} messages under {TRANSCRIPTS}, {max(SIZES):,} needed: set CTXPROXY_TRANSCRIPTS "
            "to the shared transcript set (shared/transcripts/openai/)"
        )
    return prefix, history, tools


def _request_cut(history: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """The first >= `size` messages, ending with a user or tool message (a request's shape)."""
    end = size
    while end < len(history) and history[end - 1].get("role") not in ("user", "tool"):
        end += 1
    return history[:end]


def _timed(fn: Callable[[], Any], runs: int) -> float:
    fn()  # warm: token counts of rewritten messages, lazy caches
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


def _turn_cuts(messages: list[dict[str, Any]]) -> list[int]:
    """Lengths at which a request ends (a user or tool message followed by an assistant reply),
    ascending, ending with len(messages)."""
    cuts = [
        end
        for end in range(1, len(messages))
        if messages[end - 1].get("role") in ("user", "tool") and messages[end].get("role") == "assistant"
    ]
    return [*cuts, len(messages)]


def _timed_growth(call: Callable[[int, Any], Any], cuts: list[int], cache_class: Any, runs: int) -> float:
    """Median ms of `call(current, cache)` on a cache that saw `call(previous, cache)` (the
    previous request), over fresh caches cycling through consecutive pairs of `cuts`."""
    pairs = list(zip(cuts, cuts[1:], strict=False))
    samples = []
    for run in range(runs + 1):
        previous, current = pairs[run % len(pairs)]
        cache = cache_class()
        call(previous, cache)  # the previous request
        t0 = time.perf_counter()
        call(current, cache)
        elapsed = time.perf_counter() - t0
        if run:
            samples.append(elapsed)
    return statistics.median(samples) * 1000


def measure(package: str, runs: int) -> dict[str, float]:
    base = importlib.import_module(f"{package}.base")
    projection = importlib.import_module(f"{package}.projection")
    tokens = importlib.import_module(f"{package}.tokens")
    counter_class = getattr(tokens, "TokenCounter", None)  # a package from before proxy.token_counter
    if counter_class is None:
        counter_class = importlib.import_module("proxy.token_counter").TokenCounter
    counter = counter_class.for_model("gpt-4o")
    settings = base if hasattr(base, "PolicyConfig") else importlib.import_module(f"{package}.config")
    config = settings.PolicyConfig()  # `policies.config` since the settings left `policies.base`
    pure = projection.project
    try:
        memo = importlib.import_module(f"{package}.memo")
        cache_class = memo.ProjectionCache
        cached = memo.project_cached
        inputs = getattr(importlib.import_module(f"{package}.draft"), "Inputs", None)  # None: before `Inputs`

        def project(*args: Any) -> Any:
            """`project(prefix, items, checkpoint, budget, config, count[, cache])`"""
            if len(args) == 6 or args[6] is None:
                return pure(*args[:6])
            return cached(args[6], inputs(*args[:6])) if inputs is not None else cached(args[6], *args[:6])

    except (ModuleNotFoundError, AttributeError):
        try:  # a package from before `policies.memo`: `project(..., cache=)`
            cache_class = importlib.import_module(f"{package}.index").ProjectionCache
        except (ModuleNotFoundError, AttributeError):
            cache_class = None  # a package from before `project(..., cache=)`
        project = pure
    prefix, history, tools = _corpus()
    fixed = 3 + counter.count_tools(tools)
    budget = base.Budget(WINDOW, MAX_OUTPUT, fixed)
    results: dict[str, float] = {}

    def items_of(messages: list[dict[str, Any]], tag: str) -> list[Any]:
        return [base.Item(i + 1, m, counter.count(m, key=f"{tag}:{i}")) for i, m in enumerate(messages)]

    def cases(name: str, items: list[Any], checkpoint: Any, prefix: list[Any], budget: Any) -> None:
        results[name] = _timed(lambda: project(prefix, items, checkpoint, budget, config, counter), runs)
        if cache_class is None:
            return
        # The proxy's steady state: the cache saw the previous request (the same Item objects
        # minus the newest turn), this request adds a little.
        cache = cache_class()
        previous = items[: max(1, len(items) - 3)]
        previous_checkpoint = checkpoint
        if checkpoint is not None and checkpoint.covered_through_seq > len(previous):
            previous_checkpoint = None
        project(prefix, previous, previous_checkpoint, budget, config, counter, cache)
        results[f"{name}, cache"] = _timed(
            lambda: project(prefix, items, checkpoint, budget, config, counter, cache), runs
        )

    for size in SIZES:
        messages = _request_cut(history, size)
        items = items_of(messages, "corpus")
        cases(f"{size} items, no checkpoint", items, None, prefix, budget)
        kept, through = 0, len(items)
        while through > 0 and kept < TAIL_TOKENS:
            kept += items[through - 1].tokens
            through -= 1
        checkpoint = base.Checkpoint(1, through, SUMMARY, counter.count_text(SUMMARY) + 40)
        cases(f"{size} items, checkpoint (~20k tail)", items, checkpoint, prefix, budget)

    for size in SIZES:
        messages = _request_cut(history, size)
        items = items_of(messages, "corpus")
        if cache_class is None:
            break
        cuts = _turn_cuts(messages)[-6:]
        wide = base.Budget(GROW_WINDOW, MAX_OUTPUT, fixed)
        results[f"{size} items, grow by one turn, cache"] = _timed_growth(
            lambda n, cache, items=items, wide=wide: project(prefix, items[:n], None, wide, config, counter, cache),
            cuts,
            cache_class,
            runs,
        )
        kept, through = 0, cuts[0]
        while through > 0 and kept < TAIL_TOKENS:
            kept += items[through - 1].tokens
            through -= 1
        checkpoint = base.Checkpoint(1, through, SUMMARY, counter.count_text(SUMMARY) + 40)
        results[f"{size} items, grow by one turn, checkpoint, cache"] = _timed_growth(
            lambda n, cache, items=items, checkpoint=checkpoint: project(
                prefix, items[:n], checkpoint, budget, config, counter, cache
            ),
            cuts,
            cache_class,
            runs,
        )

    body = agent_body()
    body_messages = body["messages"]
    body_prefix, body_history = body_messages[:1], body_messages[1:]
    body_items = items_of(body_history, "agent")
    body_budget = base.Budget(WINDOW, MAX_OUTPUT, 3 + counter.count_tools(body.get("tools")))
    cases("agent body, 40 messages ~20k tokens", body_items, None, body_prefix, body_budget)
    return results


def _ratio_base(name: str) -> str | None:
    """The 50-item case of the same kind (a cached case compares with the cached 50-item one)."""
    if name.startswith(("500 ", "2000 ")):
        return "50 " + name.split(" ", 1)[1]
    return None


def render(results: dict[str, float], baseline: dict[str, float] | None) -> str:
    lines = []
    if baseline:
        lines.append(f"{'case':40} {'before ms':>10} {'x50':>6} {'after ms':>10} {'x50':>6} {'speedup':>8}")
    else:
        lines.append(f"{'case':40} {'ms':>10} {'x50':>6}")
    for name, ms in results.items():
        ref = _ratio_base(name)
        ratio = f"{ms / results[ref]:.2f}" if ref and ref in results else "-"
        before_name = name if name in (baseline or {}) else name.removesuffix(", cache")
        if baseline and before_name in baseline:
            # a cached case is compared with the same case before (there was no cache then)
            before = baseline[before_name]
            before_ref = _ratio_base(before_name)
            b_ratio = f"{before / baseline[before_ref]:.2f}" if before_ref and before_ref in baseline else "-"
            lines.append(f"{name:40} {before:10.3f} {b_ratio:>6} {ms:10.3f} {ratio:>6} {before / ms:7.1f}x")
        else:
            lines.append(f"{name:40} {ms:10.3f} {ratio:>6}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="timed calls per case (median; >= 20)")
    parser.add_argument("--package", default="policies", help="package to benchmark (default: policies)")
    parser.add_argument("--save", type=Path, help="write the results as JSON")
    parser.add_argument("--baseline", type=Path, help="JSON of an earlier run: show before/after")
    args = parser.parse_args()
    results = measure(args.package, max(20, args.runs))
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    print(render(results, baseline))
    if args.save:
        args.save.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
