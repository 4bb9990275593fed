"""Parsing and validating a chat-completions request, in the API's own error wording."""

from __future__ import annotations

from typing import Any

from ... import codec
from ...errors import BadRequest
from ...types import Json, Message

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def parse_body(raw: bytes) -> Json:
    try:
        body = codec.loads(raw)
    except codec.JsonRejected as exc:
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
    if not isinstance(role, str) or role not in ROLES:
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
