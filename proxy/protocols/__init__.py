"""Client APIs ("wires") the proxy speaks, each mapped onto the common message model."""

from __future__ import annotations

from .anthropic import WIRE as ANTHROPIC
from .base import Wire
from .openai_chat import WIRE as OPENAI_CHAT
from .responses import WIRE as OPENAI_RESPONSES

WIRES: tuple[Wire, ...] = (OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC)


def wire_for_path(path: str) -> Wire | None:
    for wire in WIRES:
        if path in wire.paths:
            return wire
    return None
