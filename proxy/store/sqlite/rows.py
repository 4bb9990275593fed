"""Rows decoded by column name, never by position.

A `Select` writes the column list of a SELECT once, as the parameters of the function that decodes
its rows: `sql` is that list for the statement, so each column's value reaches the parameter of its
name. No decoder says `row[1]`, and a column added, removed or moved cannot shift the others. A
record whose fields are its table's columns is its own decoder; trailing columns a decoder gathers
in `*rest` are named by `rest=` (a call record's token fields). A row costs one call of its decoder,
nothing more: no mapping or namedtuple per row (`sqlite3.Row` would look each name up per access),
since rows are decoded on the request path (the active checkpoint) and by the thousand (lineages).

    CONVERSATION = Select(Conversation)   # id, tenant, external_id, created_at, updated_at, ...
    row = db.execute(f"SELECT {CONVERSATION.sql} FROM conversations WHERE id = ?", (id,)).fetchone()
    CONVERSATION.one(row)                 # Conversation(id=..., tenant=..., ...)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

R = TypeVar("R")


class Select(Generic[R]):
    def __init__(self, decode: Callable[..., R], rest: Sequence[str] = ()) -> None:
        parameters = inspect.signature(decode).parameters.values()
        named = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        if any(p.kind is p.VAR_POSITIONAL for p in parameters) != bool(rest):
            raise TypeError(f"{decode.__name__}: name the columns its *rest gathers, and only those, in rest=")
        self.names: tuple[str, ...] = (*named, *rest)
        self.sql = ", ".join(self.names)
        self._decode = decode

    def one(self, row: Sequence[Any] | None) -> R | None:
        return None if row is None else self._decode(*row)

    def all(self, rows: Iterable[Sequence[Any]]) -> list[R]:
        decode = self._decode
        return [decode(*row) for row in rows]
