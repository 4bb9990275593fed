"""The request head, guarded below the ASGI app: a read deadline, size and count limits, and
unambiguous framing, on both of uvicorn's HTTP/1.1 implementations.

uvicorn enforces none of these. Without this module a client sending its head one byte every
2 s stays connected indefinitely (uvicorn's keep-alive timer is reset by every byte), a head
ending in bare CRs stays open, a 100 KB header line or 200 headers of 500 bytes are served (h11's
64 KiB limit applies only to a head arriving in pieces; httptools has none), and a request with
both `Transfer-Encoding: chunked` and `Content-Length` is served on a connection kept open, so a
second request hidden in its body reaches the upstream (request smuggling).

The rules, the same for h11 and httptools:
- the head (request line and headers) must be complete within `limits.header_timeout` seconds
  of the connection opening or of the first byte of a keep-alive connection's next request; else
  408 and the connection is closed (an idle connection that sent nothing is just closed);
- at most `limits.max_header_bytes` bytes and `limits.max_headers` header lines, else 431;
- `Transfer-Encoding` together with `Content-Length`, or a repeated `Content-Length`, is 400
  (RFC 9112 6.3: such a message must not be processed as if it were unambiguous).
Every refusal closes the connection, so nothing after the refused head is read as a request.
The answers are JSON in OpenAI's error shape: the path, and so the API, is not known yet.
"""

from __future__ import annotations

import asyncio
import http
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..config import Limits
from ..errors import BadRequest, ProxyError, RequestTimeout, openai_error_bytes

LINGER_SECONDS = 1.0


class HeadTooLarge(ProxyError):
    status = 431
    type = "invalid_request_error"
    code = "request_header_fields_too_large"


class HeadRejected(Exception):
    """Raised from inside a parser callback; carries the answer."""

    def __init__(self, error: ProxyError) -> None:
        super().__init__(error.message)
        self.error = error


def check_head(target_bytes: int, headers: list[tuple[bytes, bytes]], limits: Limits) -> ProxyError | None:
    """The refusal a complete head earns, or None. `headers` as parsed (names in any case)."""
    if len(headers) > limits.max_headers:
        return HeadTooLarge(
            f"The request has {len(headers)} header fields; at most {limits.max_headers} are accepted "
            "(limits.max_headers)."
        )
    size = target_bytes + sum(len(k) + len(v) + 4 for k, v in headers)
    if size > limits.max_header_bytes:
        return too_large(size, limits)
    names = [k.lower() for k, _ in headers]
    lengths = names.count(b"content-length")
    if lengths and b"transfer-encoding" in names:
        return BadRequest(
            "The request has both Transfer-Encoding and Content-Length, which frame its body two "
            "different ways; send exactly one of them."
        )
    if lengths > 1:
        return BadRequest("The request has more than one Content-Length header; send exactly one.")
    return None


def too_large(size: int, limits: Limits) -> HeadTooLarge:
    return HeadTooLarge(
        f"The request head is {size:,} bytes or more; at most {limits.max_header_bytes:,} are accepted "
        "(limits.max_header_bytes). Send fewer or shorter headers."
    )


