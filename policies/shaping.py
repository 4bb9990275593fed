"""A long tool result's excerpt by what it is: JSON by its structure, text by the lines that matter.

Problem: `trim_tool_results` needs, for one result and a character budget, the excerpt that keeps
most of what the model may need later, and to say what it left out. This module picks the way:
- JSON (the whole text parses as an object or array): the structure is kept whole, each long
  array keeps its first items, its last one and a string saying how many were left out and how
  many there were, long strings are cut (the cut said in the string); tighter each round until it
  fits (`JSON_ROUNDS`);
- other text: `content_kinds.classify` ranks its lines and `excerpt` keeps the best within the
  budget; text a later call quotes verbatim (`quotes`) is kept whatever the budget;
- text of no kind (and no quote to keep) gets None: the caller cuts it head + tail.

The budget is per result (`excerpt_budget`): the cap is what a result of average key-line density
gets. Key lines (the kind's `Ranked.key`: failures, errors, tracebacks' ends, `path:line`
references, a diff's file headers) need what they need, so a result dense in them may spend up to
`GROW_AT_MOST` times the cap, and a result with none gets `LEAN` of it, which pays for them over
many results (`python -m bench.lossless` measures both against head + tail at the cap). The
budget depends on the result's own text, cap, quotes and focus only, so its bytes stay put.

Invariant: pure and deterministic (what it remembers changes no answer, only how soon it comes).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from policies.content_kinds import Ranked, classify
from policies.excerpt import FILLER, GAP_COST, MUST, Picked, pick, render

GROW_AT_MOST = 4
"""a type-aware excerpt's budget grows for its key lines to at most this many times the cap"""
LEAN = 0.9
"""the share of the cap a type-aware excerpt of text with no key lines gets"""
MARKER_ROOM = 64
"""what an excerpt's marker says beyond head + tail's (its kind, what it kept, lines left out):
the room a grown budget leaves it, so that the key lines still fit once it is paid"""
JSON_ROUNDS = ((3, 1, 200), (2, 1, 80), (1, 1, 40), (1, 0, 40), (1, 0, 16), (0, 0, 16))
"""(items kept at the start of a long array, at its end, characters kept of a long string), per round"""


@dataclass(frozen=True, slots=True)
class Shaped:
    body: str
    """the excerpt, without the marker"""
    kind: str
    keeps: str
    """what the excerpt keeps, for the marker ("the failures, their last frames and ...")"""
    kept_chars: int
    left_out: int
    total: int
    unit: str = "lines"


def excerpt_budget(text: str, cap: int, *, quotes: Sequence[str] = (), focus: Sequence[str] = ()) -> int:
    """The budget of `text`'s type-aware excerpt under `cap`: the cap for JSON; what its key lines
    (`Ranked.key`) need, each whole with its gap lines and `MARKER_ROOM`, when that is more than
    the cap, up to `GROW_AT_MOST` times it; `LEAN` of the cap for text with no key lines (what the
    dense ones spend beyond the cap, so that over many results the excerpts cost no more than
    head + tail at the cap). A function of the text, the cap, the quotes and the focus alone.

    Remembered like `shape_text`'s excerpts, by a digest of the text: classifying is the cost."""
    key = (hashlib.blake2b(text.encode(), digest_size=16).digest(), cap, tuple(quotes), tuple(focus))
    with _SHAPED_LOCK:
        if key in _BUDGETS:
            return _BUDGETS[key]
    budget = cap
    if quotes or _json_value(text) is None:
        need = key_need(text, quotes=quotes, focus=focus)
        budget = min(cap * GROW_AT_MOST, max(cap, need + MARKER_ROOM)) if need else int(cap * LEAN)
    with _SHAPED_LOCK:
        if len(_BUDGETS) >= SHAPED_REMEMBERED:
            del _BUDGETS[next(iter(_BUDGETS))]
        _BUDGETS[key] = budget
    return budget


def key_need(text: str, *, quotes: Sequence[str] = (), focus: Sequence[str] = ()) -> int:
    """The characters `text`'s key lines (`Ranked.key`, `MUST` lines aside) take in an excerpt,
    each whole, with a gap line before each run of them and one after the last; 0: none."""
    read = _ranked(text, tuple(quotes), tuple(focus))
    if read is None or not read[1].key:
        return 0
    lines, ranked, ranks = read
    need, previous = GAP_COST, -2
    for i, rank in enumerate(ranks):
        if MUST < rank <= ranked.key:
            need += len(lines[i]) + 1 + (GAP_COST if previous != i - 1 else 0)
            previous = i
    return need if previous >= 0 else 0


