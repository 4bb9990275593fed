"""Conversation identity: one id across turns, idempotent replays, forks, tenants, explicit ids."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.e2e import event_views, user, view
from tests.support.upstream_server import Reply, tool_call


def _assistant_variant(message: Any, turn: int) -> dict[str, Any]:
    """The assistant message as different clients re-send it."""
    full = message.model_dump(exclude_none=False)  # refusal/audio/function_call: None, annotations
    variant = turn % 4
    if variant == 0:
        return full
    if variant == 1:
        return message.model_dump(exclude_none=True)
    if variant == 2:
        out = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in message.tool_calls]
            out["content"] = None
        return out
    # reordered keys, "" instead of null next to tool calls
    out = {k: full[k] for k in reversed(list(full))}
    if message.tool_calls:
        out["content"] = ""
    return out


def test_twenty_turns_one_conversation_in_order(proxy, upstream, api_key):
    p = proxy()
    client = p.client(api_key)
    history: list[dict[str, Any]] = []
    expected: list[tuple] = []
    conv_ids = set()
    for turn in range(20):
        # a system prompt that changes every turn (agents put the date/status there)
        system = {"role": "system", "content": f"You are helpful. Turn marker {turn}."}
        history.append(user(f"question number {turn}"))
        expected.append(view(history[-1]))
        if turn % 5 == 2:
            call = tool_call("lookup", {"n": turn})
            upstream.push(Reply(tool_calls=[call]))
            raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[system, *history])
            conv_ids.add(raw.headers["x-conversation-id"])
            msg = raw.parse().choices[0].message
            history.append(_assistant_variant(msg, turn))
            expected.append(view(msg.model_dump()))
            history.append({"role": "tool", "tool_call_id": call["id"], "content": f"found {turn}"})
            expected.append(view(history[-1]))
        upstream.push(Reply(content=f"answer number {turn}"))
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[system, *history])
        conv_ids.add(raw.headers["x-conversation-id"])
        msg = raw.parse().choices[0].message
        assert msg.content == f"answer number {turn}"
        history.append(_assistant_variant(msg, turn))
        expected.append(view({"role": "assistant", "content": f"answer number {turn}"}))

    assert len(conv_ids) == 1, f"one conversation expected, got {conv_ids}"
    conv = conv_ids.pop()
    detail = p.conversation(conv)
    assert len(detail["branches"]) == 1, detail
    events = p.events(conv)
    assert event_views(events) == expected
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)), "event seqs not strictly increasing"
    assert {e["source"] for e in events} == {"request", "response"}
    assert all(e["role"] == e["message"]["role"] for e in events)
    # every assistant event came from a response, everything else from a request
    assert [e["source"] for e in events] == ["response" if e["role"] == "assistant" else "request" for e in events]
    assert len(p.wait_calls(conv, 24)) == 24  # 20 answers + 4 tool-call turns


def test_identical_replay_adds_no_events(proxy, upstream, api_key):
    p = proxy()
    client = p.client(api_key)
    r1 = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[user("replay me")])
    conv = r1.headers["x-conversation-id"]
    a1 = r1.parse().choices[0].message.model_dump(exclude_none=True)
    messages = [user("replay me"), a1, user("and again")]
    client.chat.completions.create(model="gpt-4o", messages=messages)
    before = p.events(conv)
    assert len(before) == 4
    for _ in range(2):  # default reply echoes, so the replayed answer is identical too
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
        assert raw.headers["x-conversation-id"] == conv
    assert p.events(conv) == before
    assert len(p.conversation(conv)["branches"]) == 1


def test_edited_history_forks_a_branch(proxy, upstream, api_key):
    p = proxy()
    client = p.client(api_key)
    history: list[dict[str, Any]] = []
    conv = None
    for i in range(3):
        history.append(user(f"step {i}"))
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
        conv = conv or raw.headers["x-conversation-id"]
        assert raw.headers["x-conversation-id"] == conv
        history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
    original = p.events(conv)
    assert len(original) == 6
    # rewrite the second user message (index 2) and continue from there
    edited = history[:2] + [user("step 1, but different")]
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=edited)
    assert raw.headers["x-conversation-id"] == conv
    detail = p.conversation(conv)
    assert len(detail["branches"]) == 2, detail
    root = [b for b in detail["branches"] if b["parent_id"] is None]
    child = [b for b in detail["branches"] if b["parent_id"] is not None]
    assert len(root) == 1 and len(child) == 1, detail
    assert child[0]["parent_id"] == root[0]["id"]
    # the child inherits the parent's events up to fork_seq (store contract, proxy/store/base.py):
    # the last shared message; the edited message is the child's first own event, right after it
    assert child[0]["fork_seq"] == original[1]["seq"], (detail, original)
    # without ?branch the most recently active branch is shown, with its inherited prefix
    events = p.events(conv)
    assert event_views(events) == [view(m) for m in edited] + [
        view({"role": "assistant", "content": "ok: step 1, but different"})
    ]
    assert [e["seq"] for e in events[:2]] == [e["seq"] for e in original[:2]]
    assert events[2]["branch_id"] == child[0]["id"] and events[2]["seq"] == original[2]["seq"]
    assert all(e["branch_id"] == root[0]["id"] for e in events[:2])
    # the original branch is intact
    assert p.events(conv, branch=root[0]["id"]) == original
    assert event_views(p.events(conv, branch=child[0]["id"])) == event_views(events)


def test_two_tenants_same_messages_two_conversations(proxy, upstream, api_key):
    p = proxy()
    messages = [user(f"shared opening {uuid.uuid4().hex}")]
    ids = []
    for key in (api_key, api_key + "-other-tenant"):
        raw = p.client(key).chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
        ids.append(raw.headers["x-conversation-id"])
    assert ids[0] != ids[1]
    t0 = p.conversation(ids[0])["tenant"]
    t1 = p.conversation(ids[1])["tenant"]
    assert t0 != t1
    assert api_key not in str(t0), "tenant must be a fingerprint, not the key"
    # continuing as tenant 2 stays in tenant 2's conversation
    a = p.events(ids[1])[-1]["message"]
    raw = p.client(api_key + "-other-tenant").chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[*messages, a, user("tenant two continues")]
    )
    assert raw.headers["x-conversation-id"] == ids[1]
    assert len(p.events(ids[0])) == 2 and len(p.events(ids[1])) == 4


def test_explicit_conversation_header_wins_and_is_echoed(proxy, upstream, api_key):
    p = proxy()
    client = p.client(api_key)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[user("implicit start")])
    implicit = raw.headers["x-conversation-id"]
    a = raw.parse().choices[0].message.model_dump(exclude_none=True)
    explicit = f"client-chosen-{uuid.uuid4().hex[:12]}"
    # this history continues the implicit conversation, but the header says otherwise
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=[user("implicit start"), a, user("explicit next")],
        extra_headers={"X-Conversation-Id": explicit},
    )
    assert raw.headers["x-conversation-id"] == explicit
    assert len(p.events(implicit)) == 2, "the implicit conversation must not grow"
    convs = p.admin_json("conversations")["data"]
    mine = [c for c in convs if c["external_id"] == explicit or c["id"] == explicit]
    assert len(mine) == 1, convs
    events = p.events(mine[0]["id"])
    assert view(events[-2]["message"]) == view(user("explicit next"))
    # the same header again lands in the same conversation
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[user("something else entirely")], extra_headers={"X-Conversation-Id": explicit}
    )
    assert raw.headers["x-conversation-id"] == explicit
    again = [c for c in p.admin_json("conversations")["data"] if c["external_id"] == explicit or c["id"] == explicit]
    assert [c["id"] for c in again] == [mine[0]["id"]]


def test_leading_system_and_developer_messages_are_not_events(proxy, upstream, api_key):
    p = proxy()
    prefix = [{"role": "system", "content": "sys"}, {"role": "developer", "content": "dev"}]
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[*prefix, user("only me")]
    )
    conv = raw.headers["x-conversation-id"]
    assert upstream.last_chat.body["messages"][:2] == prefix
    assert event_views(p.events(conv)) == [view(user("only me")), view({"role": "assistant", "content": "ok: only me"})]
