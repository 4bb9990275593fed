"""What a client's re-rendering of its history stands for, for identity matching only.

Some clients do not send back the messages they were given: they re-render them. The identity
chain (`proxy.identify`) would see a different message and fork the conversation on every turn.
This module recognizes two such re-renderings, precisely, so `identify.canonical` can give them
the canonical form of what they render:

* **A text rendering of an answer's tool calls** (smolagents' `ToolCallingAgent`, which keeps its
  memory as text): the upstream answered `{"role": "assistant", "content": null, "tool_calls":
  [{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{\\"path\\":
  \\".\\"}"}}]}`; the next request carries that answer as `{"role": "assistant", "content":
  "Calling tools:\\n[{'id': 'call_1', 'type': 'function', 'function': {'name': 'ls', 'arguments':
  {'path': '.'}}}]"}`, the results following as user text (`Observation:\\n...`). `rendered_answer`
  reads the text back into the answer it renders. The rules, all of them required:
  the message is an assistant message without `tool_calls` whose content is one text (a string or a
  single text part); that text is `Calling tools:\\n` then a Python literal list, optionally
  preceded by the answer's own text and a newline (`I will look.\\nCalling tools:\\n[...]`); the
  list is not empty and every element is exactly `{'id': str, 'type': 'function', 'function':
  {'name': str, 'arguments': ...}}` with a non-empty id (nothing more, nothing less), the values
  what `repr` writes for JSON data (read in one linear pass, never evaluated). The answer it
  stands for has that text as its content and those calls, their arguments as JSON. The tool-call
  ids are the provider's own unique ids, and the chain hash covers the whole history before the
  message and the tenant, so a rendering can only ever equal an answer with the very same ids,
  names and arguments at the very same place of the same tenant's history: it never joins two
  conversations. Its risk is the other way round: an assistant message that merely quotes such a
  rendering, with the same ids and arguments, is taken for the answer it quotes.

* **Transient reminder parts** (`Transient.drop`): agents add a short `<system-reminder>` block that
  states today's date to a user message as a separate text part and do not keep it (Qwen Code
  re-sends its history on `--continue` without it; Claude Code adds "The date has changed"). Such a
  part is ignored when the message has other parts: the message is the same with or without it.
  The rule: a text part (`text` or `input_text`) of a user message whose text, stripped, is at
  most `max_chars` characters and matches one of the patterns whole (config `transient_parts`,
  `transient_max_chars`; DEFAULT_TRANSIENT_PARTS: one `<system-reminder>...</system-reminder>`
  block, no other reminder inside, whose body states the date). Longer reminders (Claude Code's
  project context, which also names the date, or Qwen Code's startup environment) are content: a
  change there still forks. The rule is for matching only: what is stored and sent upstream is the
  request as it came. Risk: two messages that differ only in such a part are one message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from . import codec
from .types import Message

CALLING_TOOLS = "Calling tools:\n"
RENDERING_MAX_CHARS = 1 << 18
"""A longer text is not read as a rendering (an answer's calls are rarely that long; reading a
literal costs about as much per byte as counting its tokens)."""

_REMINDER_BODY = r"(?:(?!</?system-reminder>).)*?"
DEFAULT_TRANSIENT_PARTS: tuple[str, ...] = (
    # Qwen Code's per-turn date ("The current date is: ...") and its startup line, Claude Code's
    # date reminders ("Today's date is ...", "The date has changed")
    rf"<system-reminder>{_REMINDER_BODY}\b(?:today's date is|the date has changed|current date)\b"
    rf"{_REMINDER_BODY}</system-reminder>",
)
"""Text parts that agents add to a user message and drop between requests, as regular expressions
matched against the whole stripped part (case-insensitive, `.` matches newlines). Codex and pi add
none to their messages (their date and environment ride in the system prompt, which is not
chained, or in a message of their own that they keep)."""
DEFAULT_TRANSIENT_MAX_CHARS = 400
TEXT_PARTS = frozenset({"text", "input_text"})


def text_of(content: Any) -> str | None:
    """The content's text when it is one text: a string or a single text part."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and len(content) == 1:
        part = content[0]
        if isinstance(part, dict) and part.get("type") in TEXT_PARTS and isinstance(part.get("text"), str):
            return str(part["text"])
    return None


