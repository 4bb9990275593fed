"""proxy.recall's pure parts: when the tool is offered, its stable definition, the tool results."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from proxy.config import Policy
from proxy.protocols.anthropic.wire import AnthropicWire
from proxy.protocols.openai_chat.wire import OpenAIChatWire
from proxy.recall import answer, offered, recall_calls, stream_verdict, tool_definition, with_tool, without_tool

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
AUTO = Policy(recall={"enabled": "auto"})


@dataclass(frozen=True)
class Ev:
    seq: int
    role: str
    message: dict[str, Any]
    branch_id: str = "br"
    created_at: float = 0.0


def test_offered_follows_the_policy():
    chat = OpenAIChatWire()
    body = {"model": "m", "messages": [], "tools": TOOLS}
    assert offered(AUTO, chat, body, stream=False)
    assert not offered(Policy(), chat, body, stream=False)  # off by default
    assert not offered(AUTO, chat, {"model": "m", "messages": []}, stream=False)  # auto: client has no tools
    assert offered(Policy(recall={"enabled": True}), chat, {"model": "m", "messages": []}, stream=False)
    assert not offered(AUTO, chat, {**body, "tool_choice": "none"}, stream=False)
    assert offered(AUTO, chat, body, stream=True)
    assert not offered(AUTO, AnthropicWire(), body, stream=False)  # not yet


def test_definition_is_a_function_of_the_policy_alone():
    a = json.dumps(with_tool({"tools": TOOLS, "messages": [1]}, AUTO.recall)["tools"][-1])
    b = json.dumps(with_tool({"tools": [], "messages": [2, 3]}, AUTO.recall)["tools"][-1])
    assert a == b == json.dumps(tool_definition(AUTO.recall))
    assert tool_definition(AUTO.recall)["function"]["parameters"]["required"] == ["query"]
    body = {"tools": TOOLS, "tool_choice": "auto"}
    assert with_tool(body, AUTO.recall) is not body and body["tools"] == TOOLS
    assert without_tool(with_tool(body, AUTO.recall), AUTO.recall) == body
    assert without_tool(with_tool({"tool_choice": "auto"}, AUTO.recall), AUTO.recall) == {}


def test_recall_calls_and_answers():
    call = {"id": "c", "type": "function", "function": {"name": "ctxproxy_recall", "arguments": '{"query": "port"}'}}
    other = {"id": "d", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    assert recall_calls({"role": "assistant", "tool_calls": [other, call]}, AUTO.recall) == [call]
    assert recall_calls(None, AUTO.recall) == []
    events = [Ev(1, "user", {"role": "user", "content": "the port is 8443"})]
    assert "[event 1 | user" in answer(events, call, AUTO.recall, len)
    fetch = {**call, "function": {"name": "ctxproxy_recall", "arguments": '{"query": "", "event": 1}'}}
    assert "the port is 8443" in answer(events, fetch, AUTO.recall, len)
    missing = {**call, "function": {"name": "ctxproxy_recall", "arguments": '{"query": "x", "event": 9}'}}
    assert "No stored event 9" in answer(events, missing, AUTO.recall, len)
    bad = {**call, "function": {"name": "ctxproxy_recall", "arguments": "not json"}}
    assert answer(events, bad, AUTO.recall, len).startswith("Error:")


def test_stream_verdict():
    r = AUTO.recall
    assert stream_verdict(None, r) is None
    assert stream_verdict({"role": "assistant", "content": None}, r) is None
    assert stream_verdict({"role": "assistant", "content": "Hi"}, r) is False
    named = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "ctxproxy_recall"}}]}
    assert stream_verdict(named, r) is True
    other = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "bash"}}]}
    assert stream_verdict(other, r) is False
    prefix = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "ctxproxy_"}}]}
    assert stream_verdict(prefix, r) is None
