"""A Gemini stream (`:streamGenerateContent?alt=sse`): relayed unchanged, the answer reassembled.

Each event is `data: {GenerateContentResponse}`: a piece of candidate 0's content (text in
pieces, each function call whole), the usage so far and, on the last one, `finishReason`. There
is no `[DONE]`: the stream ends properly with the chunk that carries a finish reason. Parts are
collected in order and merged as `convert.merged` does, so the stored answer converts to the
message the client re-sends. `usageMetadata` is a cumulative snapshot: the latest replaces the
earlier ones (never added), so a repeated final chunk changes nothing. An `error` object in a
chunk (a failure after the stream began) makes the call a failure.
"""

from __future__ import annotations

from typing import Any

from ...errors import ProxyError
from ...types import Json, Message
from ..json_events import JsonEventObserver
from .convert import model_to_common
from .errors import error_bytes


def candidate(data: Json) -> Json | None:
    candidates = data.get("candidates")
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
        return candidates[0]
    return None


class ContentStream(JsonEventObserver):
    """Relays every event unchanged and collects candidate 0's parts, finish reason and usage."""

    def __init__(self) -> None:
        self.done = False
        self._parts: list[Any] = []
        self._started = False
        self._usage: Any = None
        self._finish: str | None = None
        self.error: Any = None

    def feed(self, data: Json) -> None:
        if "error" in data:
            self.error = data["error"]
            return
        if isinstance(data.get("usageMetadata"), dict):
            self._usage = data["usageMetadata"]
        first = candidate(data)
        if first is None:
            return
        self._started = True
        content = first.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list):
            self._parts.extend(parts)
        if first.get("finishReason"):
            self._finish = str(first["finishReason"])
            self.done = True

    def message(self) -> Message | None:
        if not self._started:
            return None
        return model_to_common({"role": "model", "parts": self._parts})

    def finish_reason(self) -> str | None:
        return self._finish

    def usage_raw(self) -> Any:
        return self._usage

    def failure(self) -> str | None:
        if self.error is None:
            return None
        if isinstance(self.error, dict):
            return f"{self.error.get('status', 'error')}: {self.error.get('message', '')}"
        return str(self.error)

    def error_event(self, exc: ProxyError) -> bytes:
        """A Gemini error object as a `data:` chunk: what the SDKs raise on inside a stream."""
        return b"data: " + error_bytes(exc) + b"\n\n"
