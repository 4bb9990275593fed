"""Malformed requests are refused in the OpenAI error shape and change no stored history."""

from __future__ import annotations

import json
import uuid

import httpx
import openai
import pytest

from tests.support.e2e import assert_openai_error, user
from tests.support.upstream_server import Reply

BAD_BODIES = {
    "malformed_json": (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}', 400),
    "not_an_object": (b'["model", "gpt-4o"]', 400),
    "missing_messages": ({"model": "gpt-4o"}, 400),
    "messages_not_list": ({"model": "gpt-4o", "messages": "hello"}, 400),
    "messages_object": ({"model": "gpt-4o", "messages": {"role": "user", "content": "x"}}, 400),
    "message_not_object": ({"model": "gpt-4o", "messages": ["hello"]}, 400),
    "message_without_role": ({"model": "gpt-4o", "messages": [{"content": "x"}]}, 400),
    "role_not_string": ({"model": "gpt-4o", "messages": [{"role": 5, "content": "x"}]}, 400),
    "model_not_string": ({"model": 42, "messages": [{"role": "user", "content": "x"}]}, 400),
    "missing_model": ({"messages": [{"role": "user", "content": "x"}]}, 400),
    "unmatched_model": ({"model": "claude-3-opus", "messages": [user("x")]}, 404),
}


@pytest.fixture
def conversation(proxy, upstream, api_key):
    """An existing two-turn conversation of this tenant, plus its events."""
    p = proxy()
    client = p.client(api_key)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[user("keep me intact")])
    conv = raw.headers["x-conversation-id"]
    a = raw.parse().choices[0].message.model_dump(exclude_none=True)
    history = [user("keep me intact"), a, user("second turn")]
    client.chat.completions.create(model="gpt-4o", messages=history)
    events = p.events(conv)
    assert len(events) == 4
    return p, conv, events


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_bad_body_rejected_history_unchanged(conversation, upstream, api_key, case):
    p, conv, before = conversation
    body, status = BAD_BODIES[case]
    n = len(upstream.requests)
    r = p.post_chat(api_key, body)
    assert_openai_error(r, status)
    assert len(upstream.requests) == n, "a rejected request reached upstream"
    assert p.events(conv) == before
    assert len(p.calls(conv)) == 2


def test_bad_message_after_valid_history_changes_nothing(conversation, upstream, api_key):
    """A body whose prefix matches stored history but whose last message is invalid."""
    p, conv, before = conversation
    history = [e["message"] for e in before]
    n = len(upstream.requests)
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [*history, {"content": "no role"}]})
    assert_openai_error(r, 400)
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [*history, {"role": "user", "content": 17}]})
    assert_openai_error(r, 400)
    assert len(upstream.requests) == n
    assert p.events(conv) == before


def test_unknown_path_is_404(proxy, api_key):
    p = proxy()
    r = httpx.post(
        f"{p.base_url}/completions_typo",
        json={"model": "gpt-4o"},
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=10,
    )
    assert_openai_error(r, 404)
    r = httpx.get(f"{p.url}/nothing/here", timeout=10)
    assert_openai_error(r, 404)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions", "/v1/messages", "/v1/responses"])
def test_model_path_takes_only_post(proxy, path):
    """The model paths are dispatched before starlette's router: another method is still a 405
    in the API's own error shape, naming the method."""
    p = proxy()
    for method in ("GET", "PUT", "DELETE"):
        r = httpx.request(method, f"{p.url}{path}", timeout=10)
        assert r.status_code == 405, r.text
        if path == "/v1/messages":
            assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
        else:
            assert_openai_error(r, 405)
        assert f"Method {method} is not allowed on {path}." in r.text


def test_oversized_body_is_413(proxy, upstream, api_key):
    p = proxy(limits={"max_body_bytes": 4096})
    client = p.client(api_key)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[user("small enough")])
    conv = raw.headers["x-conversation-id"]
    before = p.events(conv)
    a = raw.parse().choices[0].message.model_dump(exclude_none=True)
    big = {"model": "gpt-4o", "messages": [user("small enough"), a, user("x" * 20000)]}
    n = len(upstream.requests)
    r = p.post_chat(api_key, big)  # with Content-Length
    assert_openai_error(r, 413)

    def chunks():
        data = json.dumps(big).encode()
        for i in range(0, len(data), 1024):
            yield data[i : i + 1024]

    r = httpx.post(
        f"{p.base_url}/chat/completions",
        content=chunks(),
        timeout=10,
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
    )  # chunked, no length
    assert_openai_error(r, 413)
    assert len(upstream.requests) == n
    assert p.events(conv) == before
    # the limit is not a general failure: a small request still works
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user(f"tiny {uuid.uuid4()}")]})
    assert r.status_code == 200


def test_an_orphan_tool_result_alone_is_a_400_not_an_empty_request(proxy, upstream, api_key):
    """A tool result without the call it answers is dropped from what is sent (`policies/groups.py`);
    when it is all the request has, nothing is left to send: the client gets a 400 saying so in the
    API's shape, the upstream nothing, and no event is stored."""
    p = proxy()
    n = len(upstream.requests)
    conv = f"orphan-{uuid.uuid4().hex}"
    body = {"model": "gpt-4o", "messages": [{"role": "tool", "tool_call_id": "x", "content": "hi"}]}
    error = assert_openai_error(p.post_chat(api_key, body, headers={"X-Conversation-Id": conv}), 400)
    assert "tool result" in error["message"] and "'x'" in error["message"], error
    assert error["param"] == "messages"
    assert len(upstream.requests) == n, "an empty request reached upstream"
    if p.admin(f"conversations/{conv}").status_code == 200:
        assert p.events(conv) == []


def test_a_failed_first_request_leaves_no_conversation_and_its_retries_none_either(proxy, upstream, api_key):
    """The SDKs retry a failed first request: each attempt used to leave an empty conversation.
    The failed calls stay in the ledger (by tenant), belonging to no conversation."""
    p = proxy()
    before = {c["id"] for c in p.admin_json("conversations", params={"limit": 1000})["data"]}
    for _ in range(3):
        upstream.push(Reply(status=503))
    client = p.client(api_key, max_retries=2)
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="gpt-4o", messages=[user("retried three times")])
    assert failed.value.status_code == 503 and len(upstream.chat_requests) >= 3
    after = p.admin_json("conversations", params={"limit": 1000})["data"]
    assert [c for c in after if c["id"] not in before] == []
    named = f"failed-first-{uuid.uuid4().hex}"
    upstream.push(Reply(status=500))
    assert (
        p.post_chat(
            api_key, {"model": "gpt-4o", "messages": [user("x")]}, headers={"X-Conversation-Id": named}
        ).status_code
        == 500
    )
    assert p.admin(f"conversations/{named}").status_code == 404
    # what the client sends next starts afresh, and is kept
    ok = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[user("retried three times")])
    assert len(p.events(ok.headers["x-conversation-id"])) == 2
