"""`python -m bench.lossless` runs and measures what issue 32 asks: repeats and what the projection
removes losslessly, key lines kept by head + tail and by content."""

from __future__ import annotations

from bench import lossless


def test_the_lossless_bench_measures_repeats_and_key_lines() -> None:
    out = lossless.main([])
    generated = out["repeats"]["generated (cycled pairs)"]
    assert generated["exact_tokens"] > 0.9 * generated["result_tokens"]  # cycled pairs: repeats by construction
    assert generated["removed"]["default"] > 0 and generated["sent_as"]["default"] > 0
    real = out["repeats"]["transcripts"]
    assert real["result_tokens"] > 0 and real["exact_tokens"] + real["near_tokens"] <= real["result_tokens"]
    for cap in lossless.CAPS:
        kept = out["retention"][cap]["kept"]
        if out["retention"][cap]["results"]:
            assert sum(kept["type-aware"].values()) >= sum(kept["head+tail"].values()), cap
            tokens = out["retention"][cap]["sent_tokens"]
            assert tokens["type-aware"] <= tokens["head+tail"], cap  # at the same or lower cost
