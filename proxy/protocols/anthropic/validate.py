"""Parsing and validating an Anthropic Messages request, in the API's own error wording.

The envelope is checked by `validate_envelope`; each native message while it is converted
(`convert.to_common` calls `validate_native`).

Roles: `user`, `assistant` and, inside `messages`, `system` (the API's mid-conversation system
messages: content a string or text blocks, never the first message, which must be a user turn).
Claude Code 2.1 sends its environment as one right after the first user message; placement past
the first message is the upstream's to judge, as the client's bytes go there unchanged.
"""

from __future__ import annotations

from typing import Any

from ... import codec
from ...errors import BadRequest
from ...types import Json


def parse_body(raw: bytes) -> Json:
    try:
        body = codec.loads(raw)
    except codec.JsonRejected as exc:
        raise BadRequest(f"There was an error parsing the body of your request as JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object, got " + type(body).__name__ + ".")
    return body


def require_model(body: Json) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model: Field required (a non-empty string)", param="model")
    return model


def validate_envelope(body: Json) -> tuple[str, bool]:
    model = require_model(body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest("messages: Field required (an array of messages)", param="messages")
    if not messages:
        raise BadRequest("messages: at least one message is required", param="messages")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("stream: Input should be a valid boolean", param="stream")
    system = body.get("system")
    if system is not None and not isinstance(system, str) and not _blocks_ok(system):
        raise BadRequest("system: Input should be a valid string or a list of text blocks", param="system")
    return model, bool(stream)


def _blocks_ok(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in value)


ROLES = ("user", "assistant", "system")


def _validate_system(i: int, content: Any) -> None:
    where = f"messages.{i}"
    if i == 0:
        raise BadRequest('messages: first message must use the "user" role', param=f"{where}.role")
    if isinstance(content, str):
        return
    if not (_blocks_ok(content) and all(b["type"] == "text" and isinstance(b.get("text"), str) for b in content)):
        raise BadRequest(
            f"{where}.content: a system message's content must be a string or a list of text blocks",
            param=f"{where}.content",
        )


def validate_native(i: int, message: Any) -> None:
    where = f"messages.{i}"
    if not isinstance(message, dict):
        raise BadRequest(f"{where}: Input should be a valid dictionary", param=where)
    role = message.get("role")
    if role not in ROLES:
        raise BadRequest(f"{where}.role: Input should be 'user', 'assistant' or 'system'", param=f"{where}.role")
    content = message.get("content")
    if role == "system":
        _validate_system(i, content)
        return
    if isinstance(content, str):
        return
    if not _blocks_ok(content):
        raise BadRequest(
            f"{where}.content: Input should be a valid string or a list of content blocks with a `type`",
            param=f"{where}.content",
        )
    assert isinstance(content, list)
    for j, block in enumerate(content):
        kind = block["type"]
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise BadRequest(f"{where}.content.{j}.tool_use_id: Field required", param=f"{where}.content.{j}")
        if kind == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)):
            raise BadRequest(f"{where}.content.{j}: tool_use blocks need `id` and `name`", param=f"{where}.content.{j}")
