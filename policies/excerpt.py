"""Keep the lines of a long tool result that matter, within a character budget.

Problem: head + tail keeps the first and last lines of a result whatever they are; a test run's
failures, a log's one ERROR line, a diff's hunk headers sit in the middle. A content kind
(`policies.content_kinds`) ranks every line; this module picks lines by rank until the budget is
spent and renders the excerpt, each left-out run of lines replaced by one line that says how many
lines it stood for (and, for logs, of which levels).

Rules:
- ranks: `MUST` (0) lines are kept whatever the budget (text a later tool call quotes verbatim,
  `policies.later`); then 1 (the key lines), 2, 3 ... `FILLER`; ties go to the lines nearest
  either end (so what budget is left after the key lines fills like head + tail);
- the budget counts every kept line, its newline and the gap lines (`GAP_COST` each);
- a key line (rank <= 2) longer than what is left is cut, the cut said on the line;
- the excerpt is returned only when it is shorter than the text it stands for.

Invariant: pure and deterministic: the same (lines, ranks, budget) give the same excerpt.

Example::

    pick(["a", "ERROR x", "b", "c"], [FILLER, 1, FILLER, FILLER], 30)
    # keeps "ERROR x", then the ends as the budget allows; render() -> "ERROR x\\n[... 3 lines left out ...]"
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MUST = 0
FILLER = 9
GAP_COST = 27
"""what one gap line costs the budget (`[... 123 lines left out ...]` and its newline)"""
CUT_AT = 2
"""lines of this rank or better are cut to fit rather than left out"""
MIN_CUT = 60
"""a line is cut only when at least this many characters of it fit"""

GapNote = Callable[[Sequence[str]], str]
"""what the lines of one gap were, for its gap line ("37 INFO, 2 DEBUG"); "" for nothing"""


@dataclass(frozen=True, slots=True)
class Picked:
    """The kept line numbers (ascending) and, for lines kept cut, their kept text."""

    kept: tuple[int, ...]
    cut: dict[int, str]
    chars: int
    """characters of the kept text (lines as kept, without newlines or gap lines)"""


def pick(lines: Sequence[str], ranks: Sequence[int], budget: int) -> Picked:
    """The lines to keep: by rank, then nearest an end, within `budget` (MUST lines always)."""
    n = len(lines)
    last = n - 1
    order = sorted(range(n), key=lambda i: (ranks[i], min(i, last - i), i))
    kept: list[int] = []  # ascending
    flags = bytearray(n)
    cut: dict[int, str] = {}
    used = GAP_COST if n else 0  # one gap stands for all the lines before any is kept
    chars = 0
    for i in order:
        rank = ranks[i]
        line = lines[i]
        left = i > 0 and not flags[i - 1]
        right = i < last and not flags[i + 1]
        gaps = int(left) + int(right) - 1  # the gap holding i splits, shrinks or closes
        cost = len(line) + 1 + gaps * GAP_COST
        if rank != MUST and used + cost > budget:
            room = budget - used - gaps * GAP_COST - 1
            if rank > CUT_AT or room < MIN_CUT:
                continue
            shown = cut_line(line, room)
            cut[i] = shown
            cost = len(shown) + 1 + gaps * GAP_COST
            line = shown
        flags[i] = 1
        kept.insert(bisect_left(kept, i), i)
        used += cost
        chars += len(line)
    return Picked(tuple(kept), cut, chars)


def cut_line(line: str, room: int) -> str:
    """`line` cut to `room` characters, saying how many were cut."""
    note = f" [... {len(line):,} chars, line cut]"
    return line[: max(0, room - len(note))] + note


def render(lines: Sequence[str], picked: Picked, note: GapNote | None = None, unit: str = "lines") -> str:
    """The kept lines in order, each left-out run as one `[... N lines left out ...]` line."""
    out: list[str] = []
    previous = -1
    for i in (*picked.kept, len(lines)):
        if i - previous > 1:
            out.append(gap_line(lines[previous + 1 : i], note, unit))
        if i < len(lines):
            out.append(picked.cut.get(i, lines[i]))
        previous = i
    return "\n".join(out)


def gap_line(gap: Sequence[str], note: GapNote | None, unit: str = "lines") -> str:
    what = note(gap) if note is not None else ""
    count = len(gap)
    word = unit if count != 1 else unit.rstrip("s")
    return f"[... {count:,} {word} left out{': ' + what if what else ''} ...]"
