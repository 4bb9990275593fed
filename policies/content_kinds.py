"""What kind of text a tool result is, and which of its lines matter: the ranks `excerpt` keeps by.

Problem: the part of a result worth keeping depends on what it is, not on which tool printed it
(`bash` prints test runs, logs, diffs and files alike). Each kind below is recognized from the
text and ranks its lines (`excerpt.MUST` 0 = kept whatever the budget, 1 = key, ... `FILLER`).

Kinds, tried in this order (the first that recognizes the text wins):
- `test output` (pytest, unittest, go test, cargo test, jest): the summary line, each failure's
  name, its `E` lines and last frame (`path.py:46: AssertionError`); passes and progress last;
- `diff`: file headers, hunk headers, then changed lines, then context;
- `log` (most lines carry a level or a timestamp): ERROR/FATAL and exception lines with two lines
  of context, WARN lines with one, the first and last lines; each gap says which levels it held;
- `table` (most lines have the same number of `,`, tab or `|` separators): the header and a
  sample of rows;
- `source` (numbered lines as file viewers print them, or a definition every 40 lines): definitions and
  signatures, the lines around the call's focus (the pattern it searched for);
- `repetitive output` (half the lines or more follow one pattern): the lines that break it;
- `output`: any other text with error lines, a traceback or `path:line` references: those lines
  and the traceback's last frame.
Every kind but `diff`, `table` and `source` also ranks error lines, `path:line` references and
Python tracebacks (the header, the last frame and the exception line) as key. Text of no kind is
left to head + tail. `Ranked.key` says which ranks are the key lines an excerpt's budget grows
for (`shaping.excerpt_budget`).

Invariant: pure; ranks depend on the lines and the focus terms only.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from policies.excerpt import FILLER, GapNote

ERROR_LINE = re.compile(
    r"(?:Error|Exception)(?::|$)|Traceback \(most recent call last\)"
    r"|(?:ERROR|FATAL|FAILED|FAIL|PANIC|CRITICAL)\b|(?:error|fatal|panic)(?:\[\w+\])?:|panicked at",
    re.M,
)
"""an error line (a leading literal, no leading `\\b`: the regex engine skips ahead to it)"""
_LEVEL = re.compile(r"(TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|FATAL|CRITICAL|SEVERE)\b")
_STAMP = re.compile(r"^[^\w\n]{0,2}(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\d\d:\d\d:\d\d|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d)")
_TEST_SUMMARY = re.compile(
    r"^=+ .*\b(?:passed|failed|errors?|skipped|deselected|xfailed|no tests ran)\b.*=+$"
    r"|^Ran \d+ tests? in |^(?:OK|FAILED)(?: \(.*\))?$|^test result: |^Tests:\s+\d|^(?:FAIL|ok)\s+\S+\s+[\d.]+s$"
)
_TEST_FAILURE = re.compile(
    r"^(?:FAILED|ERROR) \S+|^(?:FAIL|ERROR): \w|^--- FAIL|^\s*● |^test \S+ \.\.\. FAILED$|^[\w./\\-]+\.\w+:\d+: \w+"
)
_TEST_MARK = re.compile(
    r"^=+ (?:test session starts|FAILURES|ERRORS|short test summary info) =+$"
    r"|^Ran \d+ tests? in |^=== RUN |^running \d+ tests?$"
)
_TEST_SECTION = re.compile(r"^_{3,} .+ _{3,}$|^={5,}$|^-{5,}$")
_DIFF_FILE = re.compile(
    r"^(?:diff --git |--- |\+\+\+ |index [0-9a-f]+\.\.|new file mode|deleted file mode"
    r"|rename (?:from|to) |Binary files )"
)
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_NUMBERED = re.compile(r"^[ \t]*\d+(?:→|\t|:|\|)")
_NUMBER_PREFIX = re.compile(r"^[ \t]*\d+(?:→|\t|: ?|\|)")
_DEFINITION = re.compile(
    r"^[ \t]*(?:(?:async\s+)?def\s|class\s|(?:export\s+)?(?:default\s+)?(?:async\s+)?function\b"
    r"|(?:pub(?:\([\w:]+\))?\s+)?(?:async\s+)?fn\s|func\s|impl\b|struct\s|enum\s|trait\s|interface\s|type\s+\w+\s*=|(?:public|private|protected|"
    r"internal|static)\s[\w<>\[\], ]*\(|module\s|#define\s|(?:const|let|var)\s+\w+\s*=\s*(?:async\s*)?\()"
)
_DECORATOR = re.compile(r"^[ \t]*@\w")
_IMPORT = re.compile(r"^[ \t]*(?:import\s|from\s+\S+\s+import\s|#include\s|use\s+\w|require\()")
_DIGITS = re.compile(r"\d+")
_BLANK = re.compile(r"^[ \t\r\f\v]*$", re.M)
_LEVELED = re.compile(r"^(?:[^\n]*?" + _LEVEL.pattern + "|" + _STAMP.pattern[1:] + ")", re.M)
_TEST_ANY = re.compile(f"(?:{_TEST_MARK.pattern})|(?:{_TEST_SUMMARY.pattern})", re.M)
_HUNK_ANY = re.compile(_HUNK.pattern, re.M)
_STAMP_ANY = re.compile(_STAMP.pattern, re.M)
_NUMBERED_ANY = re.compile(_NUMBERED.pattern, re.M)
_DEFINITION_ANY = re.compile(_DEFINITION.pattern, re.M)
_IMPORT_ANY = re.compile(_IMPORT.pattern, re.M)
_ERROR_ANY = ERROR_LINE
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
REFERENCE = re.compile(r"(?<=[\w./-])\.\w{1,6}:\d")
"""a `path:line` reference (`src/app.py:46`, `lib.rs:12:5`): where a warning, a frame or a hit is
(found by its `.ext:digit`, a literal first, so a long run of word characters is read once)"""
SAMPLE = 60
"""lines a costly kind test reads first: a kind that fails on them is not tried on the rest"""
_SEPARATORS = (",", "\t", "|")


@dataclass(frozen=True, slots=True)
class Ranked:
    """A kind's reading of a text: its name, what its excerpt keeps, the rank of each line."""

    kind: str
    keeps: str
    ranks: list[int]
    note: GapNote | None = None
    unit: str = "lines"
    key: int = 0
    """lines ranked this or better (`MUST` aside) are the key lines the excerpt's budget grows
    for (`shaping.excerpt_budget`); 0: the kind has none"""


