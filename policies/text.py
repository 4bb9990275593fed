"""Small, pure helpers over message dicts: text extraction, tool-call ids, head + tail cuts.

Problem: content comes as a string, `None`, or a list of parts (`{"type": "text", ...}`,
`{"type": "image_url", ...}`); every policy needs the same reading of it.

Invariant: nothing here mutates a message; `with_content` returns a shallow copy.

Example::

    cut_text("abcdefghij", 4, 0.5)   # ("ab", "ij")
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from policies.base import Message


def content_text(content: Any) -> str:
    """The text of a content value: strings as is, text parts joined by newlines, else ''."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part["text"] for part in content if isinstance(part, Mapping) and isinstance(part.get("text"), str)]
        return "\n".join(texts)
    return ""


def non_text_parts(content: Any) -> int:
    """How many parts of a list content are not text (images, audio, files)."""
    if not isinstance(content, list):
        return 0
    return sum(1 for part in content if not (isinstance(part, Mapping) and "text" in part))


def message_text(message: Message) -> str:
    """Content text of a message (refusals included)."""
    text = content_text(message.get("content"))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        text = f"{text}\n{refusal}" if text else refusal
    return text


def tool_calls(message: Message) -> list[Mapping[str, Any]]:
    """The assistant's tool calls (empty list for none, `None` or malformed values)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [call for call in calls if isinstance(call, Mapping)]


def tool_call_ids(message: Message) -> list[str]:
    """Ids of the assistant's tool calls, in call order."""
    return [str(call.get("id", "")) for call in tool_calls(message)]


def call_name(call: Mapping[str, Any]) -> str:
    function = call.get("function")
    if isinstance(function, Mapping):
        return str(function.get("name") or "unknown")
    return "unknown"


def call_arguments(call: Mapping[str, Any]) -> str:
    function = call.get("function")
    if isinstance(function, Mapping):
        arguments = function.get("arguments")
        return arguments if isinstance(arguments, str) else ""
    return ""


def cut_text(text: str, max_chars: int, head_ratio: float) -> tuple[str, str]:
    """Split the kept part of `text` into head and tail, `max_chars` in total."""
    head = int(max_chars * head_ratio)
    tail = max_chars - head
    return text[:head], (text[len(text) - tail :] if tail else "")


def with_content(message: Message, content: Any) -> dict[str, Any]:
    """A shallow copy of `message` with `content` replaced (key order preserved)."""
    copy = dict(message)
    copy["content"] = content
    return copy


def clone(value: Any) -> Any:
    """A structural copy of JSON-like data (dicts and lists copied, scalars shared)."""
    if isinstance(value, Mapping):
        return {key: clone(val) for key, val in value.items()}
    if isinstance(value, list | tuple):
        return [clone(val) for val in value]
    return value


URL_RE = re.compile(r"https?://[^\s<>()\[\]{}\"'`]+")
IMAGE_RE = re.compile(r"!\[[^\]]*\]\([^)]*\)")


def introduced_links(text: str, trusted: str) -> tuple[list[str], list[str]]:
    """The URLs and markdown images in `text` that `trusted` does not contain, sorted, each once
    (a URL without the punctuation that ends a sentence): what a summary or a memory must not
    introduce, since only user and assistant text may bring a link into the replayed context."""
    urls = sorted({m.group(0).rstrip(".,;:!?") for m in URL_RE.finditer(text)} - {""})
    images = sorted({m.group(0) for m in IMAGE_RE.finditer(text)})
    return [u for u in urls if u not in trusted], [i for i in images if i not in trusted]


_ANGLES = "<\uff1c\ufe64\u2039\u3008\u27e8"  # "<" and the look-alikes a model may read as one
_GAP = r"[\s\u200b-\u200d\u2060\ufeff]*"  # whitespace and zero-width characters


def tag_pattern(names: Sequence[str]) -> re.Pattern[str]:
    """Opening and closing tags of `names` as a model may read them, not only as we write them:
    any case, whitespace or zero-width characters around the slash and between the words of a
    name (`< /Conversation_Summary >`, `</conversation summary>`), and look-alikes of `<`."""
    spelled = []
    for name in names:
        words = [re.escape(word) for word in re.split(r"[_\-]", name)]
        spelled.append((_GAP + r"[_\-]?" + _GAP).join(words))
    return re.compile(rf"[{_ANGLES}]{_GAP}/?{_GAP}(?:{'|'.join(spelled)})", re.IGNORECASE)


def defuse_tags(text: str, pattern: re.Pattern[str]) -> str:
    """`text` with every tag look-alike of `pattern` (see `tag_pattern`) started by `&lt;`
    instead of an angle bracket, so data placed inside a delimited block cannot end it or open
    another one."""
    return pattern.sub(lambda m: "&lt;" + m.group(0)[1:], text)
