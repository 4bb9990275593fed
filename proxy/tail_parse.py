"""Parse a request body: only its new tail when it extends a recent body byte for byte.

Agents re-send the whole history every turn, serialized the same way, so a body is most often
the previous one with messages appended: `{"model": "m", "messages": [A, B]}` becomes
`{"model": "m", "messages": [A, B, C, D]}`. With P the previous body and O the offset of the `]`
that closes its top-level message array, the new body B extends P when

    B[:O] == P[:O], B[O] == ",", B ends with P[O + 1:] (the same `]` and what follows it)

-- two memcmps. B's array is then P's parsed items (the same objects) followed by the items of
`B[O + 1:close]`, parsed alone (`codec.loads_items`, under the whole-body limits), and every
other top-level value is P's. That is exactly what parsing B whole gives: P[:O] leaves the parser
inside that array after its last item, so the new items are read there as they are alone. A body
that does not extend a remembered one, or whose tail orjson refuses, is parsed whole, as before.

Where the array of a body parsed whole ends is found, not assumed:

* its `[` follows the first `"messages"` (or `"input"`) key in the bytes; the candidate `]` is the
  last one after which the rest of the body parses, with a random sentinel string in the array's
  place, to the parsed body with the sentinel as that key's value. The sentinel is only found there
  if the `[` is where the top-level key's (last, effective) value starts.
* the candidate is proven once, when the next body extends it: `P[start:O + 1]` parses alone. A
  value read from where one starts ends exactly where it ends, so O is that array's `]`. Bodies
  built by extension are proven by construction.

Memory is per caller credential (a digest of the API key the request carries: a hit never
crosses tenants, which are a function of that key), written only for an authenticated caller
(`commit`), and in `HistoryCache`'s budget.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from typing import Any

import orjson

from . import codec
from .history_cache import HistoryCache, Seen
from .types import Json

_SENTINEL = secrets.token_hex(16)
_SENTINEL_JSON = b'"' + _SENTINEL.encode() + b'"'
_WINDOW = 64
"""Bytes before the `]` compared first: a cheap refusal of other conversations' bodies."""
_CANDIDATES = 64
"""How many `]` from the end are tried when locating where a body's array ends."""
_SPACE = b" \t\r\n"
_COMMA, _CLOSE = ord(","), ord("]")


class BodyMemo:
    """The recent bodies of one credential, for parsing this request's body."""

    def __init__(self, cache: HistoryCache, credential: str | None) -> None:
        self._cache = cache
        self._partition = hashlib.sha256((credential or "").encode()).digest()
        self._extended: Seen | None = None
        self._seen: Seen | None = None

    def derived(self, name: str) -> Any:
        """What `keep(name, ...)` left on the body this one extends (its array's first items are
        the very objects it was computed from); None when this body extends none."""
        return self._extended.derived.get(name) if self._extended is not None else None

    def keep(self, name: str, value: Any) -> None:
        """Leave `value`, computed from this body's array items, for the next body extending it."""
        if self._seen is not None:
            self._seen.derived[name] = value

    def parse(self, raw: bytes, key: str, whole: Callable[[bytes], Json]) -> Json:
        """`whole(raw)` (a dict), computed from a remembered body when `raw` extends one."""
        for seen in self._cache.bodies(self._partition):
            extended = extend(seen, raw, key)
            if isinstance(extended, tuple):
                body: Json
                body, self._seen = extended
                self._extended = seen
                self._cache.body_hits += 1
                return body
            if extended is REFUTED:
                self._cache.forget_body(self._partition, seen)
        body = whole(raw)
        self._cache.body_misses += 1
        self._seen = locate(raw, body, key)
        return body

    def commit(self) -> None:
        """Remember this body for the next one (once the caller is authenticated: a request with
        a made-up key must not push out what real callers' bodies left)."""
        if self._seen is not None:
            self._cache.remember_body(self._partition, self._seen, self._extended)


REFUTED = object()
"""`extend`'s answer when the candidate end of `seen`'s array proved wrong (`seen` is useless)."""


def extend(seen: Seen, raw: bytes, key: str) -> tuple[Json, Seen] | object | None:
    """The parsed `raw` and its `Seen` when it extends `seen` (module docstring); else None, or
    REFUTED."""
    prev, o = seen.raw, seen.close
    if len(raw) <= len(prev) or raw[o] != _COMMA:
        return None
    w = max(0, o - _WINDOW)
    if raw[w:o] != prev[w:o]:
        return None
    close = len(raw) - (len(prev) - o)
    view = memoryview(prev)
    if close <= o + 1 or raw[close] != _CLOSE or not raw.endswith(prev[o:]) or not raw.startswith(view[:o]):
        return None
    if not seen.proven and not _parses(view[seen.start : o + 1]):
        return REFUTED
    tail = codec.loads_items(memoryview(raw)[o + 1 : close], 2)
    if not tail:
        return None
    items = seen.items + tail
    body = dict(seen.rest)
    body[key] = items
    return body, Seen(raw, seen.start, close, True, seen.rest, items[:])


def locate(raw: bytes, body: Json, key: str) -> Seen | None:
    """Where the array of `body[key]` is in `raw` (the body parsed whole), to be proven by the
    next body that extends it; None when it is not found."""
    items = body.get(key)
    if type(items) is not list or not items:
        return None
    marker = b'"' + key.encode() + b'"'
    at = raw.find(marker)
    if at < 0:
        return None
    start = _skip_space(raw, at + len(marker))
    if raw[start : start + 1] != b":":
        return None
    start = _skip_space(raw, start + 1)
    if raw[start : start + 1] != b"[":
        return None
    rest = dict(body)
    rest[key] = _SENTINEL
    close, budget = len(raw), 2 * len(raw)  # bytes the probes may copy: a body that never fits costs no more
    for _ in range(_CANDIDATES):
        close = raw.rfind(b"]", start + 1, close)
        if close < 0 or budget < 0:
            return None
        after = raw[close + 1 : close + 64].lstrip(_SPACE)[:1]
        if after not in (b",", b"}"):
            continue  # the top-level array is followed by the next key or the object's end
        budget -= start + len(raw) - close
        if _parses_to(raw[:start] + _SENTINEL_JSON + raw[close + 1 :], rest):
            rest[key] = None
            return Seen(raw, start, close, False, rest, items[:])
    return None


def _skip_space(raw: bytes, i: int) -> int:
    while raw[i : i + 1] and raw[i] in _SPACE:
        i += 1
    return i


def _parses(data: memoryview) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def _parses_to(data: bytes, expected: dict[str, Any]) -> bool:
    try:
        return bool(orjson.loads(data) == expected)
    except orjson.JSONDecodeError:
        return False
