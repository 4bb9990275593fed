"""The Anthropic Messages API end to end: the real `anthropic` SDK -> the real proxy subprocess ->
a scripted upstream that validates like api.anthropic.com (tests/support/anthropic_upstream.py)."""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import AnthropicUpstream, Reply, estimate_tokens, sign
from tests.support.e2e import anthropic_reply
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.waiting import wait_until

MODEL = "claude-test-1"
TRIMMED = re.compile(
    r"\[(?:trimmed: [^\]\n]* of bash, |repeat: tool result of bash |near-repeat: tool result of bash )"
)
"""a result trimmed by content or head + tail, or sent as a repeat of a later one"""
SMALL = "claude-small"
WINDOW = 8000
SMALL_POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 1000,
    "keep_recent_tokens": 1500,
    "summary_chunk_tokens": 2000,
    "overflow_wait": 20,
    "summarizer": {"timeout": 5, "max_attempts": 2},
}
SUMMARY = (
    "## Goal\nMigrate the billing service to the new queue.\n## Constraints\nnone\n## Decisions\n"
    "none\n## Key facts\nnone\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\n"
    "Continue the migration."
)
CC = {"type": "ephemeral"}


@pytest.fixture(scope="session")
def anthropic_server() -> Iterator[AnthropicUpstream]:
    server = AnthropicUpstream(api_key=UPSTREAM_KEY, context_windows={SMALL: int(WINDOW * 1.25)})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def claude_up(anthropic_server: AnthropicUpstream) -> Iterator[AnthropicUpstream]:
    anthropic_server.clear()
    yield anthropic_server
    anthropic_server.clear()


