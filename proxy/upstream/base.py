"""The forward step's vocabulary: what a hop is, what it answers, and which headers cross it.

A hop (`Hop.send`) takes a route, a method, a path, body bytes and headers, and answers once the
response headers are in, as an `UpstreamResponse` whose body is read whole (`read`) or piece by
piece (`pieces`; a stream's SSE events a list per piece, `reads`) within the route's deadlines.
Two hops implement it: raw HTTP for OpenAI-compatible upstreams (`http`) and litellm for any
other provider (`litellm`); `RoutedUpstream` (in `__init__`) picks one per route, for requests
and summarizer calls alike.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Protocol, TypeVar

from ..config import Route
from ..errors import UpstreamTimeout
from ..protocols import CREDENTIAL_HEADERS, Wire
from ..sse import SseEvent, SseSplitter

T = TypeVar("T")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Never forwarded upstream: our own routing and identity headers, the client's credentials
# (replaced when the route has its own key), and what aiohttp sets itself.
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "cookie", "x-forwarded-for"}
# Never relayed to the client: framing the proxy redoes, and cookies of the upstream's edge.
_RESPONSE_DROP = HOP_BY_HOP | {"content-length", "content-encoding", "date", "server", "set-cookie"}


OWN_PREFIX = "x-ctxproxy-"
"""The proxy's own headers (`proxy/modes.py`): a client's never go upstream, and an upstream's (a
ctxproxy in front of another) are replaced by this proxy's own."""


def upstream_request_headers(
    client_headers: Mapping[str, str], auth: dict[str, str] | None, drop: frozenset[str]
) -> dict[str, str]:
    """The client's headers minus hop-by-hop ones and our own; with `auth` (the route's key in
    the wire's header) the client's credentials (in any wire's header: `CREDENTIAL_HEADERS`) are
    replaced, without it they are forwarded."""
    out: dict[str, str] = {}
    # Fields named in Connection are hop-by-hop too (RFC 9110 7.6.1).
    named = {t.strip().lower() for k, v in client_headers.items() if k.lower() == "connection" for t in v.split(",")}
    for name, value in client_headers.items():
        lower = name.lower()
        if lower in _REQUEST_DROP or lower in drop or lower in named or lower.startswith(OWN_PREFIX):
            continue
        if auth is not None and lower in CREDENTIAL_HEADERS:
            continue
        out[name] = value
    if auth is not None:
        out.update(auth)
    return out


def relayed_response_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    return [
        (k, v) for k, v in headers.items() if k.lower() not in _RESPONSE_DROP and not k.lower().startswith(OWN_PREFIX)
    ]


class UpstreamResponse:
    """An upstream's answer once its headers are in; the body is read by the hop's subclass."""

    def __init__(
        self, status: int, headers: list[tuple[str, str]], content_type: str, request_id: str | None, started: float
    ) -> None:
        self.status = status
        self.headers = headers
        self.content_type = content_type
        self.request_id = request_id
        self.started = started

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        raise NotImplementedError

    def in_memory(self) -> bytes | None:
        """The whole body when it is already held in memory (reading it cannot wait), else None."""
        return None

    def pieces(self) -> AsyncIterator[bytes]:
        raise NotImplementedError

    async def reads(self, splitter: SseSplitter) -> AsyncIterator[list[SseEvent]]:
        """A stream's complete SSE events, a list per piece, split by `splitter` (which keeps an
        unterminated rest). A response that has split its events already hands them as they are
        (`recall/watch.Watched`): the relay then does not split and parse them a second time."""
        async for piece in self.pieces():
            yield splitter.feed(piece)

    def close(self) -> None:
        raise NotImplementedError


class HeldResponse(UpstreamResponse):
    """An answer whose body was read whole already (to classify an error, to see whether it
    called recall): the same status, headers and bytes, served from memory."""

    def __init__(self, answer: UpstreamResponse, body: bytes) -> None:
        super().__init__(answer.status, answer.headers, answer.content_type, answer.request_id, answer.started)
        self._body = body

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        return self._body[:limit]

    def in_memory(self) -> bytes | None:
        return self._body

    async def pieces(self) -> AsyncIterator[bytes]:
        yield self._body

    def close(self) -> None:
        return None


class Replayed(UpstreamResponse):
    """A stream whose first pieces were read already (to see what it begins with, or the whole of
    it): the same response, those pieces first, then `rest` as it comes (None: they were all);
    an error met while reading them (`error`) is raised where the relay reaches it."""

    def __init__(
        self,
        answer: UpstreamResponse,
        head: list[bytes],
        rest: AsyncIterator[bytes] | None = None,
        error: BaseException | None = None,
    ) -> None:
        super().__init__(answer.status, answer.headers, answer.content_type, answer.request_id, answer.started)
        self._answer, self._head, self._rest, self._error = answer, head, rest, error

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        return b"".join([piece async for piece in self.pieces()])[:limit]

    async def pieces(self) -> AsyncIterator[bytes]:
        for piece in self._head:
            yield piece
        if self._error is not None:
            raise self._error
        if self._rest is not None:
            async for piece in self._rest:
                yield piece

    def close(self) -> None:
        self._answer.close()


class Hop(Protocol):
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
        """Send and wait for the response headers. Raises UpstreamError / UpstreamTimeout.
        `wire` and `stream`: the client API of a model call and whether it streams, for a hop
        that must render the call in another API (litellm's chat completions)."""
        ...


async def within_deadlines(route: Route, started: float, fetch: Callable[[], Awaitable[T]], where: str) -> T:
    """One await of `fetch` (the next piece of an answer) bounded by the idle deadline and by what
    is left of the total one; UpstreamTimeout naming `where` otherwise."""
    timeouts = route.upstream.timeouts
    remaining = timeouts.total - (time.monotonic() - started)
    if remaining <= 0:
        raise UpstreamTimeout(where + f" exceeded the total deadline of {timeouts.total:g} s")
    try:
        async with asyncio.timeout(min(timeouts.idle, remaining)):
            return await fetch()
    except TimeoutError:
        raise UpstreamTimeout(where + f" sent nothing for {min(timeouts.idle, remaining):g} s mid-stream") from None
