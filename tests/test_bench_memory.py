"""The memory bench runs end to end (`python -m bench.memory`): two projects on each wire through
a real proxy, memory on and off, against the scripted model that uses the memory tool. With
memory every latest value is answered, nothing stale, leaked across projects or tenants, or
forgotten comes back, and the report names the injection's tokens and both bills; without it the
model knows nothing (only the forgotten fact's `unknown` is right)."""

from __future__ import annotations

import pytest

from bench.memory.__main__ import report
from bench.memory.run import WIRES, run

pytestmark = pytest.mark.slow


def test_small_memory_run():
    results = run(2, list(WIRES))
    text = report(results, 1.0, 2)
    print("\n" + text)
    for wire in WIRES:
        on, off = results[f"{wire}/memory"], results[f"{wire}/none"]
        assert on["right"] == on["asked"] == 12, on
        assert (on["stale"], on["leaked"], on["forgotten"]) == (0, 0, 0), on
        assert on["block_tokens"] and max(on["block_tokens"]) <= 800
        assert off["right"] == 2 and not off["block_tokens"]
        assert on["input_tokens"] > off["input_tokens"] > 0
        assert f"| {wire}/memory | 12/12 (100%) | 0 | 0 | 0 |" in text