class _Read:
    """A text as the kinds read it: recognized by regexes over the whole text (C loops, each
    tried first with a `search` that stops at the first hit), ranked line by line only by the
    kind that recognized it."""

    __slots__ = ("_filled", "_starts", "lines", "text")

    def __init__(self, text: str, lines: Sequence[str]) -> None:
        self.text, self.lines = text, lines
        self._filled = -1
        self._starts: list[int] | None = None

    @property
    def starts(self) -> list[int]:
        """The offset in `text` where each line starts."""
        if self._starts is None:
            self._starts = [0, *accumulate(len(line) + 1 for line in self.lines[:-1])]
        return self._starts

    @property
    def filled(self) -> int:
        """Lines with more than whitespace."""
        if self._filled < 0:
            self._filled = len(self.lines) - len(_BLANK.findall(self.text))
        return self._filled


def classify(lines: Sequence[str], focus: Sequence[str] = (), text: str | None = None) -> Ranked | None:
    """The first kind that recognizes `lines` (see the module doc), or None. `text`: the lines
    joined by newlines, when the caller has it."""
    text = "\n".join(lines) if text is None else text
    read = _Read(text, lines)
    for kind in (_test_output, _diff, _log, _table, _source, _repetitive, _output):
        ranked = kind(read, focus)
        if ranked is not None:
            return ranked
    return None


def _ranks(lines: Sequence[str]) -> list[int]:
    return [FILLER] * len(lines)


def _lower(ranks: list[int], i: int, rank: int) -> None:
    if 0 <= i < len(ranks) and rank < ranks[i]:
        ranks[i] = rank


def _around(ranks: list[int], i: int, radius: int, rank: int) -> None:
    for j in range(i - radius, i + radius + 1):
        _lower(ranks, j, rank)


def _ends(ranks: list[int], count: int, rank: int) -> None:
    n = len(ranks)
    for i in (*range(min(count, n)), *range(max(0, n - count), n)):
        _lower(ranks, i, rank)


def _matching_lines(read: _Read, pattern: re.Pattern[str]) -> list[int]:
    """Indexes of the lines of `read` where `pattern` (a multiline regex) matches: one pass of
    the regex over the whole text, offsets mapped to lines by bisection."""
    starts = read.starts
    found: list[int] = []
    for match in pattern.finditer(read.text):
        line = bisect_right(starts, match.start()) - 1
        if not found or found[-1] != line:
            found.append(line)
    return found


