"""A chat-completions stream on its way to the client: relayed, reassembled on the side.

The proxy always asks upstream for `stream_options.include_usage` (usage is otherwise missing from
streams). A client that did not ask must see exactly what it would have seen without us: the
usage-only chunk (`"choices": []`) is dropped and the `"usage": null` that the upstream then puts
on every other chunk is removed.
"""

from __future__ import annotations

from typing import Any

from ... import codec
from ...sse import SseEvent
from ...types import Json, Message, as_dict, as_list
from ..base import BaseObserver


def client_wants_usage(body: Json) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def is_usage_only(chunk: Json) -> bool:
    # Azure opens streams with a choices-less chunk of prompt_filter_results: not ours to hide.
    return chunk.get("choices") == [] and isinstance(chunk.get("usage"), dict)


def strip_null_usage(raw: bytes, chunk: Json) -> bytes:
    """The event bytes without `"usage": null`, as an upstream not asked for usage sends them."""
    if "usage" not in chunk or chunk["usage"] is not None:
        return raw
    for needle in (b',"usage":null', b', "usage": null', b'"usage":null,', b'"usage": null, '):
        if needle in raw:
            return raw.replace(needle, b"", 1)
    rest = {k: v for k, v in chunk.items() if k != "usage"}
    return b"data: " + codec.dumps(rest) + b"\n\n"


_EXTRA = ("refusal", "reasoning_content")
"""Text fields of a delta besides `content`, reassembled into the message under their own names."""


def _index(value: Any) -> int:
    """A choice's or tool call's `index` (0 when absent or not an integer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class StreamAccumulator:
    """Rebuilds the assistant message(s), finish reason and usage from chat.completion.chunk objects.

    Usage chunks are snapshots: the last one seen wins (a duplicated final chunk adds nothing).
    """

    def __init__(self) -> None:
        self._choices: dict[int, dict[str, Any]] = {}
        self.usage: Json | None = None
        self.model: str | None = None
        self.id: str | None = None
        self.chunks = 0

    def feed(self, chunk: Json) -> None:
        self.chunks += 1
        self.id = self.id or chunk.get("id")
        self.model = self.model or chunk.get("model")
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in as_list(chunk.get("choices")):
            if not isinstance(choice, dict):
                continue
            index = _index(choice.get("index"))
            state = self._choices.get(index)
            if state is None:
                state = self._choices[index] = {"content": [], "tool_calls": {}, "finish_reason": None, "extra": {}}
            delta = as_dict(choice.get("delta"))
            content = delta.get("content")
            if isinstance(content, str):
                state["content"].append(content)
            if len(delta) > 1 or content is None:  # most deltas hold a piece of content and nothing else
                for key in _EXTRA:
                    if isinstance(delta.get(key), str):
                        state["extra"][key] = state["extra"].get(key, "") + delta[key]
                self._calls(state["tool_calls"], delta.get("tool_calls"))
            if isinstance(choice.get("finish_reason"), str) and choice["finish_reason"]:
                state["finish_reason"] = choice["finish_reason"]

    @staticmethod
    def _calls(slots: dict[int, dict[str, Any]], calls: Any) -> None:
        for call in as_list(calls):
            if not isinstance(call, dict):
                continue
            slot = slots.setdefault(
                _index(call.get("index")), {"id": None, "type": "function", "name": "", "arguments": []}
            )
            slot["id"] = _text(call.get("id")) or slot["id"]
            slot["type"] = _text(call.get("type")) or slot["type"]
            function = as_dict(call.get("function"))
            if isinstance(function.get("name"), str):
                slot["name"] += function["name"]
            if isinstance(function.get("arguments"), str):
                slot["arguments"].append(function["arguments"])

    def message(self, index: int = 0) -> Message | None:
        state = self._choices.get(index)
        if state is None:
            return None
        message: Message = {"role": "assistant", "content": "".join(state["content"]) or None}
        if state["tool_calls"]:
            message["tool_calls"] = [
                {
                    "id": slot["id"],
                    "type": slot["type"],
                    "function": {"name": slot["name"], "arguments": "".join(slot["arguments"])},
                }
                for _, slot in sorted(state["tool_calls"].items())
            ]
        message.update(state["extra"])
        return message

    def finish_reason(self, index: int = 0) -> str | None:
        state = self._choices.get(index)
        return state["finish_reason"] if state else None


class StreamFilter(BaseObserver):
    """Looks at each SSE event on its way to the client: reassembles, and hides the usage the
    proxy asked for when the client did not."""

    def __init__(self, client_wants_usage: bool) -> None:
        self.client_wants_usage = client_wants_usage
        self.accumulator = StreamAccumulator()
        self.done = False

    @property
    def chunks(self) -> int:
        return self.accumulator.chunks

    def message(self) -> Message | None:
        return self.accumulator.message(0)

    def finish_reason(self) -> str | None:
        return self.accumulator.finish_reason(0)

    def usage_raw(self) -> Any:
        return self.accumulator.usage

    def __call__(self, event: SseEvent) -> bytes | None:
        if event.data is None:
            return event.raw
        if event.data.strip() == "[DONE]":
            self.done = True
            return event.raw
        try:
            chunk = codec.loads(event.data)
        except codec.JsonRejected:
            return event.raw
        if not isinstance(chunk, dict):
            return event.raw
        self.accumulator.feed(chunk)
        if self.client_wants_usage:
            return event.raw
        if is_usage_only(chunk):
            return None
        return strip_null_usage(event.raw, chunk)