def _config(server: AnthropicUpstream, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    timeouts = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
    return {
        "routes": [
            {
                "name": "claude",
                "match": {"model": "claude-*", "path": "/v1/messages"},
                "upstream": {"base_url": server.url, "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts},
                "policy": "default",
            }
        ],
        "policies": {"default": policy or {"context_window": 200000, "max_output_tokens": 4096}},
    }


@pytest.fixture
def proxied(proxy, claude_up):
    def start(policy: dict[str, Any] | None = None):
        return proxy(**_config(claude_up, policy))

    return start


def sdk(p, api_key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=30)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def records(p, conv: str, n: int) -> list[dict[str, Any]]:
    return p.wait_calls(conv, n, until=lambda cs: all(c["status"] != "pending" for c in cs))


def expected_usage(raw: dict[str, int]) -> dict[str, Any]:
    read, write, uncached = raw["cache_read_input_tokens"], raw["cache_creation_input_tokens"], raw["input_tokens"]
    return {
        "input_total": uncached + read + write,
        "input_uncached": uncached,
        "cache_read": read,
        "cache_write": write,
        "output": raw["output_tokens"],
        "reasoning": None,
    }


def assert_anthropic_error(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body


# --------------------------------------------------------------------------- basics


def test_non_stream_headers_body_and_usage(proxied, claude_up, api_key):
    p = proxied()
    claude_up.push(Reply(text="hello there", input_tokens=7, cache_read=100, cache_write=20, output_tokens=5))
    client = sdk(p, api_key)
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=64, messages=[user("hi")], extra_headers={"anthropic-beta": "some-beta-2025"}
    )
    message = raw.parse()
    assert [b.type for b in message.content] == ["text"] and message.content[0].text == "hello there"
    conv = raw.headers["x-conversation-id"]
    sent = claude_up.message_requests[-1]
    assert sent.headers["x-api-key"] == UPSTREAM_KEY and "authorization" not in sent.headers
    assert sent.headers["anthropic-version"] == client.default_headers["anthropic-version"]
    assert sent.headers["anthropic-beta"] == "some-beta-2025"
    assert sent.body == {"max_tokens": 64, "messages": [user("hi")], "model": MODEL}
    call = records(p, conv, 1)[0]
    assert call["usage"] == {
        "input_total": 127,
        "input_uncached": 7,
        "cache_read": 100,
        "cache_write": 20,
        "output": 5,
        "reasoning": None,
    }
    assert call["usage_raw"] == claude_up.replies_sent[-1].usage
    assert call["status"] == "complete" and call["finish_reason"] == "end_turn" and call["route"] == "claude"
    assert call["response"]["role"] == "assistant" and call["response"]["content"] == "hello there"


def test_stream_is_relayed_byte_for_byte_and_reassembled(proxied, claude_up, api_key):
    p = proxied()
    reply = Reply(
        thinking="Let me look at the files.",
        text="Checking.",
        input_tokens=3,
        cache_read=50,
        cache_write=10,
        output_tokens=40,
        tool_uses=[{"name": "bash", "input": {"cmd": "ls -la", "n": [1, 2.5, None]}, "id": "toolu_1"}],
    )
    claude_up.push(reply)
    body = {
        "model": MODEL,
        "max_tokens": 2048,
        "stream": True,
        "messages": [user("list files")],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", f"{p.url}/v1/messages", json=body, headers=headers, timeout=30) as r:
        data = b"".join(r.iter_raw())
        conv = r.headers["x-conversation-id"]
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert data == b"".join(reply.sent_events)
    call = records(p, conv, 1)[0]
    assert call["status"] == "complete" and call["finish_reason"] == "tool_use"
    assert call["usage"] == expected_usage(reply.usage)
    response = call["response"]
    assert response["content"] == "Checking."
    assert response["tool_calls"] == [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {
                "name": "bash",
                "arguments": json.dumps({"cmd": "ls -la", "n": [1, 2.5, None]}, separators=(",", ":")),
            },
        }
    ]
    assert response["_anthropic"]["content"] == reply.message["content"]  # signature included

    # the SDK's own accumulation sees the same message
    claude_up.push(Reply(thinking="Again.", text="Sure.", tool_uses=[{"name": "bash", "input": {"cmd": "pwd"}}]))
    with sdk(p, api_key).messages.stream(
        model=MODEL, max_tokens=2048, messages=[user("again")], thinking={"type": "enabled", "budget_tokens": 1024}
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].signature == sign("Again.") and final.content[2].input == {"cmd": "pwd"}


def test_duplicated_final_message_delta_adds_nothing(proxied, claude_up, api_key):
    p = proxied()
    reply = Reply(
        text="twice", input_tokens=11, cache_read=200, cache_write=0, output_tokens=9, duplicate_final_delta=True
    )
    claude_up.push(reply)
    with sdk(p, api_key).messages.stream(model=MODEL, max_tokens=64, messages=[user("dup")]) as stream:
        final = stream.get_final_message()
        conv = stream.response.headers["x-conversation-id"]
    assert final.content[0].text == "twice"
    assert sum(1 for e in reply.sent_events if e.startswith(b"event: message_delta")) == 2
    call = records(p, conv, 1)[0]
    assert call["usage"] == expected_usage(reply.usage) and call["usage"]["output"] == 9
    assert call["status"] == "complete"


def test_client_disconnect_mid_stream_leaves_a_partial_record(proxied, claude_up, api_key):
    p = proxied()
    hold = threading.Event()
    reply = Reply(
        text="a long answer that never finishes",
        input_tokens=13,
        cache_read=0,
        cache_write=64,
        hold=hold,
        hold_after_events=4,
    )
    claude_up.push(reply)
    body = {"model": MODEL, "max_tokens": 64, "stream": True, "messages": [user("hang up")]}
    with httpx.stream(
        "POST",
        f"{p.url}/v1/messages",
        json=body,
        timeout=30,
        headers={"x-api-key": api_key, "anthropic-version": "2023-06-01"},
    ) as r:
        conv = r.headers["x-conversation-id"]
        seen = b""
        for piece in r.iter_raw():
            seen += piece
            if seen.count(b"\n\n") >= 4:
                break
    reply.disconnected.wait(10)
    hold.set()
    call = records(p, conv, 1)[0]
    assert call["status"] == "partial", call
    # message_start's usage is known: input and cache fields; output is its running count (1)
    assert call["usage"] == {
        "input_total": 77,
        "input_uncached": 13,
        "cache_read": 0,
        "cache_write": 64,
        "output": 1,
        "reasoning": None,
    }
    assert len(p.events(conv)) == 1  # the partial answer is not history


# --------------------------------------------------------------------------- errors


def test_errors_are_in_anthropic_shape(proxied, claude_up, api_key):
    p = proxied()
    headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    r = httpx.post(f"{p.url}/v1/messages", content=b"{not json", headers=headers, timeout=10)
    assert_anthropic_error(r, 400, "invalid_request_error")
    r = httpx.post(f"{p.url}/v1/messages", json={"model": MODEL, "max_tokens": 5}, headers=headers, timeout=10)
    assert_anthropic_error(r, 400, "invalid_request_error")
    r = httpx.post(
        f"{p.url}/v1/messages",
        json={"model": MODEL, "max_tokens": 5, "messages": [{"role": "system", "content": "no"}]},
        headers=headers,
        timeout=10,
    )
    assert_anthropic_error(r, 400, "invalid_request_error")

    client = sdk(p, api_key)
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="gpt-4o", max_tokens=5, messages=[user("hi")])
    assert info.value.body["error"]["type"] == "not_found_error"

    claude_up.push(Reply(status=529))
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(model=MODEL, max_tokens=5, messages=[user("busy?")])
    assert info.value.status_code == 529
    assert info.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

    # an claude_up rejection is relayed as the claude_up said it
    r = httpx.post(
        f"{p.url}/v1/messages",
        json={"model": MODEL, "max_tokens": 5, "messages": [{"role": "assistant", "content": "first"}]},
        headers=headers,
        timeout=10,
    )
    body = assert_anthropic_error(r, 400, "invalid_request_error")
    assert body["error"]["message"] == 'messages: first message must use the "user" role'


def test_error_event_mid_stream_is_relayed_and_recorded(proxied, claude_up, api_key):
    p = proxied()
    claude_up.push(Reply(text="interrupted answer", error_after_events=4))
    client = sdk(p, api_key)
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(model=MODEL, max_tokens=64, messages=[user("overload me")]) as stream:
            conv = stream.response.headers["x-conversation-id"]
            stream.get_final_message()
    call = records(p, conv, 1)[0]
    assert call["status"] == "error" and "overloaded_error" in call["error"]


def test_count_tokens_of_a_new_body_is_the_upstreams_and_not_recorded(proxied, claude_up, api_key):
    """Nothing stored, nothing to rewrite: the upstream counts the client's own bytes (the
    projection of a long history: tests/e2e/test_count_tokens.py)."""
    p = proxied()
    client = sdk(p, api_key)
    messages = [user("how many tokens is this?")]
    before = p.admin_json("conversations")["data"]
    raw = client.messages.with_raw_response.count_tokens(model=MODEL, messages=messages)
    counted = raw.parse()
    assert raw.headers["x-ctxproxy-count"] == "upstream"
    assert counted.input_tokens == estimate_tokens({"messages": messages})
    sent = claude_up.requests[-1]
    assert sent.path == "/v1/messages/count_tokens" and sent.headers["x-api-key"] == UPSTREAM_KEY
    assert sent.body == {"model": MODEL, "messages": messages}
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.count_tokens(model="unrouted-model", messages=messages)
    assert info.value.body["error"]["type"] == "not_found_error"
    assert p.admin_json("conversations")["data"] == before


# --------------------------------------------------------------------------- identity


def test_identity_across_turns_stream_and_not(proxied, claude_up, api_key):
    p = proxied()
    client = sdk(p, api_key)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "start", "cache_control": CC}]}
    ]
    claude_up.push(Reply(text="one", tool_uses=[{"name": "read", "input": {"path": "a.py"}}]))
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=64, messages=messages, system="sys v1")
    first = raw.parse()
    conv = raw.headers["x-conversation-id"]
    messages[0] = {"role": "user", "content": [{"type": "text", "text": "start"}]}  # the marker moves on
    messages.append({"role": "assistant", "content": first.content})
    messages.append(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": first.content[1].id, "content": "print(1)", "cache_control": CC}
            ],
        }
    )
    claude_up.push(Reply(thinking="hmm", text="two"))
    with client.messages.stream(model=MODEL, max_tokens=64, messages=messages, system="sys v2") as stream:
        second = stream.get_final_message()
        assert stream.response.headers["x-conversation-id"] == conv
    messages[-1]["content"][0].pop("cache_control")
    messages.append({"role": "assistant", "content": second.content})
    messages.append(user("three"))
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=64, messages=messages, system="sys v3")
    assert raw.headers["x-conversation-id"] == conv
    events = p.events(conv)
    assert [e["message"]["role"] for e in events] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert len(p.conversation(conv)["branches"]) == 1
    # explicit ids are echoed and respected
    claude_up.push(Reply(text="explicit"))
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=64, messages=[user("x")], extra_headers={"X-Conversation-Id": "my-session-42"}
    )
    assert raw.headers["x-conversation-id"] == "my-session-42"


