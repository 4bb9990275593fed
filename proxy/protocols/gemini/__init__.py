"""The Gemini API wire (`POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse`), mapped onto the common model.

* `validate.py`: parse and validate a request, in Gemini's error wording.
* `convert.py`: native contents -> common messages (pieces, private `_gemini` keys, call ids).
* `encode.py`: common messages -> native contents (rebuilt turns, results grouped per call turn).
* `stream.py`: relay a stream and reassemble its content and usage.
* `errors.py`: errors in Gemini's shape.
* `wire.py`: the `Wire` object; `target` reads the model and the method from the path.
"""

from __future__ import annotations

from .wire import WIRE, GeminiWire

__all__ = ["WIRE", "GeminiWire"]
