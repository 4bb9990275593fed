"""`store_failure`: what a request gets while the proxy's store (here a private redis-server) is
down -- a 503 in the API's shape (`fail`, the default) or the upstream's answer relayed
unrewritten and unrecorded with `X-Ctxproxy-Degraded` (`passthrough`) -- and recovery once the
store is back. A SQLite file that fails under the running proxy (its tables gone) does the same."""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.e2e import assert_openai_error, user
from tests.support.redis_server import RedisServer
from tests.support.upstream_server import Reply

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_proc() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


def _store(server: RedisServer) -> str:
    return f"{server.url}?prefix=e2e-{uuid.uuid4().hex[:8]}:"


def _passthrough_count(p, route: str = "main") -> float:
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    m = re.search(r'^ctxproxy_store_passthrough_total\{route="' + route + r'"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_fail_mode_answers_503_and_recovers(proxy, upstream, redis_proc, api_key):
    p = proxy(fresh=True, store=_store(redis_proc))
    upstream.push(Reply(content="before"))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("hello before outage")]})
    assert r.status_code == 200, r.text
    conv = r.headers["x-conversation-id"]
    assert len(p.wait_calls(conv, 1)) == 1

    redis_proc.stop()
    requests_before = len(upstream.chat_requests)
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("during outage")]})
    error = assert_openai_error(r, 503)
    assert "store" in error["message"]
    assert "x-ctxproxy-degraded" not in r.headers
    assert len(upstream.chat_requests) == requests_before  # nothing went upstream
    assert httpx.get(f"{p.url}/healthz", timeout=10).status_code == 503

    redis_proc.start()
    upstream.push(Reply(content="after"))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("after the outage")]})
    assert r.status_code == 200, r.text
    assert "x-ctxproxy-degraded" not in r.headers
    conv = r.headers["x-conversation-id"]
    assert len(p.wait_calls(conv, 1)) == 1
    assert httpx.get(f"{p.url}/healthz", timeout=10).status_code == 200


def test_passthrough_mode_relays_unrewritten_and_recovers(proxy, upstream, redis_proc, api_key):
    p = proxy(fresh=True, store=_store(redis_proc), policies={"default": {"store_failure": "passthrough"}})
    messages = [{"role": "system", "content": "Be brief."}, user("hello before outage")]
    upstream.push(Reply(content="before"))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": messages})
    assert r.status_code == 200, r.text
    assert "x-ctxproxy-degraded" not in r.headers
    first_conv = r.headers["x-conversation-id"]
    p.wait_calls(first_conv, 1)
    assert _passthrough_count(p) == 0

    redis_proc.stop()
    # Non-streaming: the upstream's answer, the client's messages sent as they were, no records.
    outage = [*messages, {"role": "assistant", "content": "before"}, user("during the outage")]
    upstream.push(Reply(content="served without a store"))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": outage}, headers={"X-Conversation-Id": "conv-x"})
    assert r.status_code == 200, r.text
    assert r.headers["x-ctxproxy-degraded"] == "store-unavailable"
    assert "x-conversation-id" not in r.headers
    assert r.json() == upstream.last_reply.sent_json()
    sent = upstream.last_chat
    assert sent.body["messages"] == outage
    assert "x-conversation-id" not in {k.lower() for k in sent.headers}
    # Streaming too.
    upstream.push(Reply(content="streamed without a store", chunks=3))
    with httpx.stream(
        "POST",
        f"{p.base_url}/chat/completions",
        timeout=30,
        headers={"Authorization": f"Bearer {api_key}"},
        json={"model": "gpt-4o", "messages": outage, "stream": True},
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["x-ctxproxy-degraded"] == "store-unavailable"
        body = "".join(resp.iter_text())
    assert "streamed" in body and "[DONE]" in body
    assert _passthrough_count(p) == 2

    redis_proc.start()
    upstream.push(Reply(content="after"))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("after the outage")]})
    assert r.status_code == 200, r.text
    assert "x-ctxproxy-degraded" not in r.headers
    conv = r.headers["x-conversation-id"]
    calls = p.wait_calls(conv, 1)
    assert len(calls) == 1 and calls[0]["status"] == "complete"
    assert _passthrough_count(p) == 2


@contextmanager
def _sqlite_tables_gone(path: Path) -> Iterator[None]:
    """Another process renames the tables identity reads away under the running proxy, so its
    reads fail with sqlite3.OperationalError ("no such table"); they are back afterwards."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("ALTER TABLE events RENAME TO events_away")
        try:
            yield
        finally:
            db.execute("ALTER TABLE events_away RENAME TO events")
    finally:
        db.close()


def test_sqlite_read_failure_answers_503_and_recovers(proxy, upstream, api_key):
    p = proxy(fresh=True)
    requests_before = len(upstream.chat_requests)
    with _sqlite_tables_gone(p.db_path):
        r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("while the file fails")]})
        error = assert_openai_error(r, 503)
        assert error["type"] == "service_unavailable" and error["code"] == "store_unavailable"
        assert "store" in error["message"]
        assert "x-ctxproxy-degraded" not in r.headers
        assert len(upstream.chat_requests) == requests_before  # nothing went upstream

    upstream.push(Reply(content="after"))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("after the failure")]})
    assert r.status_code == 200, r.text
    assert len(p.wait_calls(r.headers["x-conversation-id"], 1)) == 1


def test_sqlite_read_failure_with_passthrough_relays_unrewritten(proxy, upstream, api_key):
    p = proxy(fresh=True, policies={"default": {"store_failure": "passthrough"}})
    messages = [{"role": "system", "content": "Be brief."}, user("while the file fails")]
    with _sqlite_tables_gone(p.db_path):
        upstream.push(Reply(content="served without a store"))
        r = p.post_chat(api_key, {"model": "gpt-4o", "messages": messages})
        assert r.status_code == 200, r.text
        assert r.headers["x-ctxproxy-degraded"] == "store-unavailable"
        assert "x-conversation-id" not in r.headers
        assert r.json() == upstream.last_reply.sent_json()
        assert upstream.last_chat.body["messages"] == messages
    assert _passthrough_count(p) == 1
