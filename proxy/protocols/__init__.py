"""Client APIs ("wires") the proxy speaks, each mapped onto the common message model.

The registry: `WIRES` is the one list of wires (adding an API is one line here plus its package);
everything outside this package finds a wire by a request's path (`wire_for_request`,
`wire_for_path`) or by its recorded name (`wire_named`), and asks it (`base.Wire`) instead of
branching on which one it is. `DEFAULT` is the OpenAI chat-completions wire: the common model's
own shape, the one litellm speaks, the API of the proxy's own summarizer calls, of the model list
and embeddings, and the error shape of paths that belong to no API.
"""

from __future__ import annotations

from collections.abc import Mapping

from .anthropic import WIRE as ANTHROPIC
from .base import NO_QUERY, Target, Wire
from .gemini import WIRE as GEMINI
from .openai_chat import WIRE as OPENAI_CHAT
from .responses import COMPACT as OPENAI_RESPONSES_COMPACT
from .responses import WIRE as OPENAI_RESPONSES

WIRES: tuple[Wire, ...] = (OPENAI_CHAT, OPENAI_RESPONSES, OPENAI_RESPONSES_COMPACT, ANTHROPIC, GEMINI)
DEFAULT: Wire = OPENAI_CHAT

CREDENTIAL_HEADERS = frozenset(name for wire in WIRES for name in wire.credential_headers)
"""Every header a caller's key travels in on any wire: never forwarded upstream on a route that
sends the operator's key (or when the caller is a configured client), whichever API was called."""

CREDENTIAL_QUERY = frozenset(name for wire in WIRES for name in wire.credential_query)
"""Every query parameter a caller's key travels in on any wire: the query string is never
forwarded upstream, and these are redacted wherever a request's path is logged."""

__all__ = [
    "ANTHROPIC",
    "CREDENTIAL_HEADERS",
    "CREDENTIAL_QUERY",
    "DEFAULT",
    "GEMINI",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "OPENAI_RESPONSES_COMPACT",
    "WIRES",
    "Target",
    "Wire",
    "caller_key",
    "wire_for_path",
    "wire_for_request",
    "wire_named",
]

_BY_PATH: dict[str, Wire] = {path: wire for wire in WIRES for path in wire.paths}
_BY_NAME: dict[str, Wire] = {}
for _wire in WIRES:
    _BY_NAME.setdefault(_wire.name, _wire)


def wire_for_request(path: str, query: Mapping[str, str] = NO_QUERY) -> tuple[Wire, Target] | None:
    """The wire whose model call `path` is, and what the path (and query) says; None: no model call."""
    wire = _BY_PATH.get(path)
    if wire is not None:
        target = wire.target(path, query)
        if target is not None:
            return wire, target
    for wire in WIRES:
        target = wire.target(path, query)
        if target is not None:
            return wire, target
    return None


def wire_for_path(path: str) -> Wire | None:
    """The API a path belongs to (its own paths and the ones below them, such as Anthropic's
    `/v1/messages/count_tokens`), whose error shape answers it."""
    for wire in WIRES:
        if wire.owns(path):
            return wire
    return None


def wire_named(name: str | None) -> Wire | None:
    """The wire recorded as `name` (`CallRecord.wire`); None for an unknown or missing name."""
    return _BY_NAME.get(name) if name else None


def caller_key(headers: Mapping[str, str], query: Mapping[str, str] = NO_QUERY) -> str | None:
    """The caller's key wherever any wire takes one (a request of no particular API: the model
    list, embeddings, litellm reading what is forwarded)."""
    for wire in WIRES:
        key = wire.client_key(headers, query)
        if key is not None:
            return key
    return None
