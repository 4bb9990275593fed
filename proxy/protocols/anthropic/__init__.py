"""The Anthropic Messages wire (`POST /v1/messages`), mapped losslessly onto the common model.

* `validate.py`: parse and validate a request, in Anthropic's error wording.
* `convert.py`: native messages <-> common messages (pieces, private `_anthropic` keys, merges).
* `cache_control.py`: the blocks' cache_control markers, kept off the identity, put back, capped.
* `stream.py`: relay a stream and reassemble its message and usage like the SDK does.
* `errors.py`: errors in Anthropic's shape.
* `wire.py`: the `Wire` object tying these together.
"""

from __future__ import annotations

from .wire import WIRE, AnthropicWire

__all__ = ["WIRE", "AnthropicWire"]
