"""Validating a Responses request (`model`, `stream`, `instructions`, the `input` items), in the
API's own error wording. Parsing the JSON body is shared with chat completions."""

from __future__ import annotations

from typing import Any

from ...errors import BadRequest
from ...types import Json
from .items import MESSAGE_ROLES, item_type


def _bad(message: str, param: str, code: str = "invalid_value") -> BadRequest:
    return BadRequest(message, param=param, code=code)


def validate_input(data: Any) -> None:
    if data is None or isinstance(data, str):
        return
    if not isinstance(data, list):
        raise _bad(
            f"Invalid type for 'input': expected a string or an array of input items, got {type(data).__name__}.",
            "input",
            "invalid_type",
        )
    for i, item in enumerate(data):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"Invalid type for '{where}': expected an object.", where, "invalid_type")
        kind = item_type(item)
        if kind == "None":
            raise _bad(f"Missing required parameter: '{where}.type'.", f"{where}.type", "missing_required_parameter")
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in MESSAGE_ROLES:
                raise _bad(
                    f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and 'user'.",
                    f"{where}.role",
                )
            content = item.get("content")
            if not isinstance(content, str | list) or (
                isinstance(content, list) and not all(isinstance(p, dict) for p in content)
            ):
                raise _bad(
                    f"Invalid type for '{where}.content': expected a string or an array of content parts.",
                    f"{where}.content",
                    "invalid_type",
                )
        elif kind in ("function_call", "function_call_output"):
            if not isinstance(item.get("call_id"), str):
                raise _bad(
                    f"Missing required parameter: '{where}.call_id'.", f"{where}.call_id", "missing_required_parameter"
                )
            if kind == "function_call" and not isinstance(item.get("name"), str):
                raise _bad(
                    f"Missing required parameter: '{where}.name'.", f"{where}.name", "missing_required_parameter"
                )
            if kind == "function_call" and not isinstance(item.get("arguments"), str):
                raise _bad(
                    f"Invalid type for '{where}.arguments': expected a string.", f"{where}.arguments", "invalid_type"
                )
            if kind == "function_call_output" and not isinstance(item.get("output"), str | list):
                raise _bad(
                    f"Invalid type for '{where}.output': expected a string or an array.",
                    f"{where}.output",
                    "invalid_type",
                )


def validate_envelope(body: Json) -> tuple[str, bool]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("Invalid type for 'stream': expected a boolean.", param="stream", code="invalid_type")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest(
            "Invalid type for 'instructions': expected a string.", param="instructions", code="invalid_type"
        )
    validate_input(body.get("input"))
    return model, bool(stream)
