"""`summarizer.mode: shared`: the summary is asked of the conversation's own last request, read from
the provider's prompt cache, through the real proxy and the real anthropic SDK against the scripted
Anthropic upstream (which simulates the cache from the breakpoints it is sent, and counts its own way).

- The summary request is the branch's last answered request as it went upstream (system, tools,
  every message, the client's breakpoints) plus one user message asking for the summary; the
  upstream reads it from its cache, the checkpoint holds the model's answer, ctxproxy's own
  summarizer is never called, and the call record carries the upstream's usage.
- A model that answers the ask with a tool call (real models ignore instructions) is not taken
  for a summary: the job falls back to ctxproxy's own summarizer, and says so.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.e2e.test_rewriting import OBJECTIVE as CHAT_OBJECTIVE
from tests.e2e.test_rewriting import SMALL_POLICY, drive, is_own_summary_request, wait_checkpoints
from tests.e2e.test_rewriting import SUMMARY as SUMMARY_TEXT
from tests.e2e.test_rewriting import SYSTEM as CHAT_SYSTEM
from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.anthropic_upstream import Reply as AnthropicReply
from tests.support.e2e import active_checkpoint
from tests.support.responses_upstream import ResponsesReply, fcall
from tests.support.upstream_server import Reply

pytestmark = pytest.mark.slow

CLAUDE = "claude-shared-1"
TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
SYSTEM = "You are a careful coding agent working in the billing repository."
OBJECTIVE = "Objective: migrate billing to the new queue. Never touch config/prod.yaml."
POLICY = {"context_window": 8000, "max_output_tokens": 500, "keep_recent_tokens": 1500}
ASK = "[ctxproxy] Pause the task for this one reply."
SUMMARY = f'## Goal\n{OBJECTIVE}\n## Constraints\n"Never touch config/prod.yaml."\n## Next step\nread the next part'
TOOLS = [{"name": "bash", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]


def _proxy(proxy: Any, upstream_url: str) -> Any:
    route = {
        "name": "shared",
        "match": {"model": "claude-*"},
        "upstream": {"base_url": upstream_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
        "policy": "shared",
    }
    return proxy(routes=[route], policies={"shared": {**POLICY, "summarizer": {"mode": "shared"}}})


def _messages(rounds: int) -> list[dict[str, Any]]:
    """Claude Code's shape: tool rounds, the newest message carrying the moving breakpoint."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": OBJECTIVE}]}]
    for step in range(rounds):
        use = {"type": "tool_use", "id": f"toolu_{step}", "name": "bash", "input": {"cmd": f"cat part{step}.txt"}}
        output = "".join(f"step {step} line {k}: the quick brown fox jumps over the lazy dog\n" for k in range(30))
        result = {"type": "tool_result", "tool_use_id": f"toolu_{step}", "content": output}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return messages


def _next_step(body: dict[str, Any]) -> AnthropicReply:
    """The agent's next step: the tool call the client sends back in its next request."""
    step = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return AnthropicReply(tool_uses=[{"id": f"toolu_{step}", "name": "bash", "input": {"cmd": f"cat part{step}.txt"}}])


def _asks(body: dict[str, Any]) -> bool:
    """The shared summary request: its last user message is ctxproxy's ask."""
    last = body["messages"][-1]
    return last["role"] == "user" and ASK in json.dumps(last["content"])


def _own_summary(body: dict[str, Any]) -> bool:
    system = body.get("system")
    return isinstance(system, str) and system.startswith("You compress the history")


def _run(p: Any, api_key: str, rounds: range) -> str:
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=60)
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    conversation = ""
    for n in rounds:
        answer = client.messages.with_raw_response.create(
            model=CLAUDE, max_tokens=300, system=system, tools=TOOLS, messages=_messages(n)
        )
        assert answer.parse().content[-1].type == "tool_use"
        conversation = answer.headers["x-conversation-id"]
    return conversation


