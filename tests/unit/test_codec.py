"""codec's limits on decoded values: what `_scan` walks past (strings, integers, null) must not
hide what it is there to find (a float from an out-of-range integer, nesting too deep)."""

from __future__ import annotations

import pytest

from proxy import codec


def test_an_integer_over_64_bits_among_plain_values_is_refused() -> None:
    doc = '{"a": "text", "b": 1, "c": null, "d": true, "e": ["x", 2, null, false, 18446744073709551616]}'
    with pytest.raises(codec.JsonRejected, match="64 bits"):
        codec.loads(doc)


def test_a_big_float_among_plain_values_stays_a_float() -> None:
    assert codec.loads('{"a": "text", "b": [1, "y", null, 1e300]}') == {"a": "text", "b": [1, "y", None, 1e300]}


def test_nesting_past_the_limit_beside_plain_values_is_refused() -> None:
    deep = '{"s": "x", "n": 1, "v": ' * codec.MAX_DEPTH + "null" + "}" * codec.MAX_DEPTH
    assert codec.loads(deep)["s"] == "x"  # MAX_DEPTH levels: accepted
    with pytest.raises(codec.JsonRejected, match="levels deep"):
        codec.loads("[" + deep + "]")
