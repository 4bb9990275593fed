"""The OpenAI Responses wire (`POST /v1/responses`): items <-> the common (chat-shaped) messages.

* `items.py`: the canonical form of an item (what identity hashes) and the item kinds.
* `validate.py`: validate a request's envelope and input items.
* `convert.py`: input items <-> common messages, and the client's exact items back on the way out.
* `output.py`: read a response object (output message, finish reason, text).
* `stream.py`: relay a stream and reassemble its output, usage and failure.
* `wire.py`: the `Wire` object tying these together, and when a request may be rewritten.
"""

from __future__ import annotations

from .compact import WIRE as COMPACT
from .wire import WIRE, ResponsesWire

__all__ = ["COMPACT", "WIRE", "ResponsesWire"]
