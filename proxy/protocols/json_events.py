"""A stream observer for APIs whose every event carries one JSON object (Anthropic Messages,
Gemini): each event is relayed unchanged, and each JSON object in it is counted and fed to the
wire's own reassembly (`feed`). An event whose data is not a JSON object is relayed, not fed."""

from __future__ import annotations

from abc import ABC, abstractmethod

from .. import codec
from ..sse import SseEvent
from ..types import Json
from .base import BaseObserver


class JsonEventObserver(BaseObserver, ABC):
    _chunks = 0

    @property
    def chunks(self) -> int:
        return self._chunks

    def __call__(self, event: SseEvent) -> bytes | None:
        if event.data is not None:
            try:
                data = codec.loads(event.data)
            except codec.JsonRejected:
                data = None
            if isinstance(data, dict):
                self._chunks += 1
                self.feed(data)
        return event.raw

    @abstractmethod
    def feed(self, data: Json) -> None:
        """Take one event's object into the answer being reassembled."""