def _errors(read: _Read, ranks: list[int]) -> bool:
    """Rank error lines 1 (a line of context 4), `path:line` references 2 (warnings, pytest's
    frames) and Python tracebacks: the header 2, the last frame and the exception line 1, the
    last frame's code 2, the other frames 4. Whether any error was found."""
    lines = read.lines
    n = len(lines)
    for i in _matching_lines(read, REFERENCE) if REFERENCE.search(read.text) else ():
        _lower(ranks, i, 2)
    errors = _matching_lines(read, ERROR_LINE)
    tracebacks = set(_matching_lines(read, _TRACEBACK))
    for i in errors:
        if i in tracebacks:
            _lower(ranks, i, 2)
            j, frame = i + 1, -1
            while j < n and (lines[j].startswith((" ", "\t")) or not lines[j]):
                if lines[j].lstrip().startswith('File "'):
                    frame = j
                    _lower(ranks, j, 4)  # every frame when there is room, the last one first
                j += 1
            if frame >= 0:
                _lower(ranks, frame, 1)
                _lower(ranks, frame + 1, 2)
            _lower(ranks, j, 1)
        else:
            _lower(ranks, i, 1)
            _around(ranks, i, 1, 4)
    return bool(errors)


def _focus(lines: Sequence[str], focus: Sequence[str], ranks: list[int], rank: int, radius: int) -> bool:
    terms = [term.casefold() for term in focus if term]
    found = False
    if not terms:
        return found
    for i, line in enumerate(lines):
        folded = line.casefold()
        if any(term in folded for term in terms):
            found = True
            _lower(ranks, i, rank)
            _around(ranks, i, radius, rank + 2)
    return found


def _test_output(read: _Read, focus: Sequence[str]) -> Ranked | None:
    if not _TEST_ANY.search(read.text):
        return None
    lines = read.lines
    ranks = _ranks(lines)
    _errors(read, ranks)
    for i, line in enumerate(lines):
        if _TEST_SUMMARY.search(line) or _TEST_FAILURE.search(line):
            _lower(ranks, i, 1)
        elif line.startswith("E ") or line.startswith("E\t"):
            _lower(ranks, i, 2)
        elif _TEST_SECTION.search(line) or _TEST_MARK.search(line):
            _lower(ranks, i, 3)
        elif line.startswith(">"):
            _lower(ranks, i, 4)
    _ends(ranks, 1, 5)
    return Ranked("test output", "failures, last frames, summary", ranks, key=2)


def _diff(read: _Read, focus: Sequence[str]) -> Ranked | None:
    text = read.text
    files = text.startswith("diff --git ") or "\ndiff --git " in text
    if not files and not _HUNK_ANY.search(text):
        return None
    lines = read.lines
    ranks = _ranks(lines)
    for i, line in enumerate(lines):
        if line.startswith("diff --git "):
            ranks[i] = 1
        elif line.startswith(("--- ", "+++ ")):
            ranks[i] = 4 if files else 1  # `diff --git` already names the files
        elif _HUNK.match(line):
            ranks[i] = 2
        elif _DIFF_FILE.match(line):
            ranks[i] = 5
        elif line.startswith(("+", "-")):
            ranks[i] = 3
        elif line.startswith(" "):
            ranks[i] = 6
    _focus(lines, focus, ranks, 2, 1)
    return Ranked("diff", "file and hunk headers, changed lines", ranks, key=1)


def _level_note(gap: Sequence[str]) -> str:
    levels = Counter(match.group(1) for match in map(_LEVEL.search, gap) if match)
    return ", ".join(f"{count:,} {level}" for level, count in levels.most_common())


def _log(read: _Read, focus: Sequence[str]) -> Ranked | None:
    text = read.text
    if not (_LEVEL.search(text) or _STAMP_ANY.search(text)) or read.filled < 8:
        return None
    stamped = len(_STAMP_ANY.findall(text))
    leveled = stamped if stamped * 10 >= read.filled * 4 else len(_LEVELED.findall(text))
    if leveled * 10 < read.filled * 4:
        return None
    lines = read.lines
    ranks = _ranks(lines)
    for i, line in enumerate(lines):
        level = _LEVEL.search(line)
        name = level.group(1) if level else ""
        if name in ("ERROR", "FATAL", "CRITICAL", "SEVERE"):
            _lower(ranks, i, 1)
            _around(ranks, i, 1, 2)
            _around(ranks, i, 2, 3)
        elif name in ("WARN", "WARNING"):
            _lower(ranks, i, 2)
            _around(ranks, i, 1, 4)
    _errors(read, ranks)
    _focus(lines, focus, ranks, 2, 1)
    _ends(ranks, 2, 3)
    return Ranked("log", "errors, warnings, first and last lines", ranks, _level_note, key=1)


