"""The hop to OpenAI-compatible upstreams: raw HTTP over one shared aiohttp session.

aiohttp, not httpx: on this workload httpx's AsyncClient adds a multiple of aiohttp's
per-request overhead and collapses under concurrency (httpx #3215). The upstream URL comes only
from the operator's config -- no request field or header can point the proxy at another host
(litellm's CVE-2024-6587 sent provider keys to a client-chosen `api_base`).

Deadlines are separate: `connect`, `first_byte` (until response headers), `idle` (between two
body pieces) and `total`. aiohttp errors are translated into the proxy's error tree here and
nowhere else; messages name the route and host, never a key.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from ..config import Route
from ..errors import UpstreamError, UpstreamTimeout
from ..protocols import Wire
from .base import UpstreamResponse, relayed_response_headers, within_deadlines


class HttpResponse(UpstreamResponse):
    def __init__(self, response: aiohttp.ClientResponse, route: Route, started: float) -> None:
        super().__init__(
            status=response.status,
            headers=relayed_response_headers(response.headers),
            content_type=response.headers.get("content-type", ""),
            request_id=response.headers.get("x-request-id") or response.headers.get("request-id"),
            started=started,
        )
        self._response = response
        self._route = route

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        """The whole body, to its end. A success must be one complete JSON document: all three
        APIs answer JSON, and an answer cut off half-way (a closed connection, with or without
        Content-Length) would otherwise reach the client as a 200 with broken JSON."""
        timeouts = self._route.upstream.timeouts
        remaining = max(0.001, timeouts.total - (time.monotonic() - self.started))
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(remaining):
                while piece := await self._response.content.read(limit - size + 1):
                    chunks.append(piece)
                    size += len(piece)
                    if size > limit:
                        raise UpstreamError(_where(self._route) + f" sent an answer over {limit:,} bytes")
        except TimeoutError as exc:
            _forget(exc)
            raise UpstreamTimeout(
                _where(self._route) + f" did not finish its answer within {timeouts.total:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            _forget(exc)
            raise UpstreamError(
                _where(self._route) + f" cut off its answer after {size:,} bytes ({type(exc).__name__})"
            ) from None
        data = b"".join(chunks)
        if 200 <= self.status < 300 and not _is_json(data):
            raise UpstreamError(
                _where(self._route) + f" sent a {self.status} answer of {size:,} bytes that is not complete JSON "
                "(cut off, nested too deep to read, or not JSON at all)"
            )
        return data

    async def pieces(self) -> AsyncIterator[bytes]:
        """Body pieces as they arrive, each within the idle deadline, all within the total one."""
        content = self._response.content
        while True:
            try:
                piece = await within_deadlines(self._route, self.started, content.readany, _where(self._route))
            except aiohttp.ClientError as exc:
                _forget(exc)
                raise UpstreamError(_where(self._route) + f" broke off the stream: {type(exc).__name__}") from None
            if not piece:
                return
            yield piece

    def close(self) -> None:
        self._response.close()


def _is_json(data: bytes) -> bool:
    """orjson first (a third of the standard library's time on an answer); what it refuses (NaN, a
    lone surrogate escape, UTF-16) is still JSON when the standard library reads it. Nested past
    both decoders' depth (orjson's 1,024, the interpreter's recursion limit) it is not."""
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            json.loads(data)
        except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return False
    return True


def _forget(exc: BaseException) -> None:
    """The tracebacks of `exc` and of the errors it came from dropped, the locals of their
    finished frames cleared first. aiohttp keeps an error where its traceback leads back to it:
    in a local of one of its frames (`last_exc`; aiohappyeyeballs' list of the connect attempts'
    errors), or on the response's `StreamReader`, which the reading frame (ours) holds. Each is
    a reference cycle through the request's frames, its body and client request included, that
    would wait for a collection (rare in `ctxproxy serve`, `proxy/serving/heap.py`). Only the message
    and type of these errors are used."""
    todo, seen = [exc], set()
    while todo:
        error = todo.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error.__traceback__ = None
        todo += [e for e in (error.__cause__, error.__context__) if e is not None]


def _where(route: Route) -> str:
    return f"upstream {urlsplit(route.upstream.base_url or '').netloc} (route {route.name!r})"


STALE_RETRIES = 2
"""Sends repeated when a pooled keep-alive connection turns out closed: the upstream closed it
(a clean FIN, no byte of an answer) while the request was on its way, the race every HTTP/1.1
client meets at the server's idle timeout. The request never reached a handler, so it is sent
again on another connection. A reset, a fresh connection that closes, or any answer byte is
never retried."""


def _reuse_trace() -> aiohttp.TraceConfig:
    """Marks a request's trace context when its connection came from the pool."""

    async def reused(session: aiohttp.ClientSession, context: Any, params: Any) -> None:
        if isinstance(context.trace_request_ctx, dict):
            context.trace_request_ctx["reused"] = True

    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(reused)
    return trace


class HttpHop:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=True,
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,
            trace_configs=[_reuse_trace()],
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

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
        `wire`, `stream`: unused, the body goes as it is in its own API."""
        assert self._session is not None, "UpstreamClient.start() was not awaited"
        timeouts = route.upstream.timeouts
        assert route.upstream.base_url is not None, "a route without base_url goes through litellm"
        url = route.upstream.base_url + path
        started = time.monotonic()
        client_timeout = aiohttp.ClientTimeout(total=None, connect=timeouts.connect, sock_connect=timeouts.connect)
        answer_within = min(timeouts.connect + timeouts.first_byte, timeouts.total)
        try:
            async with asyncio.timeout(answer_within):
                for attempt in range(STALE_RETRIES + 1):
                    sent_on: dict[str, bool] = {}
                    try:
                        response = await self._session.request(
                            method,
                            url,
                            data=body,
                            headers=headers,
                            timeout=client_timeout,
                            allow_redirects=False,
                            trace_request_ctx=sent_on,
                        )
                        break
                    except aiohttp.ServerDisconnectedError as exc:
                        if not sent_on.get("reused") or attempt == STALE_RETRIES:
                            raise
                        _forget(exc)
        except TimeoutError as exc:
            _forget(exc)
            raise UpstreamTimeout(_where(route) + f" did not answer within {answer_within:g} s") from None
        except aiohttp.ServerTimeoutError as exc:
            _forget(exc)
            raise UpstreamTimeout(
                _where(route) + f" did not accept a connection within {timeouts.connect:g} s"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            _forget(exc)
            raise UpstreamError(_where(route) + f" refused or could not be reached: {exc.strerror or exc}") from None
        except aiohttp.ClientError as exc:
            _forget(exc)
            raise UpstreamError(_where(route) + f" failed before answering: {type(exc).__name__}") from None
        return HttpResponse(response, route, started)
