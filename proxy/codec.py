"""JSON on the hot path: orjson, with the limits that keep hostile JSON a clear 400.

Every proxied request decodes a body of tens to hundreds of kilobytes and encodes what goes
upstream and into the store; with the standard library that is the largest single cost of a
request, and orjson does it several times faster (`bench/optimisations.md` has the numbers).

Limits, the same on every path (the client's body, the upstream's answer):

* **depth**: at most `MAX_DEPTH` nested arrays/objects. Deeper input is refused here instead of
  failing later in code that recurses (the standard library's decoder and encoder, canonical
  hashing): a deeply nested body would otherwise be a `RecursionError`, i.e. a 500.
* **integers** must fit in 64 bits (-2**63 .. 2**64-1). Bigger ones are refused: orjson would turn
  them into floats (a silent change), and Python refuses to read integers of more than 4,300
  digits at all (a `max_tokens` of 5,000 digits would otherwise be a `ValueError`, i.e. a 500).

What orjson refuses but the standard library accepts (a lone surrogate escape `"\\ud800"`, `NaN`)
is decoded by the standard library, under the same limits, so nothing the standard library
accepts within them is refused; a run of 20 digits anywhere in the bytes (a possible out-of-range
integer, or just digits in a string) takes that exact path too. `dumps` falls back the same way
for values orjson cannot write.

Encoding is compact (no spaces) and UTF-8 (no `\\uXXXX` escapes): the same value gives the same
bytes on every call, which keeps the projection's prefix byte-stable for prompt caches. The bytes
the client sent are forwarded as they are whenever the body is not rewritten; identity hashing
(`identify`) keeps the standard library's canonical form, so stored chains stay valid.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

MAX_DEPTH = 128
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_FLOAT_INT = 9.2e18  # from about 2**63 on, a float may be an integer orjson could not hold


class JsonRejected(ValueError):
    """The bytes are not JSON this proxy accepts; the message says why (for the 400)."""


def loads(data: bytes | str) -> Any:
    """Decode `data`, or JsonRejected (malformed, too deep, an integer out of range)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            raise _too_deep() from None
        value = _stdlib_loads(data)
        _scan(value)
        return value
    if _scan(value):
        # orjson reads an integer beyond 64 bits as a float (or the client wrote a huge float):
        # the exact reader tells which, and refuses the integer.
        value = _stdlib_loads(data)
    return value


def loads_items(data: bytes | memoryview, depth: int) -> list[Any] | None:
    """The values of `data`, the comma-separated items of an array nested `depth` levels deep in
    its document (2: the value of a top-level key), under the same limits as `loads` of the whole
    document; None when they are refused or only a whole parse can tell what they are (orjson
    refuses them, or a float as big as an out-of-range integer would become): the caller then
    parses the whole document, which refuses it in its own words."""
    try:
        value = orjson.loads(b"[" + data + b"]")
        return None if _scan(value, depth) else value
    except (orjson.JSONDecodeError, JsonRejected):
        return None


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


def dumps_str(value: Any) -> str:
    return dumps(value).decode()


def dumps_sorted(value: Any) -> bytes:
    """Keys sorted at every level: the same bytes for equal values, whatever the key order."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _stdlib_loads(data: bytes | str) -> Any:
    try:
        return json.loads(data, parse_int=_bounded_int)
    except RecursionError:
        raise _too_deep() from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JsonRejected(str(exc)) from None


def _bounded_int(text: str) -> int:
    # Checked on the digits first: int() itself refuses more than 4,300 of them.
    digits = len(text) - (text[0] == "-")
    value = int(text) if digits <= 20 else None
    if value is None or not _INT_MIN <= value <= _INT_MAX:
        shown = text if len(text) <= 40 else f"{text[:20]}...({digits:,} digits)"
        raise JsonRejected(f"the integer {shown} is out of range: integers must fit in 64 bits")
    return value


def _scan(value: Any, depth: int = 1) -> bool:
    """Check the depth, level by level (`value` itself `depth` levels deep); True when `value`
    holds a float as big as an out-of-range integer would have become."""
    if type(value) is not dict and type(value) is not list:
        return False
    level, suspect = [value], False
    while level:
        if depth > MAX_DEPTH:
            raise _too_deep()
        deeper = []
        for node in level:
            for child in node.values() if type(node) is dict else node:
                kind = type(child)
                if kind is str or kind is int or child is None:  # most values: nothing to look at
                    continue
                if kind is dict or kind is list:
                    deeper.append(child)
                elif kind is float and not -_FLOAT_INT <= child <= _FLOAT_INT:
                    suspect = True
        level = deeper
        depth += 1
    return suspect


def _too_deep() -> JsonRejected:
    return JsonRejected(f"the JSON is nested more than {MAX_DEPTH} levels deep")