def rendered_answer(message: Message) -> Message | None:
    """The assistant answer `message` renders as text (module docstring), or None when it is not
    such a rendering."""
    if message.get("role") != "assistant" or message.get("tool_calls"):
        return None
    text = text_of(message.get("content"))
    if text is None or len(text) > RENDERING_MAX_CHARS:
        return None
    at = text.rfind(CALLING_TOOLS)
    if at < 0 or (at > 0 and text[at - 1] != "\n"):
        return None
    calls = _calls(text[at + len(CALLING_TOOLS) :])
    if calls is None:
        return None
    return {"role": "assistant", "content": text[: max(at - 1, 0)], "tool_calls": calls}


_LITERAL_TOKEN = re.compile(
    r"""\s*(?:('[^'\\]*(?:\\.[^'\\]*)*'|"[^"\\]*(?:\\.[^"\\]*)*")"""
    r"|(True|False|None|-?inf|nan)|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|([\[\]{}:,]))",
    re.DOTALL,
)
_WORDS = {"True": "true", "False": "false", "None": "null", "inf": "1e999", "-inf": "-1e999", "nan": "NaN"}
_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|([\\'\"nrt]))")
_ESCAPED = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1) or match.group(2) or match.group(3)
    return chr(int(code, 16)) if code else _ESCAPED[match.group(4)]


def literal_value(literal: str) -> Any:
    """The value of a Python literal made of what `repr` writes for JSON data (lists, dicts,
    strings, numbers, True, False, None), read in one linear pass into JSON; None for anything
    else. `ast.literal_eval` would take seconds on a hostile megabyte."""
    out: list[str] = []
    at, end = 0, len(literal)
    while at < end:
        token = _LITERAL_TOKEN.match(literal, at)
        if token is None:
            if literal[at:].strip():
                return None
            break
        text, word, number, mark = token.groups()
        if text is not None:
            body = text[1:-1]
            if "\\" in body:
                unescaped = _ESCAPE.sub(_unescape, body)
                if "\\" in _ESCAPE.sub("", body):  # an escape repr never writes
                    return None
                body = unescaped
            out.append(json.dumps(body, ensure_ascii=False))
        else:
            out.append(_WORDS[word] if word is not None else number or mark)
        at = token.end()
    try:
        return codec.loads(" ".join(out))
    except codec.JsonRejected:
        return None


def _calls(literal: str) -> list[dict[str, Any]] | None:
    """The tool calls of a rendered list, their arguments as JSON; None unless every element has
    exactly the shape of a rendered call."""
    if not literal.startswith("[") or not literal.endswith("]"):
        return None
    value = literal_value(literal)
    if not isinstance(value, list) or not value:
        return None
    calls = []
    for call in value:
        if not isinstance(call, dict) or set(call) != {"id", "type", "function"} or call["type"] != "function":
            return None
        function, call_id = call["function"], call["id"]
        if not isinstance(call_id, str) or not call_id or not isinstance(function, dict):
            return None
        if set(function) != {"name", "arguments"} or not isinstance(function["name"], str):
            return None
        arguments = function["arguments"]
        if not isinstance(arguments, str):
            try:
                arguments = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            except (TypeError, ValueError):  # a literal JSON cannot spell (a tuple key, a set)
                return None
        calls.append(
            {"id": call_id, "type": "function", "function": {"name": function["name"], "arguments": arguments}}
        )
    return calls


@dataclass(frozen=True)
class Transient:
    """The transient-part rule (module docstring): which text parts of a user message identity
    ignores. Built once from the config (`Transient.of`); `DEFAULT_TRANSIENT` is the shipped one."""

    patterns: tuple[re.Pattern[str], ...]
    max_chars: int

    @classmethod
    def of(cls, patterns: tuple[str, ...], max_chars: int) -> Transient:
        """The rule from the config's pattern texts (`re.error` for one that does not compile)."""
        return cls(tuple(re.compile(p, re.IGNORECASE | re.DOTALL) for p in patterns), max_chars)

    def is_transient(self, part: Any) -> bool:
        """A short text part that one of the patterns matches whole."""
        if not self.patterns or not isinstance(part, dict) or part.get("type") not in TEXT_PARTS:
            return False
        text = part.get("text")
        if not isinstance(text, str) or len(text) > self.max_chars:
            return False
        text = text.strip()
        return any(pattern.fullmatch(text) for pattern in self.patterns)

    def drop(self, content: list[Any]) -> list[Any]:
        """The parts of a message's content without its transient ones, when any other part
        remains (a reminder alone is the message)."""
        kept = [part for part in content if not self.is_transient(part)]
        return kept if kept and len(kept) < len(content) else content


DEFAULT_TRANSIENT = Transient.of(DEFAULT_TRANSIENT_PARTS, DEFAULT_TRANSIENT_MAX_CHARS)
