"""`Select` (proxy/store/sqlite/rows.py): a SELECT's columns are the parameters of its decoder, so
each column's value reaches the parameter of its name, whatever order the table keeps them in."""

from __future__ import annotations

import sqlite3

import pytest

from proxy.store.sqlite.rows import Select


def test_each_column_reaches_the_parameter_of_its_name() -> None:
    def pair(b: int, a: str) -> tuple[str, int]:
        return a, b

    select = Select(pair)
    assert select.sql == "b, a"
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (a TEXT, b INTEGER)")
    db.execute("INSERT INTO t VALUES ('x', 1)")
    assert select.all(db.execute(f"SELECT {select.sql} FROM t")) == [("x", 1)]
    assert select.one(db.execute(f"SELECT {select.sql} FROM t").fetchone()) == ("x", 1)
    assert select.one(None) is None


def test_rest_names_the_trailing_columns_a_decoder_gathers() -> None:
    def gathered(a: str, *rest: int) -> tuple[str, tuple[int, ...]]:
        return a, rest

    assert Select(gathered, rest=("b", "c")).names == ("a", "b", "c")
    with pytest.raises(TypeError):
        Select(gathered)
    with pytest.raises(TypeError):
        Select(lambda a: a, rest=("b",))