# --------------------------------------------------------------------------- long sessions


SYSTEM = [
    {"type": "text", "text": "You are a careful coding agent."},
    {"type": "text", "text": "Never touch config/prod.yaml.", "cache_control": CC},
]
TOOLS = [
    {
        "name": "bash",
        "description": "Run a shell command.",
        "cache_control": CC,
        "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    }
]
OBJECTIVE = "Objective: migrate the billing service to the new queue. Constraint: never touch config/prod.yaml."


def is_summary_request(body: dict[str, Any]) -> bool:
    return str(body.get("system", "")).startswith("You compress the history")


def with_moving_marker(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code style: a cache breakpoint on the newest message only."""
    out = list(messages)
    last = copy.deepcopy(out[-1])
    last["content"][-1]["cache_control"] = CC
    out[-1] = last
    return out


def test_long_tool_session_with_thinking_trimming_and_summaries(proxied, claude_up, api_key):
    p = proxied(SMALL_POLICY)
    turn = {"n": 0}

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(text=SUMMARY)
        turn["n"] += 1
        n = turn["n"]
        if n % 3:
            return Reply(
                thinking=f"Step {n}: I should inspect more files.",
                redacted=n % 5 == 0,
                text=f"Looking at part {n}.",
                tool_uses=[{"name": "bash", "input": {"cmd": f"cat part_{n}_{k}.py"}} for k in range(1 + n % 2)],
            )
        return Reply(thinking=f"Step {n}: summarize progress.", text=f"Part {n} done.")

    claude_up.responder = respond
    client = sdk(p, api_key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": OBJECTIVE}]}]
    convs = set()
    for i in range(34):
        if i == 33:
            # Compaction runs in the background; on a loaded machine it may still be running here.
            # The last request must see its summary, so wait for it (a deadline, not a bound).
            (conv_id,) = convs
            path = f"conversations/{conv_id}/checkpoints"
            wait_until(
                lambda path=path: any(c["status"] == "active" for c in p.admin_json(path)["data"]),
                timeout=60,
                what="an active summary before the last turn",
            )
        kwargs = {
            "model": SMALL,
            "max_tokens": 2048,
            "system": SYSTEM,
            "tools": TOOLS,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": with_moving_marker(messages),
        }
        reply, conversation = anthropic_reply(client, bool(i % 2), **kwargs)
        convs.add(conversation)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason == "tool_use":
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": b.id,
                            "content": f"output of {b.input['cmd']}\n" + ("x" * (6000 if (i + k) % 4 == 0 else 500)),
                            **({"is_error": True} if k else {}),
                        }
                        for k, b in enumerate(b for b in reply.content if b.type == "tool_use")
                    ],
                }
            )
        else:
            messages.append({"role": "user", "content": [{"type": "text", "text": f"turn {i}: continue"}]})

    assert claude_up.rejections == [], claude_up.rejections[:1]
    assert len(convs) == 1
    conv = convs.pop()
    assert len(p.conversation(conv)["branches"]) == 1

    agent = [r.body for r in claude_up.message_requests if not is_summary_request(r.body)]
    assert len(agent) == 34
    for body in agent:
        sent = body["messages"]
        assert body["system"] == SYSTEM and body["tools"][:-1] == TOOLS
        assert body["tools"][-1]["name"] == "ctxproxy_recall"  # recall is offered to a tool-using agent
        markers = sum(
            1
            for m in sent
            for b in (m["content"] if isinstance(m["content"], list) else [])
            if isinstance(b, dict) and b.get("cache_control")
        )
        summary = [
            b
            for m in sent
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "text" and "<conversation_summary" in b["text"]
        ]
        points = [
            b
            for m in sent[:-1]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result" and b.get("cache_control")
        ]
        # the client's breakpoint on its newest message survived every rewrite; the proxy adds
        # one on the summary block and one on the last old result (the cache point), and with
        # the client's two on system and tools the cap of 4 keeps the later of the two
        own = [b for b in summary if b.get("cache_control")] + points
        assert markers == 1 + len(own) and len(own) == min(1, len(summary) + len(points))
        assert all(b["cache_control"] == {"type": "ephemeral"} for b in own)
        assert all(TRIMMED.search(str(b["content"])) for b in points)
        for m in sent:
            if (
                m["role"] == "assistant"
                and isinstance(m["content"], list)
                and any(b["type"] == "tool_use" for b in m["content"])
            ):
                assert m["content"][0]["type"] == "thinking"
                assert m["content"][0]["signature"] == sign(m["content"][0]["thinking"])
    last = agent[-1]["messages"]
    summary_blocks = [
        b
        for m in last
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "text" and "<conversation_summary" in b["text"]
    ]
    assert len(summary_blocks) == 1
    assert any(TRIMMED.search(json.dumps(body)) for body in agent)
    assert len(json.dumps(last)) < len(json.dumps(messages, default=lambda o: o.model_dump())) / 2

    # the ledger: every token the claude_up reported is in the call records, exactly once
    replies = list(claude_up.replies_sent)
    calls = p.wait_calls(conv, len(replies), timeout=20)
    calls = p.admin_json(f"conversations/{conv}/calls", params={"limit": 1000})["data"]
    assert len(calls) == len(replies)
    assert {c["purpose"] for c in calls} == {"main", "summary"}
    for field in ("input_total", "input_uncached", "cache_read", "cache_write", "output"):
        recorded = sum(c["usage"][field] for c in calls)
        reported = sum(expected_usage(r.usage)[field] for r in replies)
        assert recorded == reported, field
    assert sum(c["usage"]["cache_read"] for c in calls) > 0 and sum(c["usage"]["cache_write"] for c in calls) > 0
    checkpoints = p.admin_json(f"conversations/{conv}/checkpoints")["data"]
    assert any(c["status"] == "active" for c in checkpoints)
