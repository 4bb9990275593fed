"""The upstream body of a chat-completions request.

Most of a projection is the remembered message objects of the previous request, so the body is
re-encoded only where it changed: the JSON of every message sent last time (as that very object)
is reused verbatim. The bytes depend only on the body and the messages, never on what was
remembered: `messages` first, then the other fields, compact UTF-8 JSON (`codec.dumps`).
"""

from __future__ import annotations

from typing import Any

from ... import codec
from ...types import Json, Message


def with_usage_requested(body: Json) -> Json:
    """The body asking for `stream_options.include_usage` (usage is otherwise missing from streams)."""
    options = dict(body.get("stream_options") or {})
    options["include_usage"] = True
    return {**body, "stream_options": options}


def encode_body(
    body: dict[str, Any], messages: list[Message], known: dict[int, tuple[Message, str]] | None
) -> tuple[bytes, dict[int, tuple[Message, str]]]:
    """`body` with `messages` as its messages, as JSON bytes, re-encoding only the messages that
    were not sent (as these very objects) last time: the projection hands back the remembered
    message objects for everything it did not change. Returns the bytes and the encodings to
    remember for next time (only those of this request, so nothing accumulates)."""
    fresh: dict[int, tuple[Message, str]] = {}
    parts: list[str] = []
    for message in messages:
        key = id(message)
        hit = known.get(key) if known is not None else None
        text = hit[1] if hit is not None and hit[0] is message else codec.dumps_str(message)
        fresh[key] = (message, text)
        parts.append(text)
    rest = codec.dumps_str({k: v for k, v in body.items() if k != "messages"})
    head = '{"messages":[' + ",".join(parts) + "]"
    return (head + ("}" if rest == "{}" else "," + rest[1:])).encode(), fresh
