"""Hostile HTTP at the edge, on both of uvicorn's HTTP implementations (h11 and httptools):
a header-read deadline (slowloris, a head ending in bare CRs, an idle connection), header size
and count limits (431), `Transfer-Encoding` + `Content-Length` (400, connection closed, nothing
smuggled upstream), a malformed request line (400), an oversized body (413) -- and normal
requests unaffected on the same proxy. Measured row: `hostile HTTP`."""

from __future__ import annotations

import json
import select
import socket
import time
import uuid

import pytest

from tests.support.e2e import user
from tests.support.measure import report

pytestmark = pytest.mark.slow

HEAD_TIMEOUT = 2.0


@pytest.fixture(params=["h11", "httptools"])
def edge(request, proxy):
    return proxy(server={"http": request.param}, limits={"header_timeout": HEAD_TIMEOUT, "max_body_bytes": 65536})


def exchange(port: int, data: bytes, trickle: float | None = None, timeout: float = 15) -> tuple[bytes, float, bool]:
    """Send `data` (all at once, or a byte every `trickle` s until the server answers), read
    until the server closes. Returns (bytes read, seconds until closed, closed by the server)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        t0 = time.monotonic()
        try:
            if trickle is None:
                s.sendall(data)
            else:
                for b in data:
                    if select.select([s], [], [], trickle)[0]:
                        break  # the server answered (or closed): stop sending, read it
                    s.sendall(bytes([b]))
        except OSError:
            pass  # the server closed while we were still sending: that is the point
        out = b""
        closed = False
        try:
            while True:
                part = s.recv(65536)
                if not part:
                    closed = True
                    break
                out += part
        except (ConnectionResetError, BrokenPipeError):
            closed = True
        except TimeoutError:
            pass
        return out, time.monotonic() - t0, closed


def status_of(data: bytes) -> int | None:
    if not data.startswith(b"HTTP/1.1 "):
        return None
    return int(data.split(b" ", 2)[1])


def body_of(data: bytes) -> dict:
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def read_response(s: socket.socket) -> bytes:
    """One whole response (head and Content-Length body) from a keep-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    top, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in top.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += s.recv(65536)
    return top + b"\r\n\r\n" + body


def head(path: str = "/healthz", extra: bytes = b"") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode() + extra


def chat_request(api_key: str, text: str) -> bytes:
    body = json.dumps({"model": "gpt-4o", "messages": [user(text)]}).encode()
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_slowloris_head_is_cut_at_the_deadline(edge):
    """One byte every 0.5 s would take ~20 s for this head; the deadline is 2 s."""
    data, elapsed, closed = exchange(edge.port, head(extra=b"X-Slow: " + b"a" * 30 + b"\r\n\r\n"), trickle=0.5)
    assert closed and elapsed < HEAD_TIMEOUT + 1.5, f"connection held {elapsed:.1f} s"
    assert status_of(data) in (408, None), data[:200]
    if data:
        assert body_of(data)["error"]["code"] == "request_timeout"
    report("hostile HTTP slowloris", implementation=edge.config["server"]["http"], closed_after_s=round(elapsed, 2))


def test_head_of_bare_crs_is_closed_within_the_deadline(edge):
    data, elapsed, closed = exchange(edge.port, head(extra=b"X-A: b\r\r\r\r\r\r"))
    assert closed and elapsed < HEAD_TIMEOUT + 1, f"connection held {elapsed:.1f} s"
    assert status_of(data) in (400, 408), data[:200]


def test_idle_connection_is_closed_within_the_deadline(edge):
    data, elapsed, closed = exchange(edge.port, b"")
    assert closed and elapsed < HEAD_TIMEOUT + 1, f"connection held {elapsed:.1f} s"
    assert data == b""


