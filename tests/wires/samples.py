"""What a wire's samples module gives the contract suite (`test_contract.py`).

Every wire of the registry (`proxy.protocols.WIRES`) needs a module `samples_<wire.name>.py` here
defining `SAMPLES = Samples(...)`: a request as a client sends it, an answer whole and streamed
(text, then a call of the proxy's recall tool), usage objects with and without cache fields and
what they normalize to, and how to read an error body's message. A wire added to the registry
without one fails `test_every_wire_has_samples`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.usage import Usage

RECALL = "ctxproxy_recall"
"""The name of the recall tool the sample answers call, with arguments `{"query": "port"}`."""
TEXT = "Let me look."
"""The text the sample answers say before their call."""
CALLER_KEY = "sk-caller-own-key-0123456789"
ROUTE_KEY = "sk-operator-route-key-9876543210"


@dataclass(frozen=True)
class Samples:
    request: bytes
    """A whole client request (not streamed) with a system prompt, a user turn, an assistant tool
    call, its result and a last user turn; formatted as a client might (its bytes must survive)."""
    stream_request: bytes
    """The same request asking for a stream."""
    answer: bytes
    """A non-streamed 200 answer: `TEXT`, then one call of `RECALL`; usage with cache fields."""
    stream: bytes
    """The same answer as the API streams it (SSE), ending properly."""
    usage_cached: Any
    usage_cached_expected: Usage
    usage_plain: Any
    """A usage object without any cache field."""
    usage_plain_expected: Usage
    error_message: Callable[[Any], str]
    """The message of a parsed error body in the API's shape."""
    stream_error_message: Callable[[bytes], str]
    """The message of a stream error event (`StreamObserver.error_event`)."""
    paths: dict[bool, tuple[str, dict[str, str]]] = field(default_factory=dict)
    """The client path and query of a request, by whether it streams (default: the wire's `path`)."""
    chat_hop: bool = False
    """Whether the wire is served through a hop that speaks only chat completions (a litellm
    route): its `chat_*` members render a call as chat completions and the answer back."""
