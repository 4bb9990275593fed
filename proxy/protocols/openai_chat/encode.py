"""The upstream body of a chat-completions request.

Most of a projection is the message objects of the previous request, in the same order, so the
body is re-encoded only where it changed. The previous body is remembered (`SentBody`) with the
offset where each message's JSON ends: the longest run of its very objects that the new list
starts with is copied from it as one slice, any other message sent last time is copied from its
own place in it (after a trim moved, say), and only new objects are encoded. The bytes depend
only on the body and the messages, never on what was remembered: `messages` first, then the
other fields, compact UTF-8 JSON (`codec.dumps`).

Everything stays bytes and the body is built by one `join`: reading the previous encodings of
a hundred messages from their own objects scattered over the heap, and copying the result twice
(once joined, once wrapped), costs per message and per byte in a proxy under load (the objects
are cold by the next request of their conversation); one contiguous slice costs a `memcpy`.
"""

from __future__ import annotations

from operator import is_
from typing import Any

from ... import codec
from ...types import Json, Message, SentBody

OPEN = b'{"messages":['
MESSAGES_AT = len(OPEN)


def with_usage_requested(body: Json) -> Json:
    """The body asking for `stream_options.include_usage` (usage is otherwise missing from streams)."""
    options = dict(body.get("stream_options") or {})
    options["include_usage"] = True
    return {**body, "stream_options": options}


def encode_body(body: dict[str, Any], messages: list[Message], known: SentBody | None) -> tuple[bytes, SentBody]:
    """`body` with `messages` as its messages, as JSON bytes, re-encoding only the messages that
    were not sent (as these very objects) in `known`, the previous body. Returns the bytes and
    what to remember of them for the next request."""
    parts: list[Any] = [OPEN]
    ends: list[int] = []
    shared = _shared(known.messages, messages) if known is not None else 0
    if known is not None and shared:
        parts.append(memoryview(known.data)[MESSAGES_AT : known.ends[shared - 1]])
        ends = known.ends[:shared]
    at = ends[-1] if ends else MESSAGES_AT
    places: dict[int, int] | None = None
    for i in range(shared, len(messages)):
        message = messages[i]
        data: Any = None
        if known is not None and len(known.messages) > shared:  # the old list went on differently
            if places is None:
                places = {id(m): j for j, m in enumerate(known.messages)}
            j = places.get(id(message))
            if j is not None and known.messages[j] is message:
                data = memoryview(known.data)[known.ends[j - 1] + 1 if j else MESSAGES_AT : known.ends[j]]
        if data is None:
            data = codec.dumps(message)
        if i:
            parts.append(b",")
            at += 1
        parts.append(data)
        at += len(data)
        ends.append(at)
    rest = codec.dumps({k: v for k, v in body.items() if k != "messages"})
    parts.append(b"]}" if rest == b"{}" else b"]," + rest[1:])
    out = b"".join(parts)
    return out, SentBody(list(messages), out, ends)


def _shared(old: list[Message], new: list[Message]) -> int:
    """How many messages `new` starts with that are the very objects `old` starts with."""
    same = list(map(is_, old, new))
    return same.index(False) if False in same else len(same)