def error_bytes(error: ProxyError) -> bytes:
    """A complete HTTP/1.1 answer that closes the connection, written below the parser."""
    body = openai_error_bytes(error)
    phrase = http.HTTPStatus(error.status).phrase
    head = (
        f"HTTP/1.1 {error.status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class HeadGuard:
    """The deadline and the refusals, shared by both protocol classes below.

    `_head_open` is True from the start of a request head (the connection opening, or the first
    byte after a completed exchange) until the parser has the whole head; `_head_seen` counts the
    bytes received meanwhile, so a head can never grow past the limit in memory, whatever the
    parser buffers."""

    limits: Limits
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _timer: asyncio.TimerHandle | None = None
    _head_open = False
    _head_seen = 0
    _rejection: ProxyError | None = None
    _refused = False

    def _open_head(self) -> None:
        if self._head_open:
            return
        self._head_open, self._head_seen = True, 0
        self._timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def _close_head(self) -> None:
        self._head_open = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _count_head(self, data: bytes) -> None:
        if self._head_open:
            self._head_seen += len(data)
            if self._head_seen > self.limits.max_header_bytes + 64 * 1024 and b"\n\r\n" not in data:
                # Far past the limit with no end of head in sight: the parser would keep buffering.
                self._refuse(too_large(self._head_seen, self.limits))

    def _head_timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if not self._head_seen:
            self.transport.close()  # an idle connection: nothing to answer
            return
        self._refuse(
            RequestTimeout(
                f"The request head was not complete within {self.limits.header_timeout:g} s "
                f"({self._head_seen} bytes arrived; limits.header_timeout). Send the whole head promptly."
            )
        )

    def _refuse(self, error: ProxyError) -> None:
        """Answer and close. The close lingers: the write side is shut at once, what the client
        still sends is read and dropped for a moment, because closing a socket with unread
        input resets the connection, and the client would lose the answer."""
        self._close_head()
        if self.transport.is_closing() or self._refused:
            return
        self._refused = True
        self.transport.write(error_bytes(error))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request its parser refused; ours names the reason when we did."""
        self._refuse(self._rejection or BadRequest(f"{msg} The request line or a header is malformed."))


class _GuardedConnection(h11.Connection):
    """h11's connection, checking each complete head before uvicorn sees it."""

    def __init__(self, guard: HeadGuard, max_incomplete_event_size: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_incomplete_event_size)
        self.guard = guard

    def next_event(self) -> Any:
        guard = self.guard
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            if exc.error_status_hint == 431:  # h11's own "receive buffer too long"
                guard._rejection = too_large(guard._head_seen, guard.limits)
            raise
        if isinstance(event, h11.Request):
            guard._close_head()
            error = check_head(len(event.target) + len(event.method) + 12, list(event.headers), guard.limits)
            if error is not None:
                guard._rejection = error
                raise h11.RemoteProtocolError(error.message, error.status)
        return event


class GuardedH11(HeadGuard, H11Protocol):
    """h11 hands over the whole head as one `Request` event, checked by `_GuardedConnection`;
    h11's own limit (an incomplete head over `max_header_bytes`) answers 431 too."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._open_head()
        self.conn = _GuardedConnection(self, self.limits.max_header_bytes)

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._open_head()
        self._count_head(data)
        if not self._refused:
            super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._close_head()
        super().connection_lost(exc)


def guarded_h11(limits: Limits) -> type[asyncio.Protocol]:
    return type("GuardedH11", (GuardedH11,), {"limits": limits})


def guarded_httptools(limits: Limits) -> type[asyncio.Protocol]:
    """httptools calls back per header as the head is parsed; a refusal raised there becomes
    uvicorn's parser-error path (`send_400_response`), answered with our status instead."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpTools(HeadGuard, HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._open_head()

        def data_received(self, data: bytes) -> None:
            if self.cycle is None or self.cycle.response_complete:
                self._open_head()  # the first byte of the next request
            self._count_head(data)
            if not self._refused:
                super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self._close_head()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            self._open_head()
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            super().on_url(url)
            if len(self.url) > self.limits.max_header_bytes:
                self._reject(too_large(len(self.url), self.limits))

        def on_header(self, name: bytes, value: bytes) -> None:
            super().on_header(name, value)
            if len(self.headers) > self.limits.max_headers:
                self._reject(check_head(len(self.url), self.headers, self.limits))

        def on_headers_complete(self) -> None:
            self._close_head()
            version = self.parser.get_http_version()
            if version not in ("1.0", "1.1"):  # llhttp takes a line without a version as HTTP/0.9
                self._reject(BadRequest(f"HTTP/{version} is not supported; send HTTP/1.1."))
            self._reject(check_head(len(self.url), self.headers, self.limits))
            super().on_headers_complete()

        def _reject(self, error: ProxyError | None) -> None:
            if error is not None:
                self._rejection = error
                raise HeadRejected(error)

    return type("GuardedHttpTools", (GuardedHttpTools,), {"limits": limits})


def resolved_kind(kind: str) -> str:
    """`server.http` with `auto` resolved: httptools when installed, else h11."""
    if kind != "auto":
        return kind
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


def protocol_class(kind: str, limits: Limits) -> type[asyncio.Protocol]:
    """The guarded protocol for `server.http`."""
    return guarded_httptools(limits) if resolved_kind(kind) == "httptools" else guarded_h11(limits)
