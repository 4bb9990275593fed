"""Upstream failures: relayed statuses, bodies and headers; 502/504; error call records."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

from tests.support.e2e import assert_openai_error, stream_raw, user
from tests.support.upstream_server import Reply

pytestmark = pytest.mark.slow

HOP_BY_HOP = ("keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "upgrade")


def _start_conversation(p, api_key: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    """One successful turn; returns the conversation id and the history to continue with."""
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user(text)]})
    assert r.status_code == 200, r.text
    history = [user(text), r.json()["choices"][0]["message"], user(text + " (next)")]
    return r.headers["x-conversation-id"], history


def test_rate_limit_relayed_with_body_and_headers(proxy, upstream, api_key):
    p = proxy()
    body = {
        "error": {
            "message": "Rate limit reached for gpt-4o in organization org-x on "
            "requests per min (RPM): Limit 3, Used 3, Requested 1.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    upstream.push(
        Reply(
            status=429,
            error_body=body,
            headers={"retry-after": "7", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20s"},
        )
    )
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("too fast")]})
    assert r.status_code == 429
    assert r.json() == body
    sent = upstream.last_reply.sent_headers
    for h in (
        "x-request-id",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
        "x-ratelimit-limit-requests",
        "retry-after",
    ):
        assert r.headers.get(h) == sent[h], h
    # and the SDK sees a proper RateLimitError
    upstream.push(Reply(status=429, error_body=body))
    with pytest.raises(openai.RateLimitError) as exc:
        p.client(api_key).chat.completions.create(model="gpt-4o", messages=[user("too fast")])
    assert exc.value.status_code == 429 and exc.value.code == "rate_limit_exceeded"


def test_success_headers_relayed_hop_by_hop_dropped(proxy, upstream, api_key):
    p = proxy()
    extra = {
        "keep-alive": "timeout=5, max=100",
        "proxy-authenticate": "Basic realm=up",
        "upgrade": "h2c",
        "x-ratelimit-remaining-tokens": "1234",
    }
    upstream.push(Reply(content="with headers", headers=extra))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("headers")]})
    assert r.status_code == 200
    sent = upstream.last_reply.sent_headers
    assert r.headers["x-request-id"] == sent["x-request-id"]
    assert r.headers["x-ratelimit-remaining-tokens"] == "1234"
    assert r.headers["openai-processing-ms"] == sent["openai-processing-ms"]
    for h in HOP_BY_HOP:
        assert h not in r.headers, f"hop-by-hop header {h} relayed"
    assert r.json() == upstream.last_reply.sent_json()

    upstream.push(Reply(content="streamed with headers", headers=extra))
    resp, lines = stream_raw(
        p.base_url, api_key, {"model": "gpt-4o", "stream": True, "messages": [user("headers stream")]}
    )
    sent = upstream.last_reply.sent_headers
    assert resp.headers["x-request-id"] == sent["x-request-id"]
    for h in HOP_BY_HOP:
        assert h not in resp.headers, f"hop-by-hop header {h} relayed on a stream"


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_500_relayed_and_recorded(proxy, upstream, api_key, stream):
    p = proxy()
    conv, history = _start_conversation(p, api_key, f"server error next {stream}")
    upstream.push(Reply(status=500))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": history, "stream": stream})
    err = assert_openai_error(r, 500)
    assert r.json() == upstream.last_reply.sent_json()
    assert err["type"] == "server_error"
    calls = p.wait_calls(conv, 2)
    assert calls[-1]["status"] == "error" and calls[-1]["upstream_status"] == 500, calls[-1]
    assert calls[-1]["error"]
    assert calls[0]["status"] == "complete"


def test_an_upstream_400_context_length_teaches_the_window(proxy, upstream, api_key):
    """gpt-small has a 300-token window upstream; the proxy's policy believes 128k. The upstream's
    overflow error teaches the real window: the retry is projected for it, and a request that
    cannot fit it at all is the proxy's own 400 naming it (the refused attempt is recorded)."""
    p = proxy()
    r = p.post_chat(api_key, {"model": "gpt-small", "messages": [user("word " * 400)]})
    err = assert_openai_error(r, 400)
    assert err["code"] == "context_length_exceeded"
    assert "300-token window" in err["message"] or "maximum context length is 300 tokens" in err["message"]
    assert len([b for b in upstream.chat_requests if b.body.get("model") == "gpt-small"]) == 1


def test_upstream_refused_is_502_and_recorded(proxy, upstream, api_key):
    p = proxy()
    conv, history = _start_conversation(p, api_key, "refused next")
    n = len(upstream.requests)
    r = p.post_chat(api_key, {"model": "refused-model", "messages": history})
    assert_openai_error(r, 502)
    assert len(upstream.requests) == n
    r = p.post_chat(api_key, {"model": "refused-model", "messages": history, "stream": True})
    assert_openai_error(r, 502)
    calls = p.wait_calls(conv, 3)
    assert [c["status"] for c in calls] == ["complete", "error", "error"], calls
    assert all(c["error"] for c in calls[1:])
    assert calls[-1]["route"] == "refused"


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_hang_is_504_and_recorded(proxy, upstream, api_key, stream):
    p = proxy()
    conv, history = _start_conversation(p, api_key, f"hang next {stream}")
    reply = Reply(hang=True)
    upstream.push(reply)
    t0 = time.monotonic()
    r = p.post_chat(api_key, {"model": "slow-model", "messages": history, "stream": stream}, timeout=httpx.Timeout(30))
    elapsed = time.monotonic() - t0
    assert_openai_error(r, 504)
    assert elapsed < 15, f"first_byte is 1 s but the proxy answered after {elapsed:.1f} s"
    calls = p.wait_calls(conv, 2)
    assert calls[-1]["status"] == "error", calls[-1]
    assert calls[-1]["error"]
    assert reply.disconnected.wait(10), "proxy left the hanging upstream request open"
