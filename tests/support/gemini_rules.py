"""What the scripted Gemini upstream (:mod:`tests.support.gemini_upstream`) checks and counts:
the API's error bodies and wordings, the fields a part may have, how it signs a part's thought
and how it counts a request (its own way: :data:`GEMINI_COUNTING`, never ctxproxy's estimator).
Sources are cited in the server's docstring."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from tests.support.counting import Counting

SIGNING_KEY = b"scripted-gemini-thought-key"
SKIP_SIGNATURE = "skip_thought_signature_validator"
"""What Gemini's thought-signature guide gives callers for a call without a signature of its own."""
GEMINI_COUNTING = Counting(
    "gemini-like", encoding="cl100k_base", message_tokens=4, role_tokens=1, tools_as_json=True, scale=1.08
)
PART_FIELDS = frozenset(
    {
        "text",
        "thought",
        "thoughtSignature",
        "functionCall",
        "functionResponse",
        "inlineData",
        "fileData",
        "executableCode",
        "codeExecutionResult",
        "videoMetadata",
    }
)
CALL_TURN = (
    "Please ensure that function call turn comes immediately after a user turn or after a function response turn."
)
RESPONSE_TURN = "Please ensure that function response turn comes immediately after a function call turn."
RESPONSE_COUNT = (
    "Please ensure that the number of function response parts is equal to the number of function call parts "
    "of the function call turn."
)


def error_body(code: int, message: str, status: str = "INVALID_ARGUMENT") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def camel(name: str) -> str:
    """The protobuf JSON mapping accepts a field by its proto name too (`thought_signature`)."""
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def native_part(part: dict[str, Any]) -> dict[str, Any]:
    return {camel(k): v for k, v in part.items()}


def sign(part: dict[str, Any]) -> str:
    """The signature this server gives a part: an HMAC of what the part says (a call's name and
    arguments: the id a client adds to a call it re-sends is not the model's)."""
    part = native_part(part)
    call = part.get("functionCall")
    content = {"name": call.get("name"), "args": call.get("args")} if isinstance(call, dict) else part.get("text", "")
    data = json.dumps(content, sort_keys=True, ensure_ascii=False).encode()
    return base64.b64encode(hmac.new(SIGNING_KEY, data, hashlib.sha256).digest()).decode()


def decoded(signature: Any) -> bytes | None:
    """A signature's bytes: the field is `bytes`, in standard or URL-safe base64 (the Python SDK
    sends back the URL-safe form of what it received)."""
    if not isinstance(signature, str):
        return None
    try:
        return base64.b64decode(signature.replace("-", "+").replace("_", "/") + "=" * (-len(signature) % 4))
    except ValueError:
        return None


def part_text(part: dict[str, Any]) -> str:
    part = native_part(part)
    if isinstance(part.get("text"), str):
        return part["text"]
    call = part.get("functionCall")
    if isinstance(call, dict):
        return str(call.get("name", "")) + json.dumps(call.get("args") or {}, sort_keys=True)
    response = part.get("functionResponse")
    if isinstance(response, dict):
        return str(response.get("name", "")) + json.dumps(response.get("response") or {}, sort_keys=True)
    return ""


def segments(body: dict[str, Any], counting: Counting) -> list[tuple[Any, int]]:
    """(segment, tokens) in prefix order: system instruction, tools, contents."""
    out: list[tuple[Any, int]] = []
    system = body.get("systemInstruction")
    if isinstance(system, dict):
        out.append((system, sum(counting.text(part_text(p)) for p in system.get("parts") or [])))
    elif isinstance(system, str):
        out.append((system, counting.text(system)))
    for tool in body.get("tools") or []:
        out.append((tool, counting.json(tool)))
    for content in body.get("contents") or []:
        tokens = counting.message_tokens + counting.role(str(content.get("role", "user")))
        tokens += sum(counting.text(part_text(p)) for p in content.get("parts") or [] if isinstance(p, dict))
        out.append((content, tokens))
    return out


def estimate_tokens(body: dict[str, Any], counting: Counting = GEMINI_COUNTING) -> int:
    return sum(tokens for _, tokens in segments(body, counting))
