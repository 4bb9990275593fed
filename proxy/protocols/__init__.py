"""Client APIs ("wires") the proxy speaks, each mapped onto the common message model."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from .anthropic import WIRE as ANTHROPIC
from .base import Wire
from .gemini import WIRE as GEMINI
from .openai_chat import WIRE as OPENAI_CHAT
from .responses import COMPACT as OPENAI_RESPONSES_COMPACT
from .responses import WIRE as OPENAI_RESPONSES

WIRES: tuple[Wire, ...] = (OPENAI_CHAT, OPENAI_RESPONSES, OPENAI_RESPONSES_COMPACT, ANTHROPIC, GEMINI)

__all__ = [
    "ANTHROPIC",
    "GEMINI",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "OPENAI_RESPONSES_COMPACT",
    "WIRES",
    "Wire",
    "bound_wire",
    "wire_for_path",
]


def wire_for_path(path: str) -> Wire | None:
    """The API a path belongs to (its own paths and the ones below them, such as Anthropic's
    `/v1/messages/count_tokens`), whose error shape answers it."""
    for wire in WIRES:
        if path in wire.paths or any(path.startswith(p + "/") for p in wire.paths):
            return wire
    return GEMINI if GEMINI.serves(path) else None


def bound_wire(scope: MutableMapping[str, Any]) -> Wire | None:
    """The wire of a model call whose path names its model (Gemini's), bound to that call."""
    return GEMINI.bind(scope)
