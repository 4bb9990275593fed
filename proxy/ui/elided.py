"""Which parts of a trimmed tool result were left out: the stored original cut into kept and
elided runs, for the diff view's "show the elided parts".

Problem: a trimmed result as sent is its marker and what it kept -- head + tail, the lines of an
excerpt with a gap line for each left-out run, a line cut short, a repeat's or a near-repeat's
marker. The inspector shows the original with what the model did not see highlighted, without
knowing which rule shaped it: every piece of the sent text that is not a marker is found in the
original, in order, from where the previous piece ended; what no piece covers was elided.

Invariant: the segments' texts joined are the original, byte for byte.

Example::

    segments("a\\nb\\nc\\nd", "[trimmed: ...]\\na\\n[... 2 lines left out ...]\\nd")
    # [("a", False), ("\\nb\\nc\\n", True), ("d", False)]
"""

from __future__ import annotations

import re

MARKER_LINE = re.compile(
    r"^\[(?:trimmed|repeat|near-repeat|cut for summarization): [^\]\n]*\]$|^\[\.\.\. [\d,]+ \w+ left out[^\]\n]*\]$"
)
"""A line the policies wrote (`trim_result`'s markers, an excerpt's gap lines): never the original's."""
CUT = re.compile(r" \[\.\.\. [\d,]+ chars, line cut\]$")
"""The end of a line an excerpt kept cut (`excerpt.cut_line`): what precedes it is the line's start."""

Segment = tuple[str, bool]
"""(text of the original, whether it was elided)"""


def pieces(sent: str) -> list[str]:
    """The runs of the sent text that are the original's: its lines between markers, joined; a
    line kept cut ends its run with the start it kept."""
    out: list[str] = []
    run: list[str] = []
    for line in sent.split("\n"):
        cut = CUT.search(line)
        if cut:
            run.append(line[: cut.start()])  # the line's start ends the run: its rest was left out
        if MARKER_LINE.match(line) or cut:
            if run:
                out.append("\n".join(run))
            run = []
            continue
        run.append(line)
    if run:
        out.append("\n".join(run))
    return [piece for piece in out if piece]


def segments(original: str, sent: str) -> list[Segment]:
    """`original` cut into kept and elided runs by what of it `sent` holds (see the module doc)."""
    kept: list[tuple[int, int]] = []
    at = 0
    for piece in pieces(sent):
        found = original.find(piece, at)
        if found < 0:
            continue  # not the original's text (a near-repeat's delta lines): the original stays elided there
        kept.append((found, found + len(piece)))
        at = found + len(piece)
    out: list[Segment] = []
    at = 0
    for start, end in kept:
        if start > at:
            out.append((original[at:start], True))
        out.append((original[start:end], False))
        at = end
    if at < len(original):
        out.append((original[at:], True))
    return out
