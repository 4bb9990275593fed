"""What the groups after a tool result say about it: repeats, quotes, newer results of its tool.

Problem: whether a result is repeated later, whether a later call quotes it verbatim (an edit's
`old_string`), and how many newer results its tool produced all depend on what follows it. A
result's rendering must not change from turn to turn (prompt caches), so `trim_tool_results`
only lets a result see the groups up to a horizon that stays put until its trim boundary moves
(`context_horizon`); this module reads those groups.

Rules:
- a later result is a *twin* when its text is identical (any tool), a *near* candidate when it
  comes from the same tool with the same arguments (compared as parsed JSON);
- a *quote* is verbatim text a later call passes: values of `old_string` / `oldText` / `old_str`
  / `search` (Claude Code's Edit and MultiEdit, pi's edit, Codex's and others' edit tools), the
  removed and context lines of a patch (`apply_patch`, `*** Begin Patch` or unified hunks), the
  pattern of a `sed s/PATTERN/.../` with no regex syntax in it, and file paths (`file_path`,
  `path`: a listing or grep hit the model opened); at least `MIN_QUOTE` characters;
- a result holds a quote for safety when it contains it and no result between it and the
  quoting call does (it is the newest result the quote can have come from).

Invariant: pure; reads the groups, never changes them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from policies.groups import Group
from policies.text import call_arguments, call_name, content_text, tool_calls

MIN_QUOTE = 8
QUOTE_KEYS = frozenset({"old_string", "oldText", "old_text", "old_str", "search", "original"})
PATH_KEYS = frozenset({"file_path", "filePath", "path", "notebook_path"})
FOCUS_KEYS = frozenset({"pattern", "query", "regex", "search", "symbol", "glob"})
_SED = re.compile(r"\bsed\b[^|;&]*?\bs([/|#,])((?:\\.|(?!\1).)+)\1")
_GREP = re.compile(r"\b(?:grep|rg|ag|ack)\s+(?:-{1,2}[\w=-]+\s+)*(?:'([^']+)'|\"([^\"]+)\"|([^\s|;&'\"-][^\s|;&]*))")
_REGEX_SYNTAX = re.compile(r"[.*+?^$()\[\]{}|\\]")


@dataclass(frozen=True, slots=True)
class Result:
    seq: int
    tool: str
    arguments: str
    """canonical: the parsed JSON re-serialized with sorted keys (the raw text when not JSON)"""
    text: str


def call_of(group: Group, tool_call_id: str) -> tuple[str, str]:
    """(name, raw arguments) of the call of `group` that `tool_call_id` answers."""
    if group.kind == "tool_call":
        for call in tool_calls(group.items[0].message):
            if call.get("id") == tool_call_id:
                return call_name(call), call_arguments(call)
    return "unknown", ""


@lru_cache(maxsize=4096)
def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


@lru_cache(maxsize=4096)
def canonical(arguments: str) -> str:
    """Arguments as compared: parsed JSON with sorted keys (pi re-stringifies them)."""
    parsed = _parsed(arguments)
    if isinstance(parsed, str) and parsed is arguments:
        return arguments
    return json.dumps(parsed, sort_keys=True, ensure_ascii=False)


def _strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, Mapping):
        for name, item in value.items():
            yield from _strings(item, str(name))
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, key)


def _patch_quotes(patch: str) -> list[str]:
    """Runs of the removed and context lines of a patch: text the file held verbatim."""
    out: list[str] = []
    run: list[str] = []
    for line in patch.split("\n"):
        if line.startswith(("-", " ")) and not line.startswith(("---", "*** ")):
            run.append(line[1:])
            continue
        if run:
            out.append("\n".join(run))
            run = []
    if run:
        out.append("\n".join(run))
    return out


@lru_cache(maxsize=4096)
def quotes_of(arguments: str) -> tuple[str, ...]:
    """The verbatim quotes of one call's arguments (see the module doc)."""
    found: list[str] = []
    for key, value in _strings(_parsed(arguments)):
        if key in QUOTE_KEYS or key in PATH_KEYS:
            found.append(value)
        elif "*** Begin Patch" in value or re.search(r"^@@ ", value, re.M):
            found.extend(_patch_quotes(value))
        else:
            found.extend(
                m.group(2) for m in _SED.finditer(value) if not _REGEX_SYNTAX.search(m.group(2).replace("\\/", ""))
            )
    return tuple(dict.fromkeys(q for q in found if len(q.strip()) >= MIN_QUOTE))


@lru_cache(maxsize=4096)
def focus_of(arguments: str) -> tuple[str, ...]:
    """What the call producing a result looked for (search patterns, a grep's pattern): the
    lines around it are the result's focus."""
    found: list[str] = []
    for key, value in _strings(_parsed(arguments)):
        if key in FOCUS_KEYS:
            found.append(value)
        elif key in ("command", "cmd", ""):
            for match in _GREP.finditer(value):
                found.append(next(g for g in match.groups() if g))
    return tuple(dict.fromkeys(term for term in found if 2 <= len(term) <= 200 and not _REGEX_SYNTAX.fullmatch(term)))


class Later:
    """The tool calls and results of the groups after a slot, oldest first (built on demand)."""

    def __init__(self, groups: Sequence[Group]) -> None:
        self.results: list[Result] = []
        self._arguments: list[tuple[int, str]] = []
        """(how many later results come before the call, its raw arguments), per later call"""
        for group in groups:
            if group.kind != "tool_call":
                continue
            calls = {str(call.get("id", "")): call for call in tool_calls(group.items[0].message)}
            for call in calls.values():
                self._arguments.append((len(self.results), call_arguments(call)))
            for item in group.items[1:]:
                message = item.message
                called = calls.get(str(message.get("tool_call_id", "")))
                name, arguments = (call_name(called), call_arguments(called)) if called is not None else ("unknown", "")
                text = content_text(message.get("content"))
                self.results.append(Result(item.seq, name, canonical(arguments), text))

    def twin(self, text: str) -> int | None:
        """The newest later result with exactly this text (None: none, or `text` is empty)."""
        if not text:
            return None
        size = len(text)
        for result in reversed(self.results):
            if len(result.text) == size and result.text == text:
                return result.seq
        return None

    def near(self, tool: str, arguments: str, text: str) -> Result | None:
        """The newest later result of the same call (tool and arguments) with other text."""
        key = canonical(arguments)
        for result in reversed(self.results):
            if result.tool == tool and result.arguments == key and result.text and result.text != text:
                return result
        return None

    def count(self, tool: str) -> int:
        return sum(1 for result in self.results if result.tool == tool)

    def quotes(self, text: str, after: Sequence[str] = ()) -> tuple[str, ...]:
        """The later calls' quotes `text` holds for safety: `text` contains the quote and no
        result between (`after`: the texts of the results after it in its own group, then the
        later results before the quoting call) does."""
        out: list[str] = []
        for before, arguments in self._arguments:
            for quote in quotes_of(arguments):
                if quote in out or quote not in text:
                    continue
                if any(quote in other for other in after):
                    continue
                if any(quote in result.text for result in self.results[:before]):
                    continue
                out.append(quote)
        return tuple(out)
