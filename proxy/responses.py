"""Plain ASGI responses that keep upstream headers as a list (repeated names survive)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Receive, Scope, Send


class RawResponse:
    def __init__(self, body: bytes, status: int, headers: list[tuple[str, str]]) -> None:
        self.body = body
        self.status = status
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers]
        headers.append((b"content-length", str(len(self.body)).encode()))
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


def json_response(data: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> RawResponse:
    body = json.dumps(data).encode()
    return RawResponse(body, status, [("content-type", "application/json"), *(headers or [])])
