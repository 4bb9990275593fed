"""Call records and usage, persistence across restarts, and the admin API."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.support.e2e import assert_openai_error, event_views, stream_raw, user
from tests.support.proxy_process import ADMIN_TOKEN
from tests.support.upstream_server import Reply


@pytest.mark.parametrize("stream", [False, True])
def test_usage_normalized_from_upstream(proxy, upstream, api_key, stream):
    p = proxy()
    upstream.push(
        Reply(content="counted", prompt_tokens=1000, completion_tokens=120, cached_tokens=384, reasoning_tokens=64)
    )
    body = {"model": "gpt-4o", "messages": [user(f"usage {stream}")], "stream": stream}
    if stream:
        r, _ = stream_raw(p.base_url, api_key, body)
    else:
        r = p.post_chat(api_key, body)
    assert r.status_code == 200
    conv = r.headers["x-conversation-id"]
    call = p.wait_calls(conv, 1, until=lambda cs: cs[0]["status"] != "pending")[0]
    sent = upstream.last_reply
    raw_usage = sent.sent_chunks()[-1]["usage"] if stream else sent.sent_json()["usage"]
    assert call["usage_raw"] == raw_usage
    assert call["usage"] == {
        "input_total": 1000,
        "input_uncached": 616,
        "cache_read": 384,
        "cache_write": None,
        "output": 120,
        "reasoning": 64,
    }
    assert call["status"] == "complete"
    assert call["stream"] is stream
    assert call["model"] == "gpt-4o" and call["route"] == "main"
    assert call["purpose"] == "main"
    assert call["upstream_status"] == 200
    assert call["finish_reason"] == "stop"
    assert call["response"]["role"] == "assistant" and call["response"]["content"] == "counted"
    assert call["conversation_id"] == conv
    assert call["latency_ms"] is not None and call["latency_ms"] >= 0
    assert call["ttfb_ms"] is not None and 0 <= call["ttfb_ms"] <= call["latency_ms"]


def test_usage_default_estimate_matches_upstream_count(proxy, upstream, api_key):
    """Without overrides upstream reports its tiktoken estimate; the record carries it as is."""
    p = proxy()
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("estimate me")]})
    conv = r.headers["x-conversation-id"]
    usage = r.json()["usage"]
    call = p.wait_calls(conv, 1)[0]
    assert call["usage"]["input_total"] == usage["prompt_tokens"]
    assert call["usage"]["output"] == usage["completion_tokens"]
    assert call["usage"]["cache_read"] == 0 and call["usage"]["input_uncached"] == usage["prompt_tokens"]


def test_persistence_survives_restart(proxy, upstream, api_key):
    p = proxy(fresh=True)
    client = p.client(api_key)
    upstream.push(Reply(content="before restart", prompt_tokens=50, completion_tokens=5, cached_tokens=10))
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[user("remember me")])
    conv = raw.headers["x-conversation-id"]
    a = raw.parse().choices[0].message.model_dump(exclude_none=True)
    p.wait_calls(conv, 1)
    events = p.events(conv)
    calls = p.calls(conv)
    detail = p.conversation(conv)

    p.restart()
    assert p.events(conv) == events
    assert p.calls(conv) == calls
    assert p.conversation(conv) == detail
    # identity survives too: the continued history lands in the same conversation
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[user("remember me"), a, user("after restart")]
    )
    assert raw.headers["x-conversation-id"] == conv
    assert event_views(p.events(conv))[:2] == event_views(events)
    assert len(p.events(conv)) == 4
    assert len(p.wait_calls(conv, 2)) == 2


def test_admin_requires_token(proxy):
    p = proxy()
    for token in (None, "wrong-token", ADMIN_TOKEN + "x"):
        for path, method in (
            ("conversations", "GET"),
            ("conversations/abc", "GET"),
            ("conversations/abc/events", "GET"),
            ("conversations/abc/calls", "GET"),
            ("conversations/abc", "DELETE"),
        ):
            assert_openai_error(p.admin(path, method=method, token=token), 401)
    assert p.admin("conversations").status_code == 200


def test_admin_unknown_conversation_is_404(proxy):
    p = proxy()
    missing = f"conv-does-not-exist-{uuid.uuid4().hex}"
    assert_openai_error(p.admin(f"conversations/{missing}"), 404)
    assert_openai_error(p.admin(f"conversations/{missing}", method="DELETE"), 404)


def test_admin_delete_removes_everything(proxy, upstream, api_key):
    p = proxy()
    client = p.client(api_key)
    text = f"delete me {uuid.uuid4().hex}"
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[user(text)])
    conv = raw.headers["x-conversation-id"]
    a = raw.parse().choices[0].message.model_dump(exclude_none=True)
    p.wait_calls(conv, 1)
    assert any(c["id"] == conv for c in p.admin_json("conversations")["data"])

    r = p.admin(f"conversations/{conv}", method="DELETE")
    assert r.status_code == 200 and r.json() == {"deleted": conv}
    assert_openai_error(p.admin(f"conversations/{conv}"), 404)
    for sub in ("events", "calls"):
        r = p.admin(f"conversations/{conv}/{sub}")
        assert r.status_code == 404 or r.json()["data"] == [], (sub, r.text)
    assert all(c["id"] != conv for c in p.admin_json("conversations")["data"])
    # the identity index is gone too: the same history starts a new conversation
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[user(text), a, user("still there?")]
    )
    new = raw.headers["x-conversation-id"]
    assert new != conv
    assert len(p.events(new)) == 4  # the whole re-sent history, stored fresh


def test_admin_events_paging(proxy, upstream, api_key):
    p = proxy()
    client = p.client(api_key)
    history = []
    conv = None
    for i in range(4):
        history.append(user(f"page {i}"))
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
        conv = raw.headers["x-conversation-id"]
        history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
    everything = p.events(conv)
    assert len(everything) == 8
    page = p.admin_json(f"conversations/{conv}/events", params={"limit": 3})
    assert page["data"] == everything[:3]
    assert page["next_after"] == everything[2]["seq"]
    page = p.admin_json(f"conversations/{conv}/events", params={"limit": 3, "after": page["next_after"]})
    assert page["data"] == everything[3:6]
    page = p.admin_json(f"conversations/{conv}/events", params={"limit": 5, "after": everything[5]["seq"]})
    assert page["data"] == everything[6:] and page["next_after"] is None
    assert httpx.get(f"{p.url}/healthz", timeout=5).json() == {"status": "ok"}
