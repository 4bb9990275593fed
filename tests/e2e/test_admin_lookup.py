"""The admin API by the client's own conversation id, and paging that says when there is more
(issue 12, findings 5 and 6)."""

from __future__ import annotations

import uuid

import pytest

from tests.support.e2e import assert_openai_error, user
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

ENDPOINTS = ["", "/events", "/calls", "/search?q=question", "/projection", "/checkpoints"]


def _start(p, key: str, ref: str, text: str) -> None:
    r = p.post_chat(key, {"model": "gpt-4o", "messages": [user(text)]}, headers={"X-Conversation-Id": ref})
    assert r.status_code == 200, r.text
    assert r.headers["x-conversation-id"] == ref


def _by_external(p, ref: str) -> list[dict]:
    return [c for c in p.admin_json("conversations", params={"limit": 1000})["data"] if c["external_id"] == ref]


def test_every_conversation_endpoint_takes_the_client_id(proxy, upstream, api_key):
    p = proxy()
    ref = f"client-thread-{uuid.uuid4().hex}"
    _start(p, api_key, ref, "a question about ports")
    (conversation,) = _by_external(p, ref)
    p.wait_calls(conversation["id"], 1)
    for suffix in ENDPOINTS:
        path, _, query = suffix.partition("?")
        by_ref = p.admin(f"conversations/{ref}{path}" + (f"?{query}" if query else ""))
        by_id = p.admin(f"conversations/{conversation['id']}{path}" + (f"?{query}" if query else ""))
        assert by_ref.status_code == 200, (suffix, by_ref.text)
        assert by_ref.content == by_id.content, suffix
        scoped = p.admin(
            f"conversations/{ref}{path}",
            params={"tenant": conversation["tenant"], **dict([query.split("=")] if query else [])},
        )
        assert scoped.content == by_id.content, suffix
        other = p.admin(f"conversations/{ref}{path}", params={"tenant": "t_someone_else"})
        assert_openai_error(other, 404)
    deleted = p.admin(f"conversations/{ref}", method="DELETE")
    assert deleted.status_code == 200 and deleted.json() == {"deleted": conversation["id"]}
    assert_openai_error(p.admin(f"conversations/{ref}"), 404)
    assert_openai_error(p.admin(f"conversations/{conversation['id']}"), 404)


def test_an_id_two_tenants_use_is_409_listing_them_until_a_tenant_is_named(proxy, upstream):
    p = proxy()
    ref = f"common-name-{uuid.uuid4().hex}"
    one, two = f"sk-one-{uuid.uuid4().hex}", f"sk-two-{uuid.uuid4().hex}"
    _start(p, one, ref, "first tenant's question")
    _start(p, two, ref, "second tenant's question")
    found = _by_external(p, ref)
    assert len(found) == 2 and len({c["tenant"] for c in found}) == 2
    for suffix in ENDPOINTS:
        path = suffix.partition("?")[0]
        error = assert_openai_error(p.admin(f"conversations/{ref}{path}"), 409)
        assert error["code"] == "ambiguous_conversation" and error["param"] == "tenant"
        assert all(c["tenant"] in error["message"] for c in found), error
        assert one not in error["message"] and two not in error["message"]
    assert_openai_error(p.admin(f"conversations/{ref}", method="DELETE"), 409)
    for c in found:
        got = p.admin_json(f"conversations/{ref}", params={"tenant": c["tenant"]})
        assert got["id"] == c["id"]
    p.admin(f"conversations/{ref}", method="DELETE", params={"tenant": found[0]["tenant"]})
    assert p.admin_json(f"conversations/{ref}")["id"] == found[1]["id"]  # unambiguous now


def test_140_calls_page_with_has_more_and_next_cursor(proxy, upstream, api_key):
    p = proxy()
    ref = f"busy-{uuid.uuid4().hex}"
    history = [user("the same question, asked 140 times")]
    for _ in range(140):
        r = p.post_chat(api_key, {"model": "gpt-4o", "messages": history}, headers={"X-Conversation-Id": ref})
        assert r.status_code == 200
    (conversation,) = _by_external(p, ref)
    p.wait_calls(conversation["id"], 100)
    first = p.admin_json(f"conversations/{ref}/calls")
    assert len(first["data"]) == 100 and first["has_more"] is True and first["next_cursor"]

    def all_calls() -> list[dict]:
        seen, cursor = [], None
        while True:
            page = p.admin_json(
                f"conversations/{ref}/calls", params={"limit": 30, **({"cursor": cursor} if cursor else {})}
            )
            seen.extend(page["data"])
            if not page["has_more"]:
                assert page["next_cursor"] is None
                return seen
            cursor = page["next_cursor"]

    def complete() -> list[dict] | None:
        calls = all_calls()
        return calls if len(calls) == 140 else None

    calls = wait_until(complete, timeout=20, what="140 call records")
    assert len({c["id"] for c in calls}) == 140
    last = p.admin_json(f"conversations/{ref}/calls", params={"cursor": first["next_cursor"]})
    assert len(last["data"]) == 40 and last["has_more"] is False and last["next_cursor"] is None
    exact = p.admin_json(f"conversations/{ref}/calls", params={"limit": 140})
    assert len(exact["data"]) == 140 and exact["has_more"] is False


def test_event_and_conversation_lists_say_whether_more_exist(proxy, upstream, api_key):
    p = proxy()
    ref = f"paged-{uuid.uuid4().hex}"
    history = [user("q1")]
    for n in range(2, 4):
        r = p.post_chat(api_key, {"model": "gpt-4o", "messages": history}, headers={"X-Conversation-Id": ref})
        history += [r.json()["choices"][0]["message"], user(f"q{n}")]
    p.post_chat(api_key, {"model": "gpt-4o", "messages": history}, headers={"X-Conversation-Id": ref})
    p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("another conversation")]})
    (conversation,) = _by_external(p, ref)
    p.wait_calls(conversation["id"], 3)
    events = p.events(conversation["id"])
    assert len(events) == 6
    page = p.admin_json(f"conversations/{ref}/events", params={"limit": 4})
    assert page["has_more"] is True and page["next_cursor"] == str(events[3]["seq"])
    rest = p.admin_json(f"conversations/{ref}/events", params={"limit": 4, "cursor": page["next_cursor"]})
    assert [e["seq"] for e in rest["data"]] == [e["seq"] for e in events[4:]] and rest["has_more"] is False
    exact = p.admin_json(f"conversations/{ref}/events", params={"limit": 6})
    assert exact["has_more"] is False and exact["next_after"] is None
    convs = p.admin_json("conversations", params={"limit": 1})
    assert convs["has_more"] is True and convs["next_cursor"]
    nxt = p.admin_json("conversations", params={"limit": 1, "cursor": convs["next_cursor"]})
    assert nxt["data"] and nxt["data"][0]["id"] != convs["data"][0]["id"]
    found = p.admin_json(f"conversations/{ref}/search", params={"q": '"ok: q2"', "limit": 1})
    assert found["has_more"] is False and len(found["data"]) == 1
    many = p.admin_json(f"conversations/{ref}/search", params={"q": "q", "limit": 1})
    assert many["has_more"] is True and many["next_cursor"]
    checkpoints = p.admin_json(f"conversations/{ref}/checkpoints")
    assert checkpoints["has_more"] is False
