"""The OpenAI chat-completions wire: its native messages are the common message model.

* `validate.py`: parse and validate a request (the envelope, then each message).
* `encode.py`: the upstream body, re-encoding only the messages a projection changed.
* `stream.py`: relay a stream (hiding the usage the proxy asked for) and reassemble its answer.
* `wire.py`: the `Wire` object tying these together, plus reading a non-streamed answer.
"""

from __future__ import annotations

from .wire import WIRE, OpenAIChatWire

__all__ = ["WIRE", "OpenAIChatWire"]
