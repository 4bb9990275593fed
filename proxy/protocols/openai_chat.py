"""OpenAI chat-completions wire format: request validation and streamed-response reassembly, pure.

The proxy always asks upstream for `stream_options.include_usage` (usage is otherwise missing from
streams). A client that did not ask must see exactly what it would have seen without us: the
usage-only chunk (`"choices": []`) is dropped and the `"usage": null` that the upstream then puts
on every other chunk is removed.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import BadRequest, ProxyError, openai_error_bytes
from ..history_cache import encode_body
from ..sse import SseEvent
from ..types import Json, Message
from ..usage import Usage, from_openai_chat
from .base import BaseObserver, BaseWire

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def parse_body(raw: bytes) -> Json:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(
            f"We could not parse the JSON body of your request ({exc}). The body must be a JSON object "
            "following the chat completions API."
        ) from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object, got " + type(body).__name__ + ".")
    return body


def validate_request(body: Json) -> tuple[str, list[Message], bool]:
    """The model, the messages and whether the client asked for a stream; BadRequest otherwise."""
    model, messages, stream = validate_envelope(body)
    validate_messages(messages)
    return model, messages, stream


def validate_messages(messages: list[Any], start: int = 0, stop: int | None = None) -> None:
    """Each message in messages[start:stop]; the rest is known valid (equal to an accepted request)."""
    for i in range(start, len(messages) if stop is None else stop):
        _validate_message(i, messages[i])


def validate_envelope(body: Json) -> tuple[str, list[Message], bool]:
    """Everything but the individual messages."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("you must provide a model parameter (a non-empty string)", param="model")
    messages = body.get("messages")
    if messages is None:
        raise BadRequest("Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter")
    if not isinstance(messages, list):
        raise BadRequest(
            f"Invalid type for 'messages': expected an array of message objects, got {type(messages).__name__}.",
            param="messages",
            code="invalid_type",
        )
    if not messages:
        raise BadRequest(
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
            param="messages",
            code="empty_array",
        )
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("Invalid type for 'stream': expected a boolean.", param="stream", code="invalid_type")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest(
            "Invalid type for 'stream_options': expected an object.", param="stream_options", code="invalid_type"
        )
    return model, messages, bool(stream)


def _validate_message(i: int, message: Any) -> None:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise BadRequest(f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
    role = message.get("role")
    if not isinstance(role, str):
        raise BadRequest(
            f"Missing required parameter: '{where}.role'.", param=f"{where}.role", code="missing_required_parameter"
        )
    if role not in ROLES:
        raise BadRequest(
            f"Invalid value: '{role}'. Supported values are: {', '.join(sorted(ROLES))}.",
            param=f"{where}.role",
            code="invalid_value",
        )
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise BadRequest(
            f"Invalid type for '{where}.content': expected a string or an array of content parts.",
            param=f"{where}.content",
            code="invalid_type",
        )
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not (isinstance(tool_calls, list) and all(isinstance(c, dict) for c in tool_calls)):
        raise BadRequest(
            f"Invalid type for '{where}.tool_calls': expected an array of objects.",
            param=f"{where}.tool_calls",
            code="invalid_type",
        )
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise BadRequest(
            f"Missing required parameter: '{where}.tool_call_id'.",
            param=f"{where}.tool_call_id",
            code="missing_required_parameter",
        )


def client_wants_usage(body: Json) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def with_usage_requested(body: Json) -> Json:
    options = dict(body.get("stream_options") or {})
    options["include_usage"] = True
    return {**body, "stream_options": options}


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
    return b"data: " + json.dumps(rest, separators=(",", ":")).encode() + b"\n\n"


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
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            state = self._choices.setdefault(
                int(choice.get("index") or 0), {"content": [], "tool_calls": {}, "finish_reason": None, "extra": {}}
            )
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                state["content"].append(delta["content"])
            for key in ("refusal", "reasoning_content"):
                if isinstance(delta.get(key), str):
                    state["extra"][key] = state["extra"].get(key, "") + delta[key]
            for call in delta.get("tool_calls") or ():
                slot = state["tool_calls"].setdefault(
                    int(call.get("index") or 0), {"id": None, "type": "function", "name": "", "arguments": []}
                )
                slot["id"] = call.get("id") or slot["id"]
                slot["type"] = call.get("type") or slot["type"]
                function = call.get("function") or {}
                if function.get("name"):
                    slot["name"] += function["name"]
                if isinstance(function.get("arguments"), str):
                    slot["arguments"].append(function["arguments"])
            if choice.get("finish_reason"):
                state["finish_reason"] = choice["finish_reason"]

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


def response_message(body: Json) -> tuple[Message | None, str | None]:
    """Choice 0's message and finish reason from a non-streamed completion."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, None
    message = choices[0].get("message")
    return (message if isinstance(message, dict) else None), choices[0].get("finish_reason")


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
            chunk = json.loads(event.data)
        except json.JSONDecodeError:
            return event.raw
        if not isinstance(chunk, dict):
            return event.raw
        self.accumulator.feed(chunk)
        if self.client_wants_usage:
            return event.raw
        if is_usage_only(chunk):
            return None
        return strip_null_usage(event.raw, chunk)


class OpenAIChatWire(BaseWire):
    """The chat-completions API: native messages are the common message model."""

    name = "openai_chat"
    path = "/v1/chat/completions"
    paths: tuple[str, ...] = ("/v1/chat/completions", "/chat/completions")
    upstream_path = "/chat/completions"

    def parse(self, raw: bytes) -> Json:
        return parse_body(raw)

    def envelope(self, body: Json) -> tuple[str, bool]:
        model, _, stream = validate_envelope(body)
        return model, stream

    def messages(self, body: Json) -> list[Message]:
        messages: list[Message] = body["messages"]
        return messages

    def validate(self, messages: list[Message], start: int, stop: int | None = None) -> None:
        validate_messages(messages, start, stop)

    def encode(
        self, body: Json, messages: list[Message] | None, stream: bool, known: dict[int, tuple[Message, str]] | None
    ) -> tuple[bytes | None, dict[int, tuple[Message, str]]]:
        """The upstream body, or None when the client's bytes can go as they are."""
        if messages is None and not stream:
            return None, {}
        outgoing = with_usage_requested(body) if stream else body
        return encode_body(outgoing, messages if messages is not None else body["messages"], known)

    def observer(self, body: Json) -> StreamFilter:
        return StreamFilter(client_wants_usage(body))

    def response(self, parsed: Json) -> tuple[Message | None, str | None, Any]:
        message, finish = response_message(parsed)
        return message, finish, parsed.get("usage")

    def usage(self, raw: Any) -> Usage:
        return from_openai_chat(raw)

    def error_body(self, exc: ProxyError) -> bytes:
        return openai_error_bytes(exc)

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def summary_request(self, model: str, messages: list[Message], max_tokens: int) -> tuple[str, Json]:
        return self.upstream_path, {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}

    def summary_text(self, parsed: Json) -> tuple[str | None, Any]:
        message, _, usage = self.response(parsed)
        content = message.get("content") if message else None
        return (content if isinstance(content, str) else None), usage


WIRE = OpenAIChatWire()
