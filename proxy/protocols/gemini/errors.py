"""Errors in Gemini's shape: `{"error": {"code", "message", "status"}}`, the status being the
google.rpc code name the API pairs with each HTTP status."""

from __future__ import annotations

import json

from ...errors import ProxyError

_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def status_name(code: int) -> str:
    known = _STATUSES.get(code)
    if known is not None:
        return known
    return "INVALID_ARGUMENT" if code < 500 else "INTERNAL"


def error_object(exc: ProxyError) -> dict[str, object]:
    return {"error": {"code": exc.status, "message": exc.message, "status": status_name(exc.status)}}


def error_bytes(exc: ProxyError) -> bytes:
    return json.dumps(error_object(exc)).encode()