def test_keep_alive_next_head_has_its_own_deadline(edge):
    """After a served request, the next head on the same connection is timed again."""
    with socket.create_connection(("127.0.0.1", edge.port), timeout=15) as s:
        s.sendall(head(extra=b"\r\n"))
        first = read_response(s)
        assert status_of(first) == 200, first
        s.sendall(b"GET /heal")
        t0 = time.monotonic()
        rest = b""
        while part := s.recv(65536):
            rest += part
        assert time.monotonic() - t0 < HEAD_TIMEOUT + 1
        assert status_of(rest) == 408, rest[:200]


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(b"X-Big: " + b"a" * 100_000 + b"\r\n\r\n", id="100KB-line"),
        pytest.param(b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 490) for i in range(200)) + b"\r\n", id="200x500B"),
        pytest.param(b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n", id="150-small"),
    ],
)
def test_oversized_heads_are_431(edge, upstream, extra):
    n = len(upstream.requests)
    data, elapsed, closed = exchange(edge.port, head("/v1/chat/completions", extra))
    assert status_of(data) == 431, data[:200]
    assert body_of(data)["error"]["code"] == "request_header_fields_too_large"
    assert closed and len(upstream.requests) == n


def test_head_arriving_in_pieces_is_431_too(edge):
    with socket.create_connection(("127.0.0.1", edge.port), timeout=15) as s:
        s.sendall(head(extra=b"X-Big: "))
        try:
            for _ in range(40):
                s.sendall(b"a" * 4096)
        except OSError:
            pass
        data = b""
        while part := s.recv(65536):
            data += part
    assert status_of(data) == 431, data[:200]


@pytest.mark.parametrize("order", ["TE.CL", "CL.TE"])
def test_transfer_encoding_with_content_length_is_400_and_nothing_smuggled(edge, upstream, api_key, order):
    marker = f"smuggled-{uuid.uuid4().hex}"
    smuggled = chat_request(api_key, marker)
    chunked = b"0\r\n\r\n" + smuggled
    headers = [b"Transfer-Encoding: chunked", b"Content-Length: %d" % len(chunked)]
    if order == "CL.TE":
        headers.reverse()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + b"\r\n".join(headers)
        + b"\r\n\r\n"
        + chunked
    )
    data, elapsed, closed = exchange(edge.port, request)
    assert status_of(data) == 400, data[:300]
    assert data.count(b"HTTP/1.1 ") == 1, "a second response: the smuggled request was served"
    assert closed
    assert not any(marker in r.raw.decode(errors="replace") for r in upstream.requests)


@pytest.mark.parametrize(
    "line",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /healthz\r\nHost: x\r\n\r\n",
        b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /he althz HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_malformed_request_line_is_400(edge, line):
    data, elapsed, closed = exchange(edge.port, line)
    assert status_of(data) in (400, 505), data[:200]
    assert closed and elapsed < 2


def test_oversized_body_is_413(edge, api_key):
    body = json.dumps({"model": "gpt-4o", "messages": [user("x" * 100_000)]}).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    data, _, _ = exchange(edge.port, request)
    assert status_of(data) == 413, data[:200]


def test_normal_requests_unaffected(edge, upstream, api_key):
    """Alongside a slowloris connection, ordinary requests (with 90 headers, a 30 KB header, a
    keep-alive second request, a body arriving in pieces) are served as usual."""
    with socket.create_connection(("127.0.0.1", edge.port), timeout=15) as slow:
        slow.sendall(b"GET /hea")  # left hanging while the others are served
        many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(90))
        data, _, _ = exchange(edge.port, head(extra=many + b"Connection: close\r\n\r\n"))
        assert status_of(data) == 200, data[:200]
        data, _, _ = exchange(edge.port, head(extra=b"X-Long: " + b"l" * 30_000 + b"\r\nConnection: close\r\n\r\n"))
        assert status_of(data) == 200, data[:200]
        with socket.create_connection(("127.0.0.1", edge.port), timeout=15) as s:
            request = chat_request(api_key, "first on keep-alive")
            s.sendall(request[:40])
            time.sleep(0.2)
            s.sendall(request[40:])
            first = read_response(s)
            assert status_of(first) == 200, first[:300]
            s.sendall(chat_request(api_key, "second on keep-alive"))
            second = read_response(s)
            assert status_of(second) == 200, second[:300]
    client = edge.client(api_key)
    reply = client.chat.completions.create(model="gpt-4o", messages=[user("sdk after the hostile ones")])
    assert reply.choices[0].message.content == "ok: sdk after the hostile ones"
