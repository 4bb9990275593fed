"""Re-serialized history continues the same conversation and branch, on every wire.

Clients re-send what they got in their own spelling: pi re-stringifies tool-call arguments
(`{"command": "ls"}` -> `{"command":"ls"}`), Claude Code sends its newest prompt as a text block
with `cache_control` and re-sends it as a plain string next turn, and an app built on the anthropic
SDK sends its previous answer back as the string `reply.content[0].text` instead of the blocks the
API returned. Identity compares the canonical forms (no fork); the upstream still gets the client's
own bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.anthropic_upstream import Reply as AnthropicReply
from tests.support.e2e import anthropic_reply, scripted_route
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, fcall
from tests.support.upstream_server import Reply, tool_call

TIMEOUT = 60


def _respaced(arguments: str) -> str:
    """The other spelling of the same JSON: compact if it was spaced, spaced if it was compact."""
    value = json.loads(arguments)
    compact = json.dumps(value, separators=(",", ":"))
    return json.dumps(value, indent=1) if arguments == compact else compact


def _one_branch(p: Any, conv: str) -> None:
    assert len(p.conversation(conv)["branches"]) == 1


def test_chat_respelled_arguments_continue_the_branch(proxy, upstream, api_key):
    p = proxy()
    call = tool_call("bash", {"command": "ls -la", "timeout": 10})
    upstream.push(Reply(tool_calls=[call]), Reply(content="two files"), Reply(content="done"))
    history: list[dict[str, Any]] = [{"role": "user", "content": "list the files"}]
    r1 = p.post_chat(api_key, {"model": "gpt-4o", "messages": history})
    conv = r1.headers["x-conversation-id"]
    sent = r1.json()["choices"][0]["message"]
    respelled = {
        **sent["tool_calls"][0]["function"],
        "arguments": _respaced(sent["tool_calls"][0]["function"]["arguments"]),
    }
    assert respelled["arguments"] != sent["tool_calls"][0]["function"]["arguments"]
    history.append(
        {"role": "assistant", "content": None, "tool_calls": [{**sent["tool_calls"][0], "function": respelled}]}
    )
    history.append({"role": "tool", "tool_call_id": call["id"], "content": "a.txt\nb.txt"})
    r2 = p.post_chat(api_key, {"model": "gpt-4o", "messages": history})
    assert r2.headers["x-conversation-id"] == conv
    # upstream got the client's spelling, not the canonical one
    assert upstream.requests[-1].body["messages"][1]["tool_calls"][0]["function"] == respelled
    history += [{"role": "assistant", "content": "two files"}, {"role": "user", "content": "thanks"}]
    r3 = p.post_chat(api_key, {"model": "gpt-4o", "messages": history})
    assert r3.headers["x-conversation-id"] == conv
    _one_branch(p, conv)
    assert [e["message"]["role"] for e in p.events(conv)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]


def _forks(p: Any) -> int:
    """`ctxproxy_forks_total`, all causes (the pooled proxy is shared: compare before and after)."""
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    return sum(int(float(n)) for n in re.findall(r"^ctxproxy_forks_total\{[^}]*\} (\S+)$", text, re.M))


def _claude(proxy: Any, server: Any) -> Any:
    return proxy(routes=[scripted_route("claude", "claude-*", "/v1/messages", server.url)])


def _anthropic_post(p: Any, api_key: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    response = httpx.post(f"{p.url}/v1/messages", content=json.dumps(body), headers=headers, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response


def test_anthropic_block_prompt_resent_as_string(proxy, claude_server, api_key):
    """Claude Code: the newest prompt is `[text block + cache_control]`, then the plain string."""
    claude_server.clear()
    p = _claude(proxy, claude_server)
    cc = {"type": "ephemeral"}
    use = {"name": "Bash", "input": {"command": "ls", "description": "list"}, "id": "toolu_01"}
    claude_server.push(AnthropicReply(tool_uses=[use]), AnthropicReply(text="two files"), AnthropicReply(text="ok"))
    base = {"model": "claude-test-1", "max_tokens": 1000, "system": "You are Claude Code."}
    first = "list the files"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": first, "cache_control": cc}]}
    ]
    r1 = _anthropic_post(p, api_key, {**base, "messages": messages})
    conv = r1.headers["x-conversation-id"]
    assistant = {"role": "assistant", "content": r1.json()["content"]}
    result = {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt\nb.txt", "cache_control": cc}
    messages = [{"role": "user", "content": first}, assistant, {"role": "user", "content": [result]}]
    r2 = _anthropic_post(p, api_key, {**base, "messages": messages})
    assert r2.headers["x-conversation-id"] == conv
    # the client's bytes went upstream: the string stays a string
    assert claude_server.requests[-1].body["messages"][0] == {"role": "user", "content": first}
    second = "and now?"
    messages = [
        {"role": "user", "content": [{"type": "text", "text": first}]},  # and back to a block
        assistant,
        {"role": "user", "content": [{k: v for k, v in result.items() if k != "cache_control"}]},
        {"role": "assistant", "content": r2.json()["content"]},
        {"role": "user", "content": [{"type": "text", "text": second, "cache_control": cc}]},
    ]
    r3 = _anthropic_post(p, api_key, {**base, "messages": messages})
    assert r3.headers["x-conversation-id"] == conv
    messages[-1] = {"role": "user", "content": second}
    messages += [{"role": "assistant", "content": r3.json()["content"]}, {"role": "user", "content": "bye"}]
    claude_server.push(AnthropicReply(text="bye"))
    r4 = _anthropic_post(p, api_key, {**base, "messages": messages})
    assert r4.headers["x-conversation-id"] == conv
    _one_branch(p, conv)
    roles = [e["message"]["role"] for e in p.events(conv)]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "user", "assistant"]


TURNS = 5


@pytest.mark.parametrize("resent", ["string", "blocks"])
def test_anthropic_sdk_answer_resent_as_string_or_blocks(
    proxy: Any, claude_server: AnthropicUpstream, api_key: str, resent: str
) -> None:
    """The anthropic SDK, five turns (streamed and not, in turn): the previous answer goes back as
    `reply.content[0].text` or as the blocks the API returned. Both are the stored answer: one
    conversation, one branch, no fork counted; the string goes upstream as the client sent it."""
    claude_server.clear()
    p = _claude(proxy, claude_server)
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=TIMEOUT)
    forks = _forks(p)
    messages: list[Any] = []
    conversations = set()
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"question {turn}"})
        args: dict[str, Any] = {"model": "claude-test-1", "max_tokens": 100, "messages": messages}
        reply, conversation = anthropic_reply(client, bool(turn % 2), **args)
        conversations.add(conversation)
        assert [b.type for b in reply.content] == ["text"]
        text = reply.content[0].text  # type: ignore[union-attr]
        assert text == f"ok: question {turn}"
        messages.append({"role": "assistant", "content": text if resent == "string" else reply.content})
    (conv,) = conversations
    assert len(p.conversation(conv)["branches"]) == 1
    assert _forks(p) == forks
    assert [e["message"]["role"] for e in p.events(conv)] == ["user", "assistant"] * TURNS
    sent = claude_server.message_requests[-1].body["messages"][1]
    if resent == "string":  # the client's own bytes went upstream
        assert sent == {"role": "assistant", "content": "ok: question 0"}
    else:
        assert sent == {"role": "assistant", "content": [{"type": "text", "text": "ok: question 0"}]}


def test_anthropic_sdk_text_and_tool_use_answers_resent_as_blocks(
    proxy: Any, claude_server: AnthropicUpstream, api_key: str
) -> None:
    """Five turns whose answers are text beside a tool_use block, sent back as the SDK returned
    them with the tool's result: one conversation, one branch, no fork counted."""
    claude_server.clear()
    p = _claude(proxy, claude_server)
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=TIMEOUT)
    forks = _forks(p)
    for turn in range(TURNS):
        use = {"name": "bash", "input": {"command": f"ls dir{turn}"}, "id": f"toolu_{turn:02d}"}
        claude_server.push(AnthropicReply(text=f"Looking at dir{turn}.", tool_uses=[use]))
    tools = [{"name": "bash", "description": "Run a command.", "input_schema": {"type": "object"}}]
    messages: list[Any] = [{"role": "user", "content": "look around"}]
    conversations = set()
    for turn in range(TURNS):
        args: dict[str, Any] = {"model": "claude-test-1", "max_tokens": 100, "messages": messages, "tools": tools}
        reply, conversation = anthropic_reply(client, bool(turn % 2), **args)
        conversations.add(conversation)
        assert [b.type for b in reply.content] == ["text", "tool_use"]
        result = {"type": "tool_result", "tool_use_id": f"toolu_{turn:02d}", "content": f"files of dir{turn}"}
        messages += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": [result]}]
    (conv,) = conversations
    assert len(p.conversation(conv)["branches"]) == 1
    assert _forks(p) == forks
    assert [e["message"]["role"] for e in p.events(conv)] == ["user"] + ["assistant", "tool"] * (TURNS - 1) + [
        "assistant"
    ]


