"""The gate in front of every inspector handler: credentials first, errors rendered safely.

A page handler runs only with valid credentials (`access.require`); a browser without them is
sent to the login form (303, nothing of the page rendered), a wrong bearer token gets a 401. Every
error becomes an HTML page (pages) or the OpenAI-shaped JSON error (the JSON under /ui/api), both
with the security headers; while no admin token is configured every path is a 404.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request

from ..asgi import RawResponse, bearer_token
from ..errors import ProxyError, Unauthorized
from ..services import Services
from . import access
from .access import SECURITY_HEADERS, Credentials
from .html import esc, frame, json_answer, respond


@dataclass(frozen=True)
class Ctx:
    services: Services
    creds: Credentials
    csrf: str | None
    """The session's CSRF proof for the forms this page renders (None for bearer requests)."""


Handler = Callable[[Request, Ctx], Awaitable[RawResponse]]


async def context(request: Request) -> Ctx:
    creds = access.require(request)
    token = access.admin_token(request)
    csrf = access.csrf_token(token, creds.nonce) if creds.nonce else None
    return Ctx(request.app.state.ctx, creds, csrf)


def page(handler: Handler) -> Callable[[Request], Awaitable[RawResponse]]:
    async def run(request: Request) -> RawResponse:
        access.admin_token(request)  # off: the app's own 404, as for any unknown path
        try:
            ctx = await context(request)
            return await handler(request, ctx)
        except Unauthorized:
            if bearer_token(request.headers) is None and request.method == "GET":
                return RawResponse(b"", 303, [("location", "/ui/login"), *SECURITY_HEADERS])
            return error_page(Unauthorized("Invalid credentials: log in at /ui/login."))
        except ProxyError as exc:
            return error_page(exc)

    return run


def api(handler: Handler) -> Callable[[Request], Awaitable[RawResponse]]:
    async def run(request: Request) -> RawResponse:
        access.admin_token(request)
        try:
            return await handler(request, await context(request))
        except ProxyError as exc:
            return json_answer(exc.openai_body(), exc.status)

    return run


def error_page(exc: ProxyError) -> RawResponse:
    body = f'<p class="error" data-status="{exc.status}">{esc(exc.message)}</p><p><a href="/ui/">Back</a></p>'
    return respond(frame(f"Error {exc.status}", body, None, None), exc.status)
