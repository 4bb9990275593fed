"""One exception tree, rendered in the client API's own error shape at one boundary.

    CtxproxyError                   every error ctxproxy raises on purpose
    ├── ConfigError                 the config cannot be used (start-up, check-config): one line
    │                               per problem (file: field.path: what is wrong)
    └── ProxyError                  answered to a client: status, type, code
        ├── BadRequest              400 invalid_request_error
        │   └── ContextLengthExceeded   400 invalid_request_error / context_length_exceeded
        ├── Unauthorized            401 authentication_error
        ├── Forbidden               403 permission_error (a client key off its routes; a form without CSRF proof)
        ├── NotFound                404 not_found_error
        ├── Conflict                409 invalid_request_error / ambiguous_conversation
        ├── RequestTimeout          408 invalid_request_error / request_timeout
        ├── PayloadTooLarge         413 invalid_request_error / request_too_large
        ├── RateLimited             429 requests|tokens / rate_limit_exceeded (a client key's or
        │   │                       tenant's per-minute limit); sent with Retry-After
        │   └── BudgetExceeded      429 insufficient_quota / budget_exceeded (its money or token
        │                           budget for the day or month is spent); sent with Retry-After
        │                           and `x-should-retry: false` (the SDKs then do not retry)
        ├── UpstreamError           502 upstream_error (refused, reset, malformed answer)
        │   └── UpstreamTimeout     504 upstream_error / upstream_timeout
        ├── Overloaded              503 service_unavailable / overloaded (concurrency cap) or
        │                           shutting_down (draining); sent with Retry-After
        └── StoreUnavailable        503 service_unavailable / store_unavailable
            └── StoreError          raised by a store backend (proxy/store/); the message is for
                │                   the log: the app answers with StoreUnavailable's own message
                └── ConversationGone    the conversation was deleted; late writes are refused

Rendering happens in one place, `http.error_response`, in the shape of the API whose path was
called (each wire's `error_body`); once a stream has started, the wire's observer renders the
error as an event of that stream (`StreamObserver.error_event`). Messages say what happened, what
was expected and what to do; they never carry secrets. Store backends translate their library's
failures (sqlite3.Error, RedisError, socket errors) into StoreError at one boundary each, so
callers catch one type whatever the backend.
"""

from __future__ import annotations

import json
from typing import Any


class CtxproxyError(Exception):
    """The root of the tree."""


class ConfigError(CtxproxyError):
    """The config cannot be used; `problems` holds one line per problem (file, field, what)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class ProxyError(CtxproxyError):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def openai_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class BadRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class ContextLengthExceeded(BadRequest):
    code = "context_length_exceeded"


class Unauthorized(ProxyError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class Forbidden(ProxyError):
    status = 403
    type = "permission_error"
    code = "forbidden"


class NotFound(ProxyError):
    status = 404
    type = "not_found_error"
    code = "not_found"


class Conflict(ProxyError):
    status = 409
    type = "invalid_request_error"
    code = "ambiguous_conversation"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class RequestTimeout(ProxyError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class RateLimited(ProxyError):
    """Refused until `retry_after` seconds from now, when the limit's period resets
    (`proxy/quota.py`); `kind` names what ran out, as OpenAI's error type does."""

    status = 429
    type = "requests"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int, kind: str = "requests") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.type = kind
        self.limit: tuple[str, str] | None = None
        """whose limit and which: (`key` | `tenant`, the quota field), for the metrics"""


class BudgetExceeded(RateLimited):
    code = "budget_exceeded"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, retry_after=retry_after, kind="insufficient_quota")


class UpstreamError(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class Overloaded(ProxyError):
    status = 503
    type = "service_unavailable"
    code = "overloaded"


class StoreUnavailable(ProxyError):
    status = 503
    type = "service_unavailable"
    code = "store_unavailable"


class StoreError(StoreUnavailable):
    """The backend failed; the request is answered 503 and nothing is half-written."""


class ConversationGone(StoreError):
    """The conversation was deleted; late writes (a finishing stream, a compaction) are refused."""


def openai_error_bytes(exc: ProxyError) -> bytes:
    return json.dumps(exc.openai_body()).encode()


def sse_error_event(exc: ProxyError) -> bytes:
    """The error event sent once a stream has started and a status code can no longer change."""
    return b"data: " + openai_error_bytes(exc) + b"\n\n"
