"""Anthropic's mid-conversation `{"role": "system"}` messages through the real proxy, with real HTTP
clients (httpx, the anthropic SDK), against the scripted upstream (which accepts them right after a
user turn, as the API does).

Claude Code 2.1 sends its environment that way: `[user(reminder, prompt), system(environment)]`
on its first request, and keeps the system message at index 1 from then on. The proxy forwards
it byte for byte, keeps it in the history at its place (not in the pinned prefix: identity and the
summary treat it like the instruction it is), pins it, and sends it back as a native system message
when a projection rewrites the history.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import AnthropicUpstream, Reply
from tests.support.e2e import scripted_route
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "claude-system-1"
ENVIRONMENT = "# Environment\nPrimary working directory: /srv/app\nToday's date is 2026-12-01."
SYSTEM_TURN = {"role": "system", "content": [{"type": "text", "text": ENVIRONMENT}]}
SUMMARY = (
    "## Goal\nInspect the parts.\n## Constraints\nnone\n## Decisions\nnone\n## Key facts\nnone\n"
    "## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue."
)
TOOLS = [
    {
        "name": "bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    }
]


def _start(proxy: Any, server: AnthropicUpstream, policy: dict[str, Any]) -> Any:
    return proxy(
        routes=[scripted_route("claude", "claude-*", "/v1/messages", server.url)], policies={"default": policy}
    )


def _is_summary(body: dict[str, Any]) -> bool:
    return isinstance(body.get("system"), str) and body["system"].startswith("You compress the history")


def _output(step: int) -> str:
    return "".join(f"part {step} line {k}: the quick brown fox jumps over the lazy dog\n" for k in range(30))


def _post(p: Any, api_key: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    return httpx.post(f"{p.url}/v1/messages", content=json.dumps(body), headers=headers, timeout=30)


def test_claude_code_first_request_shape_is_accepted_and_forwarded_unchanged(proxy, anthropic_upstream, api_key):
    p = _start(proxy, anthropic_upstream, {"context_window": 200_000, "max_output_tokens": 4096})
    anthropic_upstream.push(Reply(text="Hello."), Reply(text="Still here."))
    first = {
        "model": MODEL,
        "max_tokens": 256,
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>attribution</system-reminder>"},
                    {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}},
                ],
            },
            SYSTEM_TURN,
        ],
    }
    response = _post(p, api_key, first)
    assert response.status_code == 200, response.text
    conv = response.headers["x-conversation-id"]
    assert anthropic_upstream.message_requests[-1].raw == json.dumps(first).encode()  # the client's own bytes

    # the next turn re-sends it in place (the prompt's marker moved): same conversation, one branch
    second = {
        **first,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>attribution</system-reminder>"},
                    {"type": "text", "text": "hello"},
                ],
            },
            SYSTEM_TURN,
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
            {"role": "user", "content": [{"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}}]},
        ],
    }
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=30)
    raw = client.messages.with_raw_response.create(**second)
    assert raw.parse().content[0].text == "Still here."
    assert raw.headers["x-conversation-id"] == conv
    assert anthropic_upstream.message_requests[-1].body["messages"] == second["messages"]
    assert len(p.conversation(conv)["branches"]) == 1
    p.wait_calls(conv, 2, until=lambda cs: all(c["status"] != "pending" for c in cs))
    # stored at its place in the history (the top-level system is the prefix, not an event)
    assert [e["message"]["role"] for e in p.events(conv)] == ["user", "system", "assistant", "user", "assistant"]
    assert anthropic_upstream.rejections == []


def test_bad_system_messages_are_anthropic_400s(proxy, anthropic_upstream, api_key):
    p = _start(proxy, anthropic_upstream, {"context_window": 200_000, "max_output_tokens": 4096})
    first = _post(
        p, api_key, {"model": MODEL, "max_tokens": 64, "messages": [SYSTEM_TURN, {"role": "user", "content": "hi"}]}
    )
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    blocks = _post(
        p,
        api_key,
        {
            "model": MODEL,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": [image]}],
        },
    )
    for response, where in ((first, "first message"), (blocks, "messages.1.content")):
        assert response.status_code == 400, response.text
        body = response.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        assert where in body["error"]["message"], body
    assert anthropic_upstream.message_requests == []


def test_system_turn_is_pinned_through_compaction(proxy, anthropic_upstream, api_key):
    """A tool loop at an 8k window: the history is summarized and old results trimmed, and every
    upstream request still carries the system turn, verbatim, as a native system message right
    after the first user message (both pinned), before the summary."""
    p = _start(
        proxy,
        anthropic_upstream,
        {
            "context_window": 8000,
            "max_output_tokens": 1000,
            "keep_recent_tokens": 1500,
            "summary_chunk_tokens": 2000,
            "overflow_wait": 20,
            "summarizer": {"timeout": 5, "max_attempts": 2},
            "tool_results": {"old_max_chars": 3000},
        },
    )
    steps = 24

    calls = {"main": 0}

    def respond(body: dict[str, Any]) -> Reply:
        if _is_summary(body):
            return Reply(text=SUMMARY)
        calls["main"] += 1
        if calls["main"] <= steps:
            return Reply(tool_uses=[{"name": "bash", "input": {"cmd": f"cat part_{calls['main']}.txt"}}])
        return Reply(text="All parts inspected.")

    anthropic_upstream.responder = respond
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=30)
    messages: list[Any] = [{"role": "user", "content": "Inspect every part."}, SYSTEM_TURN]
    convs = set()
    for i in range(steps + 1):
        raw = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=1000, system="You are careful.", tools=TOOLS, messages=messages
        )
        convs.add(raw.headers["x-conversation-id"])
        reply = raw.parse()
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_unset=True) for b in reply.content]})
        if reply.stop_reason != "tool_use":
            break
        use = next(b for b in reply.content if b.type == "tool_use")
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": _output(i)}],
            }
        )
        if i == 16:
            (conv,) = convs
            path = f"conversations/{conv}/checkpoints"
            wait_until(
                lambda path=path: any(c["status"] == "active" for c in p.admin_json(path)["data"]),
                timeout=60,
                what="a committed summary",
            )
    assert reply.content[0].text == "All parts inspected."
    assert anthropic_upstream.rejections == [], anthropic_upstream.rejections[:1]
    assert len(convs) == 1
    (conv,) = convs
    assert len(p.conversation(conv)["branches"]) == 1
    agent = [r.body for r in anthropic_upstream.message_requests if not _is_summary(r.body)]
    assert len(agent) == steps + 1
    rewritten = [b for b in agent if any("<conversation_summary" in json.dumps(m) for m in b["messages"])]
    assert rewritten, "no request was compacted"
    for body in agent:
        assert body["messages"][0] == {"role": "user", "content": "Inspect every part."}
        assert body["messages"][1] == SYSTEM_TURN
