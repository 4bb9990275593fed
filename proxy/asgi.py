"""The HTTP edge, below the handlers: the model call's request (`Incoming`), plain ASGI
responses, request body reading with its limits, and the credentials a request carries.

Responses keep upstream headers as a list, so repeated names survive. uvicorn and starlette enforce
no body limits: a 50 MB body would otherwise be read whole into memory, and a client sending one
byte every two seconds would hold a worker forever. The body is refused (413) from its
Content-Length before any of it is read, or as soon as the bytes read pass the limit.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from . import codec
from .config import Limits
from .errors import BadRequest, NotFound, PayloadTooLarge, ProxyError, RequestTimeout, Unauthorized, openai_error_bytes
from .protocols.base import Wire

SHUTDOWN_KEY = "ctxproxy.shutdown"
"""Scope key of the event set when in-flight calls must end (proxy/relay.py ends its stream with
the API's error event)."""


class Incoming:
    """A model call's request as the handlers read it, straight from the ASGI scope (no
    starlette `Request`: the model endpoints bypass starlette's router, `proxy/serving/app.py`).
    `reported` holds the headers that say what happened to the request (`chat._reported`),
    set once its conversation is known, so that every answer from then on, errors included,
    carries them."""

    __slots__ = ("scope", "receive", "headers", "reported")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope = scope
        self.receive = receive
        self.headers = Headers(scope=scope)
        self.reported: list[tuple[str, str]] = []


class RawResponse:
    """`after` runs once the body is sent (bookkeeping that the client need not wait for); it is
    shielded, so a client that hangs up cannot cancel it."""

    def __init__(
        self,
        body: bytes,
        status: int,
        headers: list[tuple[str, str]],
        after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.headers = headers
        self.after = after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers]
        headers.append((b"content-length", str(len(self.body)).encode()))
        try:
            await send({"type": "http.response.start", "status": self.status, "headers": headers})
            await send({"type": "http.response.body", "body": self.body})
        finally:
            if self.after is not None:
                with anyio.CancelScope(shield=True):
                    await self.after()


def json_response(data: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> RawResponse:
    body = codec.dumps(data)
    return RawResponse(body, status, [("content-type", "application/json"), *(headers or [])])


async def read_body(headers: Mapping[str, str], receive: Receive, limits: Limits) -> bytes:
    """The whole request body from `receive`, within the body limit and the receive deadline."""
    declared = headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest("The Content-Length header is not a number.")
        if int(declared) > limits.max_body_bytes:
            raise PayloadTooLarge(_too_large(int(declared), limits))
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.receive_timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise BadRequest("The client disconnected before the request body was complete.")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise PayloadTooLarge(_too_large(size, limits))
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise RequestTimeout(
            f"The request body was not received within {limits.receive_timeout:g} s "
            f"({size} bytes arrived). Send the whole body promptly."
        ) from None
    return b"".join(chunks)


def _too_large(size: int, limits: Limits) -> str:
    return (
        f"The request body is {size:,} bytes or more; this proxy accepts at most {limits.max_body_bytes:,} bytes "
        "(limits.max_body_bytes). Shorten the request or raise the limit."
    )


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer ...` header, or None."""
    auth = headers.get("authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return None


def client_api_key(headers: Mapping[str, str]) -> str | None:
    """The client's own key in any of the ways the APIs take it (OpenAI, Anthropic, Azure, Gemini)."""
    return (
        bearer_token(headers)
        or headers.get("x-api-key")
        or headers.get("api-key")
        or headers.get("x-goog-api-key")
        or None
    )


def require_token(request: Request, expected: str | None, what: str, setting: str, code: str) -> None:
    """The gate of the operator's own endpoints (admin API, metrics): 404 while the token is not
    configured, as if the path did not exist; 401 unless the bearer token matches (constant time)."""
    if not expected:
        raise NotFound(f"Unknown path {request.url.path}: {what} is disabled (set {setting}).")
    given = bearer_token(request.headers) or ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise Unauthorized(f"{what} needs 'Authorization: Bearer <token>'.", code=code)


def error_response(exc: ProxyError, wire: Wire | None) -> RawResponse:
    """The one rendering of an error answer: in the shape of the API the client called (`wire`),
    OpenAI's when the path belongs to none."""
    body = wire.error_body(exc) if wire is not None else openai_error_bytes(exc)
    return RawResponse(body, exc.status, [("content-type", "application/json")])
