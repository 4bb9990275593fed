"""The forward step: one hop to the route's upstream, raw HTTP (`http`) or through litellm
(`litellm`), behind one `Hop` protocol and one `UpstreamResponse` (`base`)."""

from __future__ import annotations

from ..config import Route
from ..protocols import Wire
from .base import Hop, UpstreamResponse, upstream_request_headers
from .http import HttpHop
from .litellm import LitellmHop, uses_litellm

__all__ = [
    "Hop",
    "RoutedUpstream",
    "UpstreamResponse",
    "upstream_request_headers",
    "uses_litellm",
]


class RoutedUpstream(HttpHop):
    """The upstream client of the app: raw HTTP for OpenAI-compatible routes, litellm for routes
    whose upstream names a `model`. One object, so every caller (requests, summaries) picks the
    route's own hop without knowing there are two."""

    def __init__(self) -> None:
        super().__init__()
        self.litellm = LitellmHop()

    async def send(
        self,
        route: Route,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        wire: Wire | None = None,
        stream: bool = False,
    ) -> UpstreamResponse:
        if route.upstream.model:
            return await self.litellm.send(route, method, path, body, headers, wire, stream)
        return await super().send(route, method, path, body, headers)