def test_the_summary_reads_the_conversation_from_the_cache(proxy, anthropic_upstream: AnthropicUpstream, api_key):
    summary = AnthropicReply(text=SUMMARY)
    anthropic_upstream.responder = lambda body: summary if _asks(body) else _next_step(body)
    p = _proxy(proxy, anthropic_upstream.url)
    conversation = _run(p, api_key, range(2, 24))
    checkpoint = active_checkpoint(p, conversation)
    assert checkpoint["summary"] == SUMMARY
    requests = anthropic_upstream.message_requests
    assert not [r for r in requests if _own_summary(r.body)]  # ctxproxy's own summarizer never ran

    index = next(i for i, r in enumerate(requests) if _asks(r.body))
    shared, before = requests[index].body, requests[index - 1].body
    # The request that was answered last, as it went upstream, then the ask.
    assert shared["system"] == before["system"] and shared["tools"] == before["tools"]
    # (The ask joins the last user turn as one more block, as the API merges consecutive turns.)
    assert shared["messages"][:-1] == before["messages"][:-1]
    *blocks, ask = shared["messages"][-1]["content"]
    assert blocks == before["messages"][-1]["content"] and ASK in ask["text"]
    assert "stream" not in shared
    assert requests[index].headers["anthropic-version"] == requests[index - 1].headers["anthropic-version"]
    assert "up to, but not including" in ask["text"]

    calls = p.wait_calls(conversation, 1, until=lambda cs: any(c["purpose"] == "summary" for c in cs))
    (call,) = [c for c in calls if c["purpose"] == "summary"]
    assert call["status"] == "complete" and call["projection"]["shared"] is True
    usage = call["usage"]
    assert usage["cache_read"] > 0.8 * usage["input_total"]  # the conversation came from the cache

    # The next request carries the summary and is smaller than the conversation it replaced.
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=60)
    client.messages.create(model=CLAUDE, max_tokens=300, tools=TOOLS, messages=_messages(24))
    last = anthropic_upstream.message_requests[-1].body
    assert any("read the next part" in json.dumps(m) for m in last["messages"])


def test_an_answer_that_calls_a_tool_falls_back_to_the_own_summarizer(
    proxy, anthropic_upstream: AnthropicUpstream, api_key
):
    own = AnthropicReply(text=f"## Goal\n{OBJECTIVE}\n## Next step\nown summary")
    tool = AnthropicReply(tool_uses=[{"name": "bash", "input": {"cmd": "cat part3.txt"}}])

    def answer(body: dict[str, Any]) -> AnthropicReply:
        if _asks(body):
            return tool  # the model went on with the task instead
        return own if _own_summary(body) else _next_step(body)

    anthropic_upstream.responder = answer
    p = _proxy(proxy, anthropic_upstream.url)
    conversation = _run(p, api_key, range(2, 24))
    assert "own summary" in active_checkpoint(p, conversation)["summary"]
    calls = p.wait_calls(conversation, 1, until=lambda cs: sum(c["purpose"] == "summary" for c in cs) >= 2)
    failed = [c for c in calls if c["purpose"] == "summary" and c["status"] == "error"]
    assert failed and "tool call" in failed[0]["error"] and failed[0]["projection"]["shared"] is True
    metrics = httpx.get(p.url + "/metrics", timeout=10).text
    assert 'ctxproxy_compactions_total{result="shared_fallback"}' in metrics


def test_chat_completions_asks_the_same_request_with_the_ask_after_it(proxy, upstream, api_key, monkeypatch):
    """The wire does not matter: on Chat Completions the shared request is the last answered one,
    its messages unchanged, plus the ask as one more user message."""
    model = "gpt-shared-1"
    monkeypatch.setitem(upstream.context_windows, model, SMALL_POLICY["context_window"])
    policy = {**SMALL_POLICY, "summarizer": {"mode": "shared"}}
    p = proxy(policies={"default": policy}, fresh=True)
    upstream.responder = lambda body: Reply(content=SUMMARY_TEXT) if ASK in json.dumps(body["messages"][-1]) else None
    conversation = drive(p.client(api_key), model, [CHAT_SYSTEM, CHAT_OBJECTIVE], 20, words=150)
    assert wait_checkpoints(p, conversation)[0]["summary"] == SUMMARY_TEXT
    bodies = [r.body for r in upstream.chat_requests]
    assert not [b for b in bodies if is_own_summary_request(b)]
    index = next(i for i, b in enumerate(bodies) if ASK in json.dumps(b["messages"][-1]))
    shared = bodies[index]
    # an earlier request, answered (a compaction in the background starts beside the request that
    # planned it, so it asks with the one before)
    (before,) = [b for b in bodies[:index] if b["messages"] == shared["messages"][:-1]]
    assert shared["messages"][-1]["role"] == "user"
    assert shared["model"] == before["model"] and not shared.get("stream")