def shape_text(text: str, max_chars: int, *, quotes: Sequence[str] = (), focus: Sequence[str] = ()) -> Shaped | None:
    """The excerpt of `text` within `max_chars` (plus what quotes need), None for text of no
    kind with nothing to keep (the caller cuts it head + tail) or when it would not be shorter.

    Remembered by a digest of the text (`SHAPED_REMEMBERED` excerpts, the oldest forgotten first),
    never the text itself: a projection made from scratch -- a branch whose memo was evicted, the
    first request after a restart -- shapes again the results it shaped before, and classifying
    them is most of its cost (a 2,000-event branch: ~150 ms)."""
    key = (hashlib.blake2b(text.encode(), digest_size=16).digest(), max_chars, tuple(quotes), tuple(focus))
    with _SHAPED_LOCK:
        if key in _SHAPED:
            return _SHAPED[key]
    shaped = _shape_text(text, max_chars, quotes, focus)
    with _SHAPED_LOCK:
        if len(_SHAPED) >= SHAPED_REMEMBERED:
            del _SHAPED[next(iter(_SHAPED))]
        _SHAPED[key] = shaped
    return shaped


SHAPED_REMEMBERED = 8192
_SHAPED: dict[tuple[bytes, int, tuple[str, ...], tuple[str, ...]], Shaped | None] = {}
_BUDGETS: dict[tuple[bytes, int, tuple[str, ...], tuple[str, ...]], int] = {}
_SHAPED_LOCK = threading.Lock()


def _shape_text(text: str, max_chars: int, quotes: Sequence[str], focus: Sequence[str]) -> Shaped | None:
    if not quotes:
        shaped = shape_json(text, max_chars)
        if shaped is not None:
            return shaped
    read = _ranked(text, tuple(quotes), tuple(focus))
    if read is None:
        return None
    lines, ranked, ranks = read
    picked: Picked = pick(lines, ranks, max_chars)
    body = render(lines, picked, ranked.note, ranked.unit)
    if len(body) >= len(text):
        return None
    keeps = ranked.keeps + (", text later calls quote" if MUST in ranks else "")
    return Shaped(body, ranked.kind, keeps, picked.chars, len(lines) - len(picked.kept), len(lines), ranked.unit)


@lru_cache(maxsize=64)
def _ranked(text: str, quotes: tuple[str, ...], focus: tuple[str, ...]) -> tuple[list[str], Ranked, list[int]] | None:
    """(lines, kind, ranks with the quotes' lines `MUST`) of `text`, None for text of no kind
    and no quote (remembered: a result is shaped again at a tighter budget)."""
    lines = text.split("\n")
    if len(lines) < 3 and not quotes:
        return None
    ranked = classify(lines, focus, text)
    if ranked is None:
        if not quotes:
            return None
        ranked = Ranked("", "first and last lines", [FILLER] * len(lines))
    ranks = list(ranked.ranks)
    for quote in quotes:
        start = text.find(quote)
        if start >= 0:
            first, last = text.count("\n", 0, start), text.count("\n", 0, start + max(len(quote) - 1, 0))
            for i in range(first, last + 1):
                ranks[i] = MUST
    return lines, ranked, ranks


class _Shrink:
    def __init__(self, head: int, tail: int, chars: int) -> None:
        self.head, self.tail, self.chars = head, tail, chars
        self.items_out = 0
        self.cut_strings = 0

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list):
            head, tail = self.head, self.tail
            if len(value) > head + tail + 1:
                left = len(value) - head - tail
                self.items_out += left
                note = f"[... {left:,} more items; {len(value):,} in all ...]"
                return [*map(self, value[:head]), note, *map(self, value[len(value) - tail :])]
            return [self(item) for item in value]
        if isinstance(value, dict):
            return {key: self(item) for key, item in value.items()}
        if isinstance(value, str) and len(value) > self.chars + 24:
            self.cut_strings += 1
            return value[: self.chars] + f"[... +{len(value) - self.chars:,} chars]"
        return value


@lru_cache(maxsize=16)
def _json_value(text: str) -> Any:
    """The object or array `text` parses as, else None."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None


def shape_json(text: str, max_chars: int) -> Shaped | None:
    """A JSON object or array shrunk to `max_chars` (None: not JSON, or no round fits)."""
    value = _json_value(text)
    if value is None:
        return None
    for head, tail, chars in JSON_ROUNDS:
        shrink = _Shrink(head, tail, chars)
        body = json.dumps(shrink(value), ensure_ascii=False, separators=(", ", ": "))
        if len(body) <= max_chars and len(body) < len(text):
            keeps = "structure, ends of long arrays"
            if shrink.cut_strings:
                keeps += f", strings cut at {chars}"
            return Shaped(body, "JSON", keeps, len(body), shrink.items_out, 0, "items")
    return None
