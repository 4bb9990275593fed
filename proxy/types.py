"""The small vocabulary shared by the proxy's modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Message = dict[str, Any]
"""An OpenAI chat-completions message as the client sent it (role, content, tool_calls, ...)."""

Json = dict[str, Any]

CallStatus = Literal["complete", "partial", "error"]
Purpose = Literal["main", "summary", "recall", "overflow"]


@dataclass(frozen=True)
class Identity:
    """Where a request belongs: its conversation, branch, and how much of it was already stored."""

    tenant: str
    conversation_id: str
    branch_id: str
    matched: int
    """How many of the request's history messages were already stored on this branch's lineage."""
    external_id: str | None = None
    created: bool = False
    forked: bool = False


@dataclass(frozen=True, eq=False)
class SentBody:
    """An upstream body as sent, with where each of its messages' JSON is in it, so the next
    request's body can copy what it shares (see `protocols/openai_chat/encode.py`)."""

    messages: list[Message]
    """The message objects encoded, in order (held, so their identities stay theirs)."""
    data: bytes
    ends: list[int]
    """`data[ends[i - 1] + 1 : ends[i]]` is the JSON of `messages[i]` (from `MESSAGES_AT` for i = 0)."""


def as_list(value: Any) -> list[Any]:
    """`value` when it is a JSON array, else empty: upstream answers are read defensively."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> Json:
    """`value` when it is a JSON object, else empty."""
    return value if isinstance(value, dict) else {}
