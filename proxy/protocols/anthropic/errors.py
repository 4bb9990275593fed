"""Errors in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`."""

from __future__ import annotations

import json

from ...errors import ProxyError

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(exc: ProxyError) -> str:
    known = _ERROR_TYPES.get(exc.status)
    if known is not None:
        return known
    return "invalid_request_error" if exc.status < 500 else "api_error"


def error_bytes(exc: ProxyError) -> bytes:
    return json.dumps({"type": "error", "error": {"type": error_type(exc), "message": exc.message}}).encode()
