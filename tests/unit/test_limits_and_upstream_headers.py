"""Request body limits, and which headers cross the proxy in each direction."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from multidict import CIMultiDict
from starlette.datastructures import Headers
from starlette.requests import Request

from proxy.asgi import read_body
from proxy.config import Limits
from proxy.errors import BadRequest, PayloadTooLarge, RequestTimeout
from proxy.upstream.base import relayed_response_headers, upstream_request_headers
from proxy.upstream.http import _is_json

# -- read_body ------------------------------------------------------------------------------------

Message = dict[str, object]


def make_request(
    chunks: list[bytes], content_length: str | None = None, delay: float = 0.0, disconnect_after: int | None = None
) -> tuple[Request, list[int]]:
    headers = [(b"content-type", b"application/json")]
    if content_length is not None:
        headers.append((b"content-length", content_length.encode()))
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers, "query_string": b""}
    reads: list[int] = []

    async def receive() -> Message:
        i = len(reads)
        reads.append(i)
        if disconnect_after is not None and i >= disconnect_after:
            return {"type": "http.disconnect"}
        if delay:
            await asyncio.sleep(delay)
        if i >= len(chunks):
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.request", "body": chunks[i], "more_body": i < len(chunks) - 1}

    receive_fn: Callable[[], Awaitable[Message]] = receive
    return Request(scope, receive_fn), reads  # type: ignore[arg-type]


async def test_body_read_whole() -> None:
    request, _ = make_request([b'{"a":', b"1}"], content_length="7")
    assert await read_body(request.headers, request.receive, Limits(max_body_bytes=7)) == b'{"a":1}'


async def test_body_without_content_length() -> None:
    request, _ = make_request([b"x" * 10, b"y" * 10])
    assert await read_body(request.headers, request.receive, Limits(max_body_bytes=20)) == b"x" * 10 + b"y" * 10


async def test_declared_too_large_refused_before_reading() -> None:
    request, reads = make_request([b"x" * 10], content_length="101")
    with pytest.raises(PayloadTooLarge) as info:
        await read_body(request.headers, request.receive, Limits(max_body_bytes=100))
    assert reads == []
    assert info.value.status == 413
    assert info.value.code == "request_too_large"
    assert "101 bytes" in info.value.message and "at most 100 bytes" in info.value.message


async def test_streamed_too_large_refused_as_soon_as_limit_passed() -> None:
    request, reads = make_request([b"x" * 60, b"x" * 60, b"x" * 60, b"x" * 60])
    with pytest.raises(PayloadTooLarge) as info:
        await read_body(request.headers, request.receive, Limits(max_body_bytes=100))
    assert len(reads) == 2  # the third and fourth pieces are never read
    assert "120 bytes" in info.value.message


async def test_lying_content_length_still_bounded() -> None:
    request, _ = make_request([b"x" * 80, b"x" * 80], content_length="10")
    with pytest.raises(PayloadTooLarge):
        await read_body(request.headers, request.receive, Limits(max_body_bytes=100))


@pytest.mark.parametrize("value", ["abc", "-1", "1e3", " 5"])
async def test_non_numeric_content_length(value: str) -> None:
    request, _ = make_request([b"x"], content_length=value)
    with pytest.raises(BadRequest) as info:
        await read_body(request.headers, request.receive, Limits())
    assert info.value.message == "The Content-Length header is not a number."
    assert info.value.status == 400


async def test_slow_body_times_out() -> None:
    request, _ = make_request([b"x"] * 50, delay=0.05)
    with pytest.raises(RequestTimeout) as info:
        await read_body(request.headers, request.receive, Limits(receive_timeout=0.2))
    assert info.value.status == 408
    assert "not received within 0.2 s" in info.value.message


async def test_client_disconnect_mid_body() -> None:
    request, _ = make_request([b"x", b"y", b"z"], disconnect_after=1)
    with pytest.raises(BadRequest) as info:
        await read_body(request.headers, request.receive, Limits())
    assert info.value.message == "The client disconnected before the request body was complete."


# -- upstream_request_headers ---------------------------------------------------------------------

CLIENT = {
    "Host": "proxy.local:8787",
    "Content-Length": "123",
    "Content-Type": "application/json",
    "Connection": "keep-alive",
    "Keep-Alive": "timeout=5",
    "Transfer-Encoding": "chunked",
    "TE": "trailers",
    "Trailer": "x-checksum",
    "Upgrade": "h2c",
    "Proxy-Authorization": "Basic cHJveHk=",
    "Proxy-Authenticate": "Basic",
    "Accept-Encoding": "gzip, br",
    "Cookie": "session=1",
    "X-Forwarded-For": "10.0.0.1",
    "Authorization": "Bearer sk-client",
    "X-Api-Key": "sk-client-x",
    "Api-Key": "sk-client-azure",
    "X-Conversation-Id": "conv-1",
    "OpenAI-Organization": "org-1",
    "OpenAI-Beta": "assistants=v2",
    "User-Agent": "OpenAI/Python 1.40",
    "X-Stainless-Lang": "python",
    "Accept": "application/json",
}
CONV = frozenset({"x-conversation-id"})
KEPT = {
    "Content-Type": "application/json",
    "OpenAI-Organization": "org-1",
    "OpenAI-Beta": "assistants=v2",
    "User-Agent": "OpenAI/Python 1.40",
    "X-Stainless-Lang": "python",
    "Accept": "application/json",
}


def test_request_headers_with_route_key() -> None:
    out = upstream_request_headers(CLIENT, {"Authorization": "Bearer sk-route"}, CONV)
    assert out == {**KEPT, "Authorization": "Bearer sk-route"}


def test_request_headers_without_route_key_keep_clients_credentials() -> None:
    out = upstream_request_headers(CLIENT, None, CONV)
    assert out == {
        **KEPT,
        "Authorization": "Bearer sk-client",
        "X-Api-Key": "sk-client-x",
        "Api-Key": "sk-client-azure",
    }


def test_request_headers_case_insensitive_and_starlette_headers() -> None:
    headers = Headers(
        raw=[
            (b"host", b"p"),
            (b"authorization", b"Bearer sk-client"),
            (b"x-conversation-id", b"c"),
            (b"content-length", b"5"),
            (b"openai-beta", b"x"),
        ]
    )
    assert upstream_request_headers(headers, {"Authorization": "Bearer sk-route"}, CONV) == {
        "openai-beta": "x",
        "Authorization": "Bearer sk-route",
    }
    assert upstream_request_headers(headers, None, CONV) == {"authorization": "Bearer sk-client", "openai-beta": "x"}


def test_request_headers_conversation_header_is_configurable() -> None:
    headers = {"X-Session": "s1", "X-Conversation-Id": "c1"}
    assert upstream_request_headers(headers, None, frozenset({"x-session"})) == {"X-Conversation-Id": "c1"}
    assert upstream_request_headers(headers, None, frozenset()) == headers


def test_request_headers_do_not_mutate_input() -> None:
    before = dict(CLIENT)
    upstream_request_headers(CLIENT, {"Authorization": "Bearer sk-route"}, CONV)
    assert CLIENT == before


def test_request_headers_drop_fields_named_by_connection() -> None:
    # RFC 9110 7.6.1: a proxy removes the fields a Connection header names, they are hop-by-hop too.
    headers = {"Connection": "close, X-Hop-Secret", "X-Hop-Secret": "1", "Accept": "*/*"}
    assert upstream_request_headers(headers, None, frozenset()) == {"Accept": "*/*"}


# -- relayed_response_headers ---------------------------------------------------------------------


def test_relayed_response_headers() -> None:
    upstream = CIMultiDict(
        [
            ("Content-Type", "text/event-stream"),
            ("Content-Length", "999"),
            ("Content-Encoding", "gzip"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "keep-alive"),
            ("Keep-Alive", "timeout=5"),
            ("Date", "Mon, 01 Jan 2024 00:00:00 GMT"),
            ("Server", "cloudflare"),
            ("Set-Cookie", "__cf_bm=abc"),
            ("Set-Cookie", "_cfuvid=def"),
            ("X-Request-Id", "req_123"),
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-remaining-tokens", "29000"),
            ("x-ratelimit-reset-requests", "120ms"),
            ("openai-processing-ms", "42"),
            ("Retry-After", "3"),
        ]
    )
    assert relayed_response_headers(upstream) == [
        ("Content-Type", "text/event-stream"),
        ("X-Request-Id", "req_123"),
        ("x-ratelimit-limit-requests", "500"),
        ("x-ratelimit-remaining-tokens", "29000"),
        ("x-ratelimit-reset-requests", "120ms"),
        ("openai-processing-ms", "42"),
        ("Retry-After", "3"),
    ]


def test_relayed_response_headers_lowercase_names() -> None:
    assert relayed_response_headers({"content-length": "1", "set-cookie": "a=b", "x-request-id": "r"}) == [
        ("x-request-id", "r")
    ]


@pytest.mark.parametrize(
    ("data", "whole"),
    [
        (b'{"choices": []}', True),
        (b'{"a": NaN}', True),  # orjson refuses it, the standard library reads it: still accepted
        (b'"\\ud800"', True),
        ('{"a": 1}'.encode("utf-16"), True),
        (b'{"choices": [', False),  # cut off half-way
        (b"<html>gateway</html>", False),
        (b"", False),
        (b"[" * 100_000 + b"]" * 100_000, False),  # past both decoders' depth: a 502, not a RecursionError
    ],
)
def test_an_answer_is_whole_json_when_either_decoder_reads_it(data: bytes, whole: bool) -> None:
    assert _is_json(data) is whole
