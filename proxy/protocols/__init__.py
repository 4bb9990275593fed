"""Client APIs ("wires") the proxy speaks, each mapped onto the common message model."""

from __future__ import annotations

from .anthropic import WIRE as ANTHROPIC
from .base import Wire
from .openai_chat import WIRE as OPENAI_CHAT
from .responses import COMPACT as OPENAI_RESPONSES_COMPACT
from .responses import WIRE as OPENAI_RESPONSES

WIRES: tuple[Wire, ...] = (OPENAI_CHAT, OPENAI_RESPONSES, OPENAI_RESPONSES_COMPACT, ANTHROPIC)

__all__ = ["ANTHROPIC", "OPENAI_CHAT", "OPENAI_RESPONSES", "OPENAI_RESPONSES_COMPACT", "WIRES", "Wire", "wire_for_path"]


def wire_for_path(path: str) -> Wire | None:
    """The API a path belongs to (its own paths and the ones below them, such as Anthropic's
    `/v1/messages/count_tokens`), whose error shape answers it."""
    for wire in WIRES:
        if path in wire.paths or any(path.startswith(p + "/") for p in wire.paths):
            return wire
    return None
