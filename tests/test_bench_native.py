"""bench.native reads `perf report --stdio` output into rows and names each shared object."""

from __future__ import annotations

from bench.native import _what, parse_report

REPORT = """# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 8K of event 'cpu-clock'
# Event count (approx.): 8204204196
#
# Overhead  Shared Object
# ........  ............................................
#
    62.03%  libpython3.11.so.1.0
    11.25%  libc.so.6
     9.66%  [kernel.kallsyms]
     7.60%  libsqlite3.so.0.8.6
     0.74%  libcrypto.so.3
     0.20%  _blake2.cpython-311-x86_64-linux-gnu.so
    21.10%  libpython3.11.so.1.0                          [.] _PyEval_EvalFrameDefault
"""


def test_rows_keep_the_order_and_drop_what_is_under_a_third_of_a_percent() -> None:
    rows = parse_report(REPORT)
    assert [r["pct"] for r in rows] == [62.03, 11.25, 9.66, 7.6, 0.74, 21.1]
    assert rows[0]["name"] == "libpython3.11.so.1.0"
    assert rows[-1]["name"] == "libpython3.11.so.1.0 [.] _PyEval_EvalFrameDefault"


def test_libcrypto_is_not_taken_for_libc() -> None:
    assert _what("libcrypto.so.3").startswith("OpenSSL")
    assert _what("libc.so.6").startswith("libc")
    assert _what("libsqlite3.so.0.8.6") == "SQLite"
    assert _what("[kernel.kallsyms]").startswith("kernel")
    assert _what("something-else.so") == ""
