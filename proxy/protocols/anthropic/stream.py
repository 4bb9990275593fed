"""An Anthropic Messages stream: relayed unchanged, the message reassembled like the SDK does.

The reassembly reproduces the SDK's `get_final_message()` (content_block_start's block, text /
thinking appended, signature replaced, tool input parsed from the JSON deltas), so the stored
response and the turn the client re-sends convert to equal common messages (see `convert.py`).

Usage: `message_start.message.usage` gives the input and cache fields, each `message_delta.usage`
is a cumulative snapshot whose known fields replace the earlier ones (never added), so a
duplicated final event changes nothing.
"""

from __future__ import annotations

from typing import Any

from ... import codec
from ...errors import ProxyError
from ...types import Json, Message
from ..json_events import JsonEventObserver
from .convert import assistant_to_common
from .errors import error_bytes


class MessageStream(JsonEventObserver):
    """Relays every event unchanged and reassembles the message like the SDK's final message."""

    def __init__(self) -> None:
        self.done = False
        self._started = False
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] | None = None
        self._stop_reason: str | None = None
        self.error: Any = None

    def feed(self, data: Json) -> None:
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message") or {}
            self._started = True
            usage = message.get("usage")
            if isinstance(usage, dict):
                self._usage = dict(usage)
        elif kind == "content_block_start":
            index, block = data.get("index"), data.get("content_block")
            if isinstance(index, int) and isinstance(block, dict):
                self._blocks[index] = dict(block)
        elif kind == "content_block_delta":
            self._delta(data.get("index"), data.get("delta") or {})
        elif kind == "content_block_stop":
            self._finish_input(data.get("index"))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if "stop_reason" in delta:
                self._stop_reason = delta.get("stop_reason")
            usage = data.get("usage")
            if isinstance(usage, dict):
                merged = dict(self._usage or {})
                merged.update({k: v for k, v in usage.items() if v is not None})  # snapshots replace
                self._usage = merged
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.error = data.get("error")

    def _delta(self, index: Any, delta: Json) -> None:
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None:
            return
        kind = delta.get("type")
        if kind == "text_delta" and block.get("type") == "text":
            block["text"] = (block.get("text") or "") + str(delta.get("text", ""))
        elif kind == "thinking_delta" and block.get("type") == "thinking":
            block["thinking"] = (block.get("thinking") or "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta" and block.get("type") == "thinking":
            block["signature"] = delta.get("signature")
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "citations_delta" and block.get("type") == "text":
            block["citations"] = [*(block.get("citations") or []), delta.get("citation")]

    def _finish_input(self, index: Any) -> None:
        parts = self._json.pop(index, None) if isinstance(index, int) else None
        if not parts or "".join(parts) == "":
            return
        try:
            self._blocks[index]["input"] = codec.loads("".join(parts))
        except (codec.JsonRejected, KeyError):
            return

    def native(self) -> Json | None:
        """The message so far; it may be asked for mid-stream (recall watches the answer), so a
        tool_use block whose input is still streaming is shown with what parses, never consumed."""
        if not self._started and not self._blocks:
            return None
        return {"role": "assistant", "content": [self._block(i) for i in sorted(self._blocks)]}

    def _block(self, index: int) -> dict[str, Any]:
        block, parts = self._blocks[index], self._json.get(index)
        if not parts or "".join(parts) == "":
            return block
        try:
            return {**block, "input": codec.loads("".join(parts))}  # a stream cut inside a tool_use block
        except codec.JsonRejected:
            return block

    def message(self) -> Message | None:
        native = self.native()
        return assistant_to_common(native) if native is not None else None

    def finish_reason(self) -> str | None:
        return self._stop_reason

    def failure(self) -> str | None:
        """An `error` event (e.g. overloaded mid-stream) and no `message_stop`: the call failed."""
        if self.error is None or self.done:
            return None
        if isinstance(self.error, dict):
            return f"{self.error.get('type', 'error')}: {self.error.get('message', '')}"
        return str(self.error)

    def usage_raw(self) -> Any:
        return self._usage

    def error_event(self, exc: ProxyError) -> bytes:
        """What the relay sends when the stream breaks after it started: Anthropic's error event."""
        return b"event: error\ndata: " + error_bytes(exc) + b"\n\n"
