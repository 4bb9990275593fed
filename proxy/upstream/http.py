"""The hop to OpenAI-compatible upstreams: raw HTTP over one shared aiohttp session.

aiohttp, not httpx: on this workload httpx's AsyncClient adds ~1.4 ms per request and collapses
under concurrency (httpx #3215); aiohttp adds ~0.55 ms. The upstream URL comes only from the
operator's config -- no request field or header can point the proxy at another host (litellm's
CVE-2024-6587 sent provider keys to a client-chosen `api_base`).

Deadlines are separate: `connect`, `first_byte` (until response headers), `idle` (between two
body pieces) and `total`. aiohttp errors are translated into the proxy's error tree here and
nowhere else; messages name the route and host, never a key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

import aiohttp

from ..config import Route
from ..errors import UpstreamError, UpstreamTimeout

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


CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})


def upstream_request_headers(
    client_headers: Mapping[str, str], auth: dict[str, str] | None, drop: frozenset[str]
) -> dict[str, str]:
    """The client's headers minus hop-by-hop ones and our own; with `auth` (the route's key in
    the wire's header) the client's credentials are replaced, without it they are forwarded."""
    out: dict[str, str] = {}
    # Fields named in Connection are hop-by-hop too (RFC 9110 7.6.1).
    named = {t.strip().lower() for k, v in client_headers.items() if k.lower() == "connection" for t in v.split(",")}
    for name, value in client_headers.items():
        lower = name.lower()
        if lower in _REQUEST_DROP or lower in drop or lower in named:
            continue
        if auth is not None and lower in CREDENTIAL_HEADERS:
            continue
        out[name] = value
    if auth is not None:
        out.update(auth)
    return out


def relayed_response_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers.items() if k.lower() not in _RESPONSE_DROP]


@dataclass
class UpstreamResponse:
    status: int
    headers: list[tuple[str, str]]
    content_type: str
    request_id: str | None
    started: float
    _response: aiohttp.ClientResponse
    _route: Route

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        timeouts = self._route.upstream.timeouts
        remaining = max(0.001, timeouts.total - (time.monotonic() - self.started))
        try:
            async with asyncio.timeout(remaining):
                data = await self._response.content.read(limit)
        except TimeoutError:
            raise UpstreamTimeout(
                _where(self._route) + f" did not finish its answer within {timeouts.total:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise UpstreamError(_where(self._route) + f" broke off its answer: {type(exc).__name__}") from None
        return data

    async def pieces(self) -> AsyncIterator[bytes]:
        """Body pieces as they arrive, each within the idle deadline, all within the total one."""
        content = self._response.content
        while True:
            try:
                piece = await within_deadlines(self._route, self.started, content.readany, _where(self._route))
            except aiohttp.ClientError as exc:
                raise UpstreamError(_where(self._route) + f" broke off the stream: {type(exc).__name__}") from None
            if not piece:
                return
            yield piece

    def close(self) -> None:
        self._response.close()


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


def _where(route: Route) -> str:
    return f"upstream {urlsplit(route.upstream.base_url or '').netloc} (route {route.name!r})"


class UpstreamClient:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=True, timeout=aiohttp.ClientTimeout(total=None), trust_env=False
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(
        self, route: Route, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> UpstreamResponse:
        """Send and wait for the response headers. Raises UpstreamError / UpstreamTimeout."""
        assert self._session is not None, "UpstreamClient.start() was not awaited"
        timeouts = route.upstream.timeouts
        assert route.upstream.base_url is not None, "a route without base_url goes through litellm"
        url = route.upstream.base_url + path
        started = time.monotonic()
        client_timeout = aiohttp.ClientTimeout(total=None, connect=timeouts.connect, sock_connect=timeouts.connect)
        answer_within = min(timeouts.connect + timeouts.first_byte, timeouts.total)
        try:
            async with asyncio.timeout(answer_within):
                response = await self._session.request(
                    method, url, data=body, headers=headers, timeout=client_timeout, allow_redirects=False
                )
        except TimeoutError:
            raise UpstreamTimeout(_where(route) + f" did not answer within {answer_within:g} s") from None
        except aiohttp.ServerTimeoutError:
            raise UpstreamTimeout(
                _where(route) + f" did not accept a connection within {timeouts.connect:g} s"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamError(_where(route) + f" refused or could not be reached: {exc.strerror or exc}") from None
        except aiohttp.ClientError as exc:
            raise UpstreamError(_where(route) + f" failed before answering: {type(exc).__name__}") from None
        return UpstreamResponse(
            status=response.status,
            headers=relayed_response_headers(response.headers),
            content_type=response.headers.get("content-type", ""),
            request_id=response.headers.get("x-request-id") or response.headers.get("request-id"),
            started=started,
            _response=response,
            _route=route,
        )
