"""SSRF: no request field, header, model name or request target, and no upstream redirect, makes
the proxy connect anywhere but its configured upstreams (litellm's CVE-2024-6587 sent provider
keys to a client-chosen `api_base`). A sinkhole listener counts every connection it receives;
measured over the payloads below (raw-HTTP and litellm routes): 0."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.e2e import user
from tests.support.upstream_server import Reply

pytestmark = pytest.mark.slow

TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 60}


class Sinkhole:
    """A TCP listener that only counts the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def sink() -> Iterator[Sinkhole]:
    hole = Sinkhole()
    yield hole
    hole.close()


def body_payloads(url: str) -> list[dict[str, Any]]:
    fields = ["api_base", "base_url", "api_url", "url", "endpoint", "azure_endpoint", "host", "proxy"]
    out: list[dict[str, Any]] = [{name: f"{url}/v1"} for name in fields]
    out += [
        {"extra_body": {"api_base": f"{url}/v1"}},
        {"metadata": {"api_base": f"{url}/v1"}},
        {"litellm_params": {"api_base": f"{url}/v1", "custom_llm_provider": "openai"}},
        {"api_base": f"{url}/v1", "api_key": "sk-x", "custom_llm_provider": "openai"},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"$ref": f"{url}/schema"}}}]},
    ]
    return out


def header_payloads(sink: Sinkhole) -> list[dict[str, str]]:
    host = f"127.0.0.1:{sink.port}"
    return [
        {"Host": host},
        {"X-Forwarded-Host": host},
        {"X-Forwarded-Host": host, "X-Forwarded-Proto": "http", "X-Forwarded-Port": str(sink.port)},
        {"Forwarded": f"host={host};proto=http"},
        {"X-Original-URL": f"{sink.url}/v1/chat/completions"},
        {"X-Rewrite-URL": f"{sink.url}/v1/chat/completions"},
        {"X-Api-Base": f"{sink.url}/v1"},
        {"Api-Base": f"{sink.url}/v1"},
        {"X-Base-URL": f"{sink.url}/v1"},
        {"X-Litellm-Api-Base": f"{sink.url}/v1"},
        {"Referer": f"{sink.url}/", "Origin": sink.url},
        {"X-Conversation-Id": f"{sink.url}/v1"},
    ]


def model_payloads(sink: Sinkhole) -> list[str]:
    return [
        f"{sink.url}/v1",
        f"openai/{sink.url}/v1",
        f"gpt-4o@127.0.0.1:{sink.port}",
        f"gpt-4o#{sink.url}",
        f"gpt-4o?api_base={sink.url}",
        f"lite-x/../../{sink.url}",
        f"lite-{sink.url}",
    ]


def raw_targets(sink: Sinkhole) -> list[str]:
    return [
        f"POST {sink.url}/v1/chat/completions HTTP/1.1",
        f"POST http://127.0.0.1:{sink.port}/chat/completions HTTP/1.1",
        f"GET {sink.url}/v1/models HTTP/1.1",
        f"CONNECT 127.0.0.1:{sink.port} HTTP/1.1",
        f"POST //127.0.0.1:{sink.port}/v1/chat/completions HTTP/1.1",
        f"POST /v1/chat/completions/../../{sink.url} HTTP/1.1",
    ]


def _raw(port: int, line: str, body: bytes, host: str) -> bytes:
    head = (
        f"{line}\r\nHost: {host}\r\nAuthorization: Bearer sk-ssrf\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head.encode() + body)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_no_payload_makes_the_proxy_connect_to_the_sinkhole(proxy, upstream, sink, api_key):
    lite = {
        "name": "lite",
        "match": {"model": "lite-*"},
        "upstream": {
            "model": "openai/gpt-4o-mini",
            "base_url": upstream.base_url,
            "api_key_env": "UPSTREAM_KEY",
            "timeouts": TIMEOUTS,
        },
    }
    main = {
        "name": "main",
        "match": {"model": "gpt-*"},
        "upstream": {"base_url": upstream.base_url, "timeouts": TIMEOUTS},
    }
    p = proxy(routes=[lite, main])
    payloads = 0
    statuses: list[int] = []
    culprits: list[str] = []

    def post(body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        nonlocal payloads
        payloads += 1
        before = sink.connections
        h = {"Authorization": f"Bearer {api_key}", **(headers or {})}
        r = httpx.post(f"{p.base_url}/chat/completions", json=body, headers=h, timeout=60, follow_redirects=False)
        statuses.append(r.status_code)
        if sink.connections != before:
            culprits.append(json.dumps({"body": body, "headers": headers}))

    for model in ("gpt-4o", "lite-fast"):
        for extra in body_payloads(sink.url):
            post({"model": model, "messages": [user("ssrf body field")], **extra})
        for headers in header_payloads(sink):
            post({"model": model, "messages": [user("ssrf header")]}, headers)
    for model in model_payloads(sink):
        post({"model": model, "messages": [user("ssrf model")]})
    body = json.dumps({"model": "gpt-4o", "messages": [user("ssrf target")]}).encode()
    for line in raw_targets(sink):
        payloads += 1
        answer = _raw(p.port, line, body, f"127.0.0.1:{sink.port}")
        assert answer.startswith(b"HTTP/1.1 "), answer[:200]
        statuses.append(int(answer[9:12]))
    # the upstream answers with a redirect to the sinkhole: never followed
    for status in (301, 302, 303, 307, 308):
        for stream in (False, True):
            upstream.push(Reply(status=status, headers={"Location": f"{sink.url}/v1/chat/completions"}))
            post({"model": "gpt-4o", "messages": [user(f"redirect {status}")], "stream": stream})
    for status in (302, 307):
        upstream.push(Reply(status=status, headers={"Location": f"{sink.url}/v1/chat/completions"}))
        post({"model": "lite-fast", "messages": [user(f"litellm redirect {status}")]})

    assert payloads >= 30
    assert sink.connections == 0, f"{sink.connections} connections over {payloads} payloads: {culprits}"
    assert all(s < 500 or s in (502, 504) for s in statuses), statuses
