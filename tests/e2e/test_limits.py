"""Defenses from DESIGN.md "Limits and defenses": receive deadline, budget, keys, no SSRF."""

from __future__ import annotations

import socket
import time
import uuid

import pytest

from tests.support.e2e import assert_openai_error, user
from tests.support.proxy_process import UPSTREAM_KEY

pytestmark = pytest.mark.slow


def test_slow_body_hits_receive_timeout(proxy, api_key):
    """A client trickling its body must not hold a connection forever."""
    p = proxy(limits={"receive_timeout": 1})
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "slow"}]}'
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{p.port}\r\n"
        f"Authorization: Bearer {api_key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", p.port), timeout=30) as s:
        s.sendall(head + body[:10])  # and then nothing more
        t0 = time.monotonic()
        data = b""
        while True:
            try:
                part = s.recv(65536)
            except TimeoutError:
                raise AssertionError("no answer 30 s after the body stalled") from None
            except ConnectionResetError:
                break
            if not part:
                break
            data += part
            if b"\r\n\r\n" in data and data.split(b"\r\n", 1)[0].split()[1] != b"100":
                break
        elapsed = time.monotonic() - t0
    assert elapsed < 15, f"receive_timeout is 1 s, connection held {elapsed:.1f} s"
    if data:  # an answer, if any, is a 408
        assert data.split(b"\r\n", 1)[0].split()[1] == b"408", data[:200]


def test_budget_overflow_is_400_context_length_exceeded(proxy, upstream, api_key):
    """Invariant 5: a turn that cannot fit is refused in the API's own shape, not dropped."""
    p = proxy(policies={"default": {"context_window": 1000, "max_output_tokens": 200}})
    n = len(upstream.requests)
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("lorem ipsum dolor " * 800)]})
    err = assert_openai_error(r, 400)
    assert err["code"] == "context_length_exceeded", err
    assert "1000" in err["message"].replace(",", ""), err["message"]  # says the window
    assert len(upstream.chat_requests) == n or all(
        r.body.get("messages") != [user("lorem ipsum dolor " * 800)] for r in upstream.chat_requests[n:]
    ), "the oversized turn was sent upstream anyway"


def test_keys_never_persisted_or_logged(proxy, upstream):
    p = proxy(fresh=True)
    client_key = f"sk-client-secret-{uuid.uuid4().hex}"
    client = p.client(client_key)
    res = client.chat.completions.create(model="gpt-4o", messages=[user("secret check")])
    client.chat.completions.create(
        model="gpt-4o",
        stream=True,
        messages=[user("secret check"), res.choices[0].message.model_dump(exclude_none=True), user("more")],
    ).close()
    p.post_chat(client_key, b"{broken")
    p.stop()  # flush WAL and logs
    blobs = {f.name: f.read_bytes() for f in p.workdir.iterdir() if f.is_file() and f.name != p.config_path.name}
    assert any(name.startswith("ctxproxy.db") for name in blobs), sorted(blobs)
    for name, data in blobs.items():
        assert UPSTREAM_KEY.encode() not in data, f"upstream key found in {name}"
        assert client_key.encode() not in data, f"client key found in {name}"
    p.start()


def test_request_cannot_redirect_upstream(proxy, upstream, api_key):
    """No body field or header points the proxy at another host (SSRF, CVE-2024-6587)."""
    p = proxy()
    n = len(upstream.chat_requests)
    r = p.post_chat(
        api_key,
        {
            "model": "gpt-4o",
            "messages": [user("ssrf")],
            "api_base": "http://127.0.0.1:9/v1",
            "base_url": "http://127.0.0.1:9/v1",
        },
        headers={"X-Forwarded-Host": "127.0.0.1:9", "X-Upstream-Url": "http://127.0.0.1:9"},
    )
    assert r.status_code == 200, r.text
    assert len(upstream.chat_requests) == n + 1
    assert upstream.last_chat.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
