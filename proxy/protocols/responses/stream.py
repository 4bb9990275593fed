"""A Responses stream: relayed unchanged; the output items, usage and how it ended reassembled.

The `response.completed` / `incomplete` / `failed` event carries the final output and usage; the
items built from `output_item` and delta events stand in when the stream ends without one. A
`response.failed` or `error` event is a failure: the call is recorded as an error, without an answer.
"""

from __future__ import annotations

import json
from typing import Any

from ... import codec
from ...errors import ProxyError
from ...sse import SseEvent
from ...types import Json, Message
from ..base import BaseObserver
from .output import finish_of, output_message


class ResponsesObserver(BaseObserver):
    """Relays every event unchanged; reassembles the output items, usage and how it ended."""

    def __init__(self) -> None:
        self.done = False
        self._chunks = 0
        self._items: dict[int, Json] = {}
        self._final: list[Json] | None = None
        self._usage: Any = None
        self._finish: str | None = None
        self._failure: str | None = None

    @property
    def chunks(self) -> int:
        return self._chunks

    def __call__(self, event: SseEvent) -> bytes | None:
        if event.data is None:
            return event.raw
        self._chunks += 1
        try:
            data = codec.loads(event.data)
        except codec.JsonRejected:
            return event.raw
        if isinstance(data, dict):
            self._feed(event.event or str(data.get("type")), data)
        return event.raw

    def _feed(self, kind: str, data: Json) -> None:
        index = data.get("output_index")
        if kind in ("response.output_item.added", "response.output_item.done") and isinstance(data.get("item"), dict):
            if isinstance(index, int):
                self._items[index] = dict(data["item"])
        elif kind in ("response.output_text.delta", "response.refusal.delta") and isinstance(index, int):
            item = self._items.setdefault(index, {"type": "message", "role": "assistant", "content": []})
            parts = item.setdefault("content", [])
            c = data["content_index"] if isinstance(data.get("content_index"), int) else 0
            key, part_type = ("text", "output_text") if kind.endswith("output_text.delta") else ("refusal", "refusal")
            while len(parts) <= c:
                parts.append({"type": part_type, key: ""})
            if isinstance(parts[c], dict) and isinstance(data.get("delta"), str):
                parts[c] = {**parts[c], key: str(parts[c].get(key) or "") + data["delta"]}
        elif kind == "response.function_call_arguments.delta" and isinstance(index, int):
            item = self._items.setdefault(index, {"type": "function_call", "arguments": ""})
            if isinstance(data.get("delta"), str):
                item["arguments"] = str(item.get("arguments") or "") + data["delta"]
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = data.get("response")
            if isinstance(response, dict):
                if isinstance(response.get("output"), list):
                    self._final = [i for i in response["output"] if isinstance(i, dict)]
                if isinstance(response.get("usage"), dict):
                    self._usage = response["usage"]
                self._finish = finish_of(response) or kind.split(".", 1)[1]
                if kind == "response.failed":
                    error = response.get("error")
                    detail = error.get("message") if isinstance(error, dict) else None
                    self._failure = f"response failed: {detail or 'no detail'}"
            self.done = True
        elif kind == "error":
            detail = data.get("message")
            if detail is None and isinstance(data.get("error"), dict):
                detail = data["error"].get("message")
            self._failure = f"error event: {detail or 'no detail'}"
            self._finish = "error"
            self.done = True

    def failure(self) -> str | None:
        """Why the stream ended without an answer (`response.failed`, an `error` event)."""
        return self._failure

    def message(self) -> Message | None:
        if self._failure is not None:
            return None
        items = self._final if self._final is not None else [self._items[k] for k in sorted(self._items)]
        return output_message(items)

    def finish_reason(self) -> str | None:
        return self._finish

    def usage_raw(self) -> Any:
        return self._usage

    def error_event(self, exc: ProxyError) -> bytes:
        """What the relay sends when the stream breaks after it started: the Responses error event."""
        data = {"type": "error", "code": exc.code, "message": exc.message, "param": exc.param}
        return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"
