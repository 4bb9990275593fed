"""Repeats, lossless: a tool result the history holds again later becomes a marker naming where.

Problem: agents re-read the files they just edited and re-run the same commands; an old result
identical to a later one costs its whole size for nothing, and one that differs from a later one
in a few lines (a file re-read after a small edit, a test re-run) costs all its unchanged lines
again. Both can go without losing a byte: what the marker names, plus what it says, is the text.

Markers (the first line of the result as sent; `seq` is the result's own event):
- exact: `[repeat: tool result of Read (event 12), 4,210 chars, identical to the result in event 80]`;
- near: `[near-repeat: tool result of Read (event 12), 4,210 chars: the result in event 80 with
  these lines changed (@@ -line,count +line,count @@, then the lines here)]`, then the hunks: a
  unified diff's hunk headers without context lines, each followed by its `+` lines (the lines
  of this result that replace `count` lines of event 80's from `line` on; counts, not the text,
  delimit them, so any line may follow). Lines are the text split at `\\n`, so the reconstruction
  is exact, carriage returns and a missing final newline included.
Both end, when the request offers the recall tool, with `; ctxproxy_recall can fetch it`.

Invariant: `reconstruct(marker_text, text_of)` returns exactly the original text, given the texts
of the events it names (what recall reads from the store); `near_repeat` checks it before it
returns a delta.

Example::

    delta = line_delta("a\\nb\\nc", "a\\nB\\nc")    # "@@ -2,1 +2,1 @@\\n+B"
    apply_delta("a\\nb\\nc", delta)                 # "a\\nB\\nc"
"""

from __future__ import annotations

import re
from collections.abc import Callable
from difflib import SequenceMatcher

MAX_DIFF_LINES = 20_000
"""results with more lines are not diffed (a quadratic worst case is not worth the saving)"""
_HUNK = re.compile(r"@@ -(\d+),(\d+) \+(\d+),(\d+) @@")
_REPEAT = re.compile(
    r"\[repeat: tool result of .* \(event (\d+)\), [\d,]+ chars, identical to the result in event (\d+)[;\]]"
)
_NEAR = re.compile(r"\[near-repeat: tool result of .* \(event (\d+)\), [\d,]+ chars: the result in event (\d+) with ")
MARKER_STARTS = ("[repeat: ", "[near-repeat: ")


def repeat_marker(tool: str, seq: int, chars: int, twin: int, recall: str = "") -> str:
    """The whole text sent for a result identical to event `twin`'s (`recall`: `recall_hint`)."""
    return (
        f"[repeat: tool result of {tool} (event {seq}), {chars:,} chars, "
        f"identical to the result in event {twin}{recall}]"
    )


def near_marker(tool: str, seq: int, chars: int, reference: int, recall: str = "") -> str:
    """The first line of a result sent as a delta against event `reference`'s."""
    return (
        f"[near-repeat: tool result of {tool} (event {seq}), {chars:,} chars: the result in event {reference} "
        f"with these lines changed (@@ -line,count +line,count @@, then the lines here){recall}]"
    )


def _span(low: int, high: int) -> str:
    count = high - low
    return f"{low + 1 if count else low},{count}"  # unified diff: an empty range names the line before


def line_delta(reference: str, original: str) -> str:
    """The hunks that turn `reference` into `original`, line by line ("" when they are equal)."""
    old, new = reference.split("\n"), original.split("\n")
    matcher = SequenceMatcher(None, old, new, autojunk=False)
    out: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out.append(f"@@ -{_span(i1, i2)} +{_span(j1, j2)} @@")
        out.extend("+" + line for line in new[j1:j2])
    return "\n".join(out)


def apply_delta(reference: str, delta: str) -> str | None:
    """`reference` with `delta`'s hunks applied; None when `delta` is not a well-formed delta of it."""
    old = reference.split("\n")
    lines = delta.split("\n") if delta else []
    out: list[str] = []
    at = 0  # lines of `old` consumed
    i = 0
    while i < len(lines):
        match = _HUNK.fullmatch(lines[i])
        if match is None:
            return None
        start, removed, _, added = (int(g) for g in match.groups())
        low = start - 1 if removed else start
        new = lines[i + 1 : i + 1 + added]
        if low < at or low + removed > len(old) or len(new) != added or not all(s.startswith("+") for s in new):
            return None
        out.extend(old[at:low])
        out.extend(s[1:] for s in new)
        at = low + removed
        i += 1 + added
    out.extend(old[at:])
    return "\n".join(out)


def near_repeat(reference: str, original: str) -> str | None:
    """The delta from `reference` to `original` when it is exact and shorter than half of
    `original` (else None: not near enough to be worth it)."""
    if reference == original or not reference or not original:
        return None
    old_lines, new_lines = reference.count("\n") + 1, original.count("\n") + 1
    if max(old_lines, new_lines) > MAX_DIFF_LINES or abs(len(reference) - len(original)) * 2 > len(original):
        return None
    delta = line_delta(reference, original)
    if len(delta) * 2 >= len(original) or apply_delta(reference, delta) != original:
        return None
    return delta


def reconstruct(text: str, text_of: Callable[[int], str | None]) -> str | None:
    """The original of a result sent as a repeat or near-repeat marker, from the texts of the
    events it names (`text_of(seq)`, None when unknown); None when `text` is no such marker."""
    head, _, rest = text.partition("\n")
    match = _REPEAT.fullmatch(head) or _REPEAT.match(head)
    if match is not None and head.endswith("]") and not rest:
        return text_of(int(match.group(2)))
    match = _NEAR.match(head)
    if match is not None and head.endswith("]"):
        reference = text_of(int(match.group(2)))
        return None if reference is None else apply_delta(reference, rest)
    return None


def marker_event(text: str) -> int | None:
    """The event a repeat or near-repeat marker stands for (its own seq), None for other text."""
    head = text.partition("\n")[0]
    match = _REPEAT.match(head) or _NEAR.match(head)
    return int(match.group(1)) if match else None
