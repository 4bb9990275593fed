"""bench.sections: a partial run's sections go into BENCHMARKS.md, the rest stays."""

from __future__ import annotations

from bench.sections import merge

CURRENT = """# ctxproxy benchmarks (full)

Produced by a full run.

## Targets

| target | result | numbers |
|---|---|---|
| CPU per request | met | 1 ms |
| bill with ctxproxy <= without (claude, 8,000) | **missed** | 1.20x |

## Overhead

old overhead

## Savings

old savings

### Money

old money
"""
PARTIAL = """# ctxproxy benchmarks (full)

Produced by a partial run.

## Targets

| target | result | numbers |
|---|---|---|
| bill with ctxproxy <= without (claude, 8,000) | met | 0.90x |

## Savings

new savings

### Money

new money
"""


def test_only_the_partial_runs_sections_and_target_rows_are_replaced():
    merged = merge(CURRENT, PARTIAL, "From the partial run.")
    assert merged == CURRENT.replace("| **missed** | 1.20x", "| met | 0.90x").replace(
        "\nold savings\n\n### Money\n\nold money\n",
        "\nFrom the partial run.\n\nnew savings\n\n### Money\n\nnew money\n",
    )
    assert (
        "Produced by a full run." in merged
        and "old overhead" in merged
        and "| CPU per request | met | 1 ms |" in merged
    )
    assert merge(CURRENT, "# nothing\n", "x") == CURRENT
