"""Parsing and validating a Gemini `generateContent` request, in the API's own error wording.

The proxy checks what it must read to convert the request (`contents` and their `parts`, the
roles, `systemInstruction`); the rest -- whether function responses follow their calls, thought
signatures, generation settings -- is the upstream's to judge on the client's own bytes.
A part's fields are read by their JSON names (`functionCall`) or their proto names
(`function_call`), as the API accepts both.
"""

from __future__ import annotations

from typing import Any

from ... import codec
from ...errors import BadRequest
from ...types import Json

ROLES = ("user", "model")


def parse_body(raw: bytes) -> Json:
    try:
        body = codec.loads(raw)
    except codec.JsonRejected as exc:
        raise BadRequest(f"Invalid JSON payload received. {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("Invalid JSON payload received. Expected an object, got " + type(body).__name__ + ".")
    return body


def field(obj: Json, name: str) -> Any:
    """`obj[name]` by its JSON name, else by its proto name (`thoughtSignature` / `thought_signature`)."""
    if name in obj:
        return obj[name]
    snake = "".join("_" + c.lower() if c.isupper() else c for c in name)
    return obj.get(snake)


def validate_body(body: Json) -> None:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise BadRequest("* GenerateContentRequest.contents: contents is not specified", param="contents")
    for i, content in enumerate(contents):
        validate_content(i, content)
    system = field(body, "systemInstruction")
    if system is not None and not isinstance(system, str) and not _parts_ok(system):
        raise BadRequest(
            "Invalid value at 'system_instruction': a Content with parts is expected", param="systemInstruction"
        )
    if "tools" in body and not isinstance(body["tools"], list):
        raise BadRequest("Invalid value at 'tools': a list of Tool objects is expected", param="tools")


def _parts_ok(content: Any) -> bool:
    parts = content.get("parts") if isinstance(content, dict) else None
    return isinstance(parts, list) and all(isinstance(p, dict) for p in parts)


def validate_content(i: int, content: Any) -> None:
    where = f"contents[{i}]"
    if not isinstance(content, dict):
        raise BadRequest(f"Invalid value at '{where}': a Content object is expected", param=where)
    if content.get("role", "user") not in ROLES:
        raise BadRequest("Please use a valid role: user, model.", param=f"{where}.role")
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        raise BadRequest(
            f"* GenerateContentRequest.{where}.parts: contents.parts must not be empty.", param=f"{where}.parts"
        )
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            raise BadRequest(f"Invalid value at '{where}.parts[{j}]': a Part object is expected", param=where)
        call = field(part, "functionCall")
        if call is not None and not (isinstance(call, dict) and isinstance(call.get("name"), str)):
            raise BadRequest(f"* GenerateContentRequest.{where}.parts[{j}].function_call.name: Name is required")
        response = field(part, "functionResponse")
        if response is not None and not (isinstance(response, dict) and isinstance(response.get("name"), str)):
            raise BadRequest(f"* GenerateContentRequest.{where}.parts[{j}].function_response.name: Name is required")
