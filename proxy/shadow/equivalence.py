"""Decision equivalence: did two answers to the same turn take the same next step?

A shadow pair holds the answer the client got (to the request ctxproxy sent, maybe rewritten) and
the answer to the client's own request sent again unrewritten. Both are read by their wire's
parser into the common message model (`Wire.response`, a stream's observer), so this module
compares chat-completions shaped assistant messages and never asks which API they came from.

Two answers are **equivalent** when:

1. their **kind** of next step is the same: `tool_call` (the answer calls at least one tool),
   `text` (no tool call, some non-blank text) or `stop` (neither);
2. for tool calls, the **tool names** are the same multiset, and each call's **arguments** equal
   the other's as canonical JSON (parsed, keys sorted), calls paired by name and then by their
   canonical arguments. Free-text fields are tolerated: two string values that are both free text
   (at least `FREE_TEXT_MIN_CHARS` characters with a space: a commit message, a description) are
   equal when their normalized text similarity is at least `TEXT_SIMILARITY`. Text that
   accompanies tool calls is commentary and is not compared;
3. for text and stop answers, the **finish reason** is the same and, for text, the normalized
   **text similarity** is at least `TEXT_SIMILARITY`.

Normalized text: lower case, punctuation dropped, split on whitespace. Similarity: difflib's
ratio over the two word sequences (2 * matching words / total words; 1.0 identical, 0.0
nothing in common), over the first `MAX_WORDS` words of each.

Example: `read_file({"path": "src/app.py"})` against `read_file({"path":"src/app.py"})` is
equivalent (same canonical JSON); against `read_file({"path": "src/db.py"})` it diverges with
`{"arguments": {"read_file": ...}}`; against a text answer it diverges with `{"kind": ...}`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from ..types import Message

TEXT_SIMILARITY = 0.6
"""The least normalized similarity of two texts (answers, or free-text arguments) that count as equal."""
FREE_TEXT_MIN_CHARS = 40
"""A string argument at least this long and containing a space is free text (compared by similarity)."""
MAX_WORDS = 2000
"""Words of each text compared: enough to tell two answers apart, bounded in cost."""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class Step:
    """What an answer does next: its kind, its tool calls (name, canonical arguments) in order,
    its text and its finish reason."""

    kind: str
    calls: tuple[tuple[str, Any], ...] = ()
    text: str = ""
    finish: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "finish": self.finish}
        if self.calls:
            out["tools"] = [{"name": name, "arguments": args} for name, args in self.calls]
        if self.kind == "text":
            out["text"] = self.text[:500]
        return out


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing two steps: equivalent or not, and where they differ."""

    equivalent: bool
    difference: dict[str, Any] = field(default_factory=dict)


def step_of(message: Message | None, finish: str | None) -> Step:
    """The next step an answer (common model) takes."""
    message = message or {}
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append((str(function.get("name", "")), _arguments(function.get("arguments"))))
    text = _text(message.get("content"))
    if calls:
        return Step("tool_call", tuple(calls), text, finish)
    return Step("text" if text.strip() else "stop", (), text, finish)


def compare(a: Step, b: Step) -> Verdict:
    """Whether `a` and `b` take the same next step (see the module docstring), and how not."""
    if a.kind != b.kind:
        return Verdict(False, {"kind": [a.kind, b.kind]})
    if a.kind == "tool_call":
        return _compare_calls(a.calls, b.calls)
    if a.finish != b.finish:
        return Verdict(False, {"finish": [a.finish, b.finish]})
    if a.kind == "text":
        score = similarity(a.text, b.text)
        if score < TEXT_SIMILARITY:
            return Verdict(False, {"text_similarity": round(score, 4)})
        return Verdict(True, {"text_similarity": round(score, 4)})
    return Verdict(True)


def similarity(a: str, b: str) -> float:
    """The normalized text similarity of `a` and `b`, 0.0 to 1.0."""
    words_a, words_b = _words(a), _words(b)
    if not words_a and not words_b:
        return 1.0
    return SequenceMatcher(None, words_a, words_b, autojunk=False).ratio()


def _compare_calls(a: tuple[tuple[str, Any], ...], b: tuple[tuple[str, Any], ...]) -> Verdict:
    names_a, names_b = Counter(name for name, _ in a), Counter(name for name, _ in b)
    if names_a != names_b:
        return Verdict(False, {"tools": [sorted(names_a.elements()), sorted(names_b.elements())]})
    differing: dict[str, list[Any]] = {}
    for (name, args_a), (_, args_b) in zip(_ordered(a), _ordered(b), strict=True):
        if not _same(args_a, args_b):
            differing.setdefault(name, []).append([args_a, args_b])
    if differing:
        return Verdict(False, {"arguments": differing})
    return Verdict(True)


def _ordered(calls: tuple[tuple[str, Any], ...]) -> list[tuple[str, Any]]:
    """Calls paired by name, then by their canonical arguments (parallel calls come in any order)."""
    return sorted(calls, key=lambda call: (call[0], json.dumps(call[1], sort_keys=True, ensure_ascii=False)))


def _same(a: Any, b: Any) -> bool:
    """Equal as canonical JSON, free-text strings compared by similarity."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, str) and isinstance(b, str) and a != b and _free_text(a) and _free_text(b):
        return similarity(a, b) >= TEXT_SIMILARITY
    return type(a) is type(b) and a == b


def _free_text(value: str) -> bool:
    return len(value) >= FREE_TEXT_MIN_CHARS and " " in value.strip()


def _arguments(arguments: Any) -> Any:
    """Parsed arguments (a string that is no JSON stays a string): compared as canonical JSON."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return arguments
    return arguments if arguments is not None else {}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())[:MAX_WORDS]