def _table(read: _Read, focus: Sequence[str]) -> Ranked | None:
    if read.filled < 6:
        return None
    lines, text = read.lines, read.text
    separators = [sep for sep in _SEPARATORS if text.count(sep) * 10 >= read.filled * 8]  # one a row at least
    if not separators:
        return None
    filled = [line for line in lines[: SAMPLE * 2] if line.strip()][:SAMPLE]
    for separator in separators:
        if _aligned(filled, separator) and _aligned([line for line in lines if line.strip()], separator):
            break
    else:
        return None
    ranks = _ranks(lines)
    first = next(i for i, line in enumerate(lines) if line.strip())
    _lower(ranks, first, 1)
    if first + 1 < len(lines) and set(lines[first + 1].strip()) <= set("|-:+= "):
        _lower(ranks, first + 1, 1)  # a markdown or box separator under the header
    for i in range(first + 1, min(first + 4, len(lines))):
        _lower(ranks, i, 3)
    _ends(ranks, 1, 3)
    _focus(lines, focus, ranks, 2, 0)
    return Ranked("table", "header, sample rows", ranks, unit="rows")


def _aligned(filled: Sequence[str], separator: str) -> bool:
    """Whether 80% of `filled` hold the same number (at least one) of `separator`."""
    width, rows = Counter(line.count(separator) for line in filled).most_common(1)[0]
    return width >= 1 and rows * 10 >= len(filled) * 8


def _code(line: str) -> str:
    match = _NUMBER_PREFIX.match(line)
    return line[match.end() :] if match else line


def _source(read: _Read, focus: Sequence[str]) -> Ranked | None:
    filled, text = read.filled, read.text
    if filled < 8:
        return None
    numbered = _NUMBERED_ANY.search(text) is not None and len(_NUMBERED_ANY.findall(text)) * 10 >= filled * 7
    if not numbered:
        found = len(_DEFINITION_ANY.findall(text)) if _DEFINITION_ANY.search(text) else 0
        if found < 2 or found * 40 < filled:
            return None
    lines = read.lines
    if numbered:
        code: Sequence[str] = [_code(line) for line in lines]
        definitions = [i for i, line in enumerate(code) if _DEFINITION.match(line)]
    else:
        code, definitions = lines, _matching_lines(read, _DEFINITION_ANY)
    ranks = _ranks(lines)
    for i in definitions:
        _lower(ranks, i, 2)
        j = i - 1
        while j >= 0 and _DECORATOR.match(code[j]):
            _lower(ranks, j, 4)
            j -= 1
    for i in (
        _matching_lines(read, _IMPORT_ANY) if not numbered else (i for i, c in enumerate(code) if _IMPORT.match(c))
    ):
        _lower(ranks, i, 6)
    kept = "definitions"
    if _focus(code, focus, ranks, 1, 2):
        kept += ", lines around " + ", ".join(repr(term) for term in focus[:3])
    _ends(ranks, 2, 3)
    return Ranked("source", kept, ranks)


def template(line: str) -> str:
    """A line's pattern: its first three words, digits as `#`."""
    return _DIGITS.sub("#", " ".join(line.split(None, 3)[:3]))


def _repetitive(read: _Read, focus: Sequence[str]) -> Ranked | None:
    if read.filled < 8:
        return None
    lines = read.lines
    sample = Counter(template(line) for line in lines[: SAMPLE * 2] if line.strip())
    if sample.most_common(1)[0][1] * 10 < sum(sample.values()) * 3:
        return None  # no pattern in the first lines: not one over the whole text either (mostly)
    filled = [line for line in lines if line.strip()]
    patterns = Counter(template(line) for line in filled)
    common, count = patterns.most_common(1)[0]
    if count * 2 < len(filled):
        return None
    rare = {pattern for pattern, n in patterns.items() if n <= 2}
    outliers = sum(patterns[p] for p in rare)
    ranks = _ranks(lines)
    outlier_rank = 1 if outliers * 4 <= len(filled) else 3
    for i, line in enumerate(lines):
        if line.strip() and template(line) in rare:
            _lower(ranks, i, outlier_rank)
    if not _errors(read, ranks) and not outliers:
        return None  # the same line over and over: head + tail says as much
    _focus(lines, focus, ranks, 2, 0)
    _ends(ranks, 1, 4)

    def note(gap: Sequence[str]) -> str:
        alike = sum(1 for line in gap if template(line) == common)
        return f"{alike:,} like {common!r}" if alike else ""

    return Ranked("repetitive output", "lines breaking the pattern", ranks, note, key=1)


def _output(read: _Read, focus: Sequence[str]) -> Ranked | None:
    if not _ERROR_ANY.search(read.text) and not REFERENCE.search(read.text):
        return None
    lines = read.lines
    ranks = _ranks(lines)
    if not _errors(read, ranks) and min(ranks, default=FILLER) == FILLER:
        return None
    _focus(lines, focus, ranks, 2, 0)
    _ends(ranks, 2, 4)
    return Ranked("output", "error lines, last frames", ranks, key=2)