@pytest.fixture(scope="module")
def responses_server() -> Iterator[ResponsesServer]:
    server = ResponsesServer().start()
    yield server
    server.stop()


def test_responses_respelled_arguments_continue_the_branch(proxy, responses_server, api_key):
    responses_server.clear()
    timeouts = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
    route = {
        "name": "responses",
        "match": {"model": "resp-*"},
        "upstream": {"base_url": responses_server.base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts},
        "policy": "default",
    }
    p = proxy(routes=[route])
    client = p.client(api_key)
    tools = [
        {
            "type": "function",
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        }
    ]
    responses_server.push(ResponsesReply(calls=[fcall("bash", {"command": "ls", "cwd": "/tmp"}, "call_r1")]))
    items: list[Any] = [{"role": "user", "content": "list the files"}]
    raw = client.responses.with_raw_response.create(model="resp-4o", input=items, tools=tools)
    conv = raw.headers["x-conversation-id"]
    for item in raw.parse().output:
        native = item.model_dump(exclude_none=True)
        if native["type"] == "function_call":
            native["arguments"] = _respaced(native["arguments"])
            respelled = native
        items.append(native)
    items.append({"type": "function_call_output", "call_id": "call_r1", "output": "a.txt\nb.txt"})
    responses_server.push(ResponsesReply(text="two files"))
    raw = client.responses.with_raw_response.create(model="resp-4o", input=items, tools=tools)
    assert raw.headers["x-conversation-id"] == conv
    sent = [i for i in responses_server.requests[-1].body["input"] if i.get("type") == "function_call"]
    assert sent == [respelled]  # the client's item, byte for byte
    items += [{"role": "assistant", "content": "two files"}, {"role": "user", "content": "thanks"}]
    responses_server.push(ResponsesReply(text="done"))
    raw = client.responses.with_raw_response.create(model="resp-4o", input=items, tools=tools)
    assert raw.headers["x-conversation-id"] == conv
    _one_branch(p, conv)
    assert [e["message"]["role"] for e in p.events(conv)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
