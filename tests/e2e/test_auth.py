"""Client authentication (`clients:`, LiteLLM-style virtual keys): a route that spends the
operator's key serves only configured client keys; a client's tenant is its configured one;
client keys never go upstream."""

from __future__ import annotations

import hashlib
import json
import uuid

import anthropic
import httpx
import openai
import pytest

from tests.support.e2e import assert_openai_error, user
from tests.support.proxy_process import UPSTREAM_KEY

ALICE = "ck-alice-" + "a" * 24
BOB = "ck-bob-" + "b" * 24
CAROL = "ck-carol-" + "c" * 24


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


CLIENTS = [
    {"name": "alice", "key_sha256": digest(ALICE), "tenant": "team-a"},
    {"name": "bob", "key_sha256": digest(BOB), "tenant": "team-a", "routes": ["main", "passthrough"]},
    {"name": "carol", "key_sha256": digest(CAROL)},
]


@pytest.fixture
def authed(proxy):
    return proxy(open_access=False, clients=CLIENTS)


def _chat(p, key: str | None, content: str, model: str = "gpt-4o", **headers: str) -> httpx.Response:
    return p.post_chat(key, {"model": model, "messages": [user(content)]}, headers=headers)


def _anthropic_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and set(body["error"]) >= {"type", "message"}, body
    return body["error"]


@pytest.mark.parametrize("key", [None, "sk-not-a-client", ALICE[:-1], ALICE + "x", digest(ALICE)])
def test_without_a_client_key_every_api_answers_401_and_nothing_goes_upstream(authed, upstream, key):
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    chat = _chat(authed, key, "hello")
    assert_openai_error(chat, 401)
    responses = httpx.post(
        f"{authed.base_url}/responses", json={"model": "gpt-4o", "input": "hello"}, headers=headers, timeout=10
    )
    assert_openai_error(responses, 401)
    messages = httpx.post(
        f"{authed.base_url}/messages",
        json={"model": "gpt-4o", "max_tokens": 10, "messages": [user("hello")]},
        headers={"x-api-key": key} if key else {},
        timeout=10,
    )
    assert _anthropic_error(messages, 401)["type"] == "authentication_error"
    models = httpx.get(f"{authed.base_url}/models", headers=headers, timeout=10)
    assert_openai_error(models, 401)
    assert upstream.requests == []


def test_the_sdks_see_authentication_errors(authed, upstream):
    with pytest.raises(openai.AuthenticationError):
        authed.client("sk-stranger").chat.completions.create(model="gpt-4o", messages=[user("hi")])
    client = anthropic.Anthropic(base_url=authed.url, api_key="sk-stranger", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="gpt-4o", max_tokens=10, messages=[user("hi")])
    assert upstream.requests == []


def test_a_client_key_is_served_with_the_operator_key_and_never_forwarded(authed, upstream):
    marker = uuid.uuid4().hex
    for header in ({"Authorization": f"Bearer {ALICE}"}, {"x-api-key": ALICE}, {"api-key": ALICE}):
        r = httpx.post(
            f"{authed.base_url}/chat/completions",
            json={"model": "gpt-4o", "messages": [user(f"hi {marker}")]},
            headers=header,
            timeout=30,
        )
        assert r.status_code == 200, r.text
        sent = upstream.last_chat
        assert sent.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}"
        assert ALICE not in json.dumps(dict(sent.headers)) + sent.raw.decode()
    models = httpx.get(f"{authed.base_url}/models", headers={"Authorization": f"Bearer {BOB}"}, timeout=10)
    assert models.status_code == 200
    assert all(BOB not in json.dumps(dict(r.headers)) for r in upstream.requests)


def test_a_route_the_client_may_not_use_is_403_in_each_api_shape(authed, upstream):
    error = assert_openai_error(_chat(authed, BOB, "hi", model="slow-model"), 403)
    assert "bob" in error["message"] and "main" in error["message"] and BOB not in json.dumps(error)
    r = httpx.post(
        f"{authed.base_url}/messages",
        json={"model": "slow-model", "max_tokens": 10, "messages": [user("hi")]},
        headers={"x-api-key": BOB},
        timeout=10,
    )
    assert _anthropic_error(r, 403)["type"] == "permission_error"
    with pytest.raises(openai.PermissionDeniedError):
        authed.client(BOB).chat.completions.create(model="slow-model", messages=[user("hi")])
    assert upstream.requests == []


def test_clients_of_one_tenant_share_conversations_and_others_do_not(authed, upstream):
    ref = f"team-thread-{uuid.uuid4().hex}"
    first = _chat(authed, ALICE, "alice starts", **{"X-Conversation-Id": ref})
    assert first.status_code == 200
    second = authed.post_chat(
        BOB,
        {
            "model": "gpt-4o",
            "messages": [user("alice starts"), first.json()["choices"][0]["message"], user("bob goes on")],
        },
        headers={"X-Conversation-Id": ref},
    )
    assert second.status_code == 200
    conversation = authed.conversation(first.headers["x-conversation-id"])
    assert conversation["tenant"] == "team-a"
    events = authed.events(conversation["id"])
    assert [e["message"]["content"] for e in events if e["role"] == "user"] == ["alice starts", "bob goes on"]
    # implicit identity too: bob continues alice's history without the header
    implicit = f"implicit {uuid.uuid4().hex}"
    a = _chat(authed, ALICE, implicit)
    b = authed.post_chat(
        BOB, {"model": "gpt-4o", "messages": [user(implicit), a.json()["choices"][0]["message"], user("and?")]}
    )
    assert a.headers["x-conversation-id"] == b.headers["x-conversation-id"]
    # carol is her own tenant (her name): the same id is another conversation
    c = _chat(authed, CAROL, "carol", **{"X-Conversation-Id": ref})
    assert c.status_code == 200
    theirs = authed.admin_json("conversations", params={"limit": 1000})["data"]
    carol = [x for x in theirs if x["external_id"] == ref and x["tenant"] == "carol"]
    assert len(carol) == 1 and carol[0]["id"] != conversation["id"]
    assert len(authed.events(conversation["id"])) == 4  # carol's request changed nothing of team-a's


def test_on_a_route_forwarding_own_keys_a_client_key_is_dropped_and_no_key_is_401(authed, upstream):
    r = _chat(authed, BOB, f"pass {uuid.uuid4().hex}", model="pass-model")
    assert r.status_code == 200, r.text
    sent = upstream.last_chat
    assert "authorization" not in sent.headers and BOB not in json.dumps(dict(sent.headers))
    assert authed.conversation(r.headers["x-conversation-id"])["tenant"] == "team-a"
    upstream.clear()
    assert_openai_error(_chat(authed, None, "no key at all", model="pass-model"), 401)
    assert upstream.requests == []
    # a caller's own provider key is still forwarded there, as its own fingerprint tenant
    own = "sk-own-provider-key-" + uuid.uuid4().hex
    r = _chat(authed, own, "own key", model="pass-model")
    assert r.status_code == 200
    assert upstream.last_chat.headers["authorization"] == f"Bearer {own}"
    assert authed.conversation(r.headers["x-conversation-id"])["tenant"].startswith("t_")