def test_an_answer_that_goes_on_with_the_task_is_not_taken_for_a_summary(proxy, upstream, api_key, monkeypatch):
    """A model that ignores the ask and answers as the agent would (no summary format) leaves the
    compaction to the own summarizer."""
    model = "gpt-shared-2"
    monkeypatch.setitem(upstream.context_windows, model, SMALL_POLICY["context_window"])
    p = proxy(policies={"default": {**SMALL_POLICY, "summarizer": {"mode": "shared"}}}, fresh=True)
    upstream.responder = lambda body: Reply(content=SUMMARY_TEXT) if is_own_summary_request(body) else None
    conversation = drive(p.client(api_key), model, [CHAT_SYSTEM, CHAT_OBJECTIVE], 20, words=150)
    assert wait_checkpoints(p, conversation)[0]["summary"] == SUMMARY_TEXT  # the own summarizer's
    bodies = [r.body for r in upstream.chat_requests]
    assert [b for b in bodies if ASK in json.dumps(b["messages"][-1])]  # asked, answered "ok: ..."
    calls = p.wait_calls(conversation, 1, until=lambda cs: any(c.get("projection", {}).get("shared") for c in cs))
    (asked,) = [c for c in calls if c["purpose"] == "summary" and (c["projection"] or {}).get("shared")][:1]
    assert asked["status"] == "complete"  # the call itself succeeded; its answer was not a summary


def test_responses_asks_the_same_input_with_the_ask_after_it(proxy, rup, api_key):
    """On the Responses API too: the last answered request's input, unchanged, then the ask."""
    route = {
        "name": "shared",
        "match": {"model": "resp-*"},
        "upstream": {"base_url": rup.base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
        "policy": "shared",
    }
    p = proxy(routes=[route], policies={"shared": {**POLICY, "summarizer": {"mode": "shared"}}})

    def answer(body: dict[str, Any]) -> ResponsesReply:
        if ASK in json.dumps(body["input"][-1]):
            return ResponsesReply(text=SUMMARY)
        step = sum(1 for item in body["input"] if item.get("type") == "function_call_output")
        return ResponsesReply(calls=[fcall("bash", {"cmd": f"cat part{step}.txt"}, f"call_{step}")])

    rup.responder = answer
    client = p.client(api_key)
    tools = [{"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}}]
    items: list[dict[str, Any]] = [{"role": "user", "content": OBJECTIVE}]
    conversation = ""
    for step in range(20):
        raw = client.responses.with_raw_response.create(model="resp-shared-1", input=items, tools=tools)
        conversation = raw.headers["x-conversation-id"]
        output = [item.model_dump(exclude_none=True) for item in raw.parse().output]
        items += output
        output_text = "".join(f"step {step} line {k}: the quick brown fox jumps over the lazy dog\n" for k in range(30))
        items.append({"type": "function_call_output", "call_id": output[-1]["call_id"], "output": output_text})
    assert active_checkpoint(p, conversation)["summary"] == SUMMARY
    bodies = rup.bodies
    index = next(i for i, b in enumerate(bodies) if ASK in json.dumps(b["input"][-1]))
    shared = bodies[index]
    (before,) = [b for b in bodies[:index] if b["input"] == shared["input"][:-1]]
    assert shared["tools"] == before["tools"] and not shared.get("stream")
