"""The upstream body of a chat-completions request.

Most of a projection is the remembered message objects of the previous request, so the body is
re-encoded only where it changed: the JSON of every message sent last time (as that very object)
is reused verbatim. The bytes depend only on the body and the messages, never on what was
remembered: `messages` first, then the other fields, compact UTF-8 JSON (`codec.dumps`).

Everything stays bytes: orjson writes UTF-8, and a body of non-ASCII text decoded to `str` and
encoded back costs more than encoding it (a 74 kB agent body: ~0.1 ms each way), while joining
the remembered bytes is a copy. (A cached join of the unchanged prefix would save only that copy.)
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
    body: dict[str, Any], messages: list[Message], known: dict[int, tuple[Message, bytes]] | None
) -> tuple[bytes, dict[int, tuple[Message, bytes]]]:
    """`body` with `messages` as its messages, as JSON bytes, re-encoding only the messages that
    were not sent (as these very objects) last time: the projection hands back the remembered
    message objects for everything it did not change. Returns the bytes and the encodings to
    remember for next time (only those of this request, so nothing accumulates)."""
    fresh: dict[int, tuple[Message, bytes]] = {}
    parts: list[bytes] = []
    for message in messages:
        key = id(message)
        hit = known.get(key) if known is not None else None
        data = hit[1] if hit is not None and hit[0] is message else codec.dumps(message)
        fresh[key] = (message, data)
        parts.append(data)
    rest = codec.dumps({k: v for k, v in body.items() if k != "messages"})
    head = b'{"messages":[' + b",".join(parts) + b"]"
    return head + (b"}" if rest == b"{}" else b"," + rest[1:]), fresh
