"""Plain ASGI responses that keep upstream headers as a list (repeated names survive)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send


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
    body = json.dumps(data).encode()
    return RawResponse(body, status, [("content-type", "application/json"), *(headers or [])])
