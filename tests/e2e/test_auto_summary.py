"""`summarizer.mode: auto`, the default: the summary is asked of the conversation's own last answered
request, read from the provider's prompt cache, wherever that can apply; ctxproxy's own summarizer
otherwise. Through the real proxy, real SDKs and scripted upstreams on 127.0.0.1.

- With no summarizer setting at all, a compaction on the Chat Completions wire and on the
  Anthropic Messages wire is one call whose request is an earlier answered request byte for byte
  (messages, system, tools, settings) with the ask added, and ctxproxy's own summarizer never runs.
- A model that answers the ask with a tool call (real models sometimes ignore the instruction):
  the compaction falls back to the own summarizer, a checkpoint commits, the stored history holds
  nothing of the shared call, and the fallback is in the ledger and the metrics.
- A `summarizer.model`, or a litellm route (which reads no cache of the client's provider): the
  own summarizer from the start, quietly (no shared call, no fallback counted).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from policies.shared_prompt import OPENING
from tests.e2e.test_rewriting import OBJECTIVE, SMALL_POLICY, SUMMARY, SYSTEM, WINDOW, drive, is_own_summary_request
from tests.e2e.test_shared_summary import POLICY, _asks, _next_step, _own_summary, _run
from tests.e2e.test_shared_summary import SUMMARY as CLAUDE_SUMMARY
from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.anthropic_upstream import Reply as AnthropicReply
from tests.support.e2e import SCRIPTED_TIMEOUTS, active_checkpoint, event_views, view
from tests.support.upstream_server import Reply, tool_call

pytestmark = pytest.mark.slow

DEFAULT = {key: value for key, value in SMALL_POLICY.items() if key != "summarizer"}
"""The e2e window settings, and no summarizer setting: the default mode."""
FALLBACK = 'ctxproxy_compactions_total{result="shared_fallback"}'


def _asked(body: dict[str, Any]) -> bool:
    return OPENING in json.dumps(body["messages"][-1])


def _without_ask(raw: bytes) -> bytes:
    """The request's bytes with the ask taken out: the element that carries it in the newest
    message (a user message on Chat Completions, one more block of the last user turn on
    Anthropic's), and the comma before it."""
    text = raw.decode()
    start = text.index(OPENING)
    open_at = text.rindex("{", 0, start)
    value, end = json.JSONDecoder().raw_decode(text, open_at)
    assert OPENING in json.dumps(value)
    assert text[open_at - 1] == ","  # the ask follows what the request already held
    return (text[: open_at - 1] + text[end:]).encode()


def _value(raw: bytes, key: str) -> str:
    """The bytes (as text) of a top-level field's value, as the request carried them."""
    text = raw.decode()
    at = text.index(f'"{key}":') + len(key) + 3
    _, end = json.JSONDecoder().raw_decode(text, at)
    return text[at:end]


def _repeated(earlier: list[Any], raw: bytes, keys: tuple[str, ...]) -> Any:
    """The earlier request that `raw` repeats: each of `keys` byte for byte, once the ask is
    taken out. (The body's top-level keys may come in another order than the client's own bytes
    had them: a provider caches the prompt those fields render, not the JSON around them.)"""
    stripped = _without_ask(raw)
    found = [r for r in earlier if all(_value(r.raw, key) == _value(stripped, key) for key in keys)]
    assert found, "no earlier request holds the shared request's fields byte for byte"
    assert {k for k in json.loads(found[-1].raw) if k != "stream"} == set(json.loads(stripped))  # nothing else
    return found[-1]


def test_the_default_compacts_on_chat_completions_with_the_last_request_and_the_ask(
    proxy, upstream, api_key, monkeypatch
):
    model = "gpt-auto-1"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    p = proxy(policies={"default": DEFAULT}, fresh=True)
    upstream.responder = lambda body: Reply(content=SUMMARY) if _asked(body) else None
    conversation = drive(p.client(api_key), model, [SYSTEM, OBJECTIVE], 20, words=150)
    assert active_checkpoint(p, conversation)["summary"] == SUMMARY
    requests = upstream.chat_requests
    assert not [r for r in requests if is_own_summary_request(r.body)]  # the own summarizer never ran
    index = next(i for i, r in enumerate(requests) if _asked(r.body))
    shared = requests[index]
    # An earlier answered request, to the byte, with the ask after its messages.
    before = _repeated(requests[:index], shared.raw, ("messages",))
    assert before.body["model"] == shared.body["model"]
    assert shared.body["messages"][-1]["role"] == "user" and not shared.body.get("stream")
    (call,) = [c for c in p.calls(conversation) if c["purpose"] == "summary"]
    assert call["status"] == "complete" and call["projection"]["shared"] is True
    assert FALLBACK not in httpx.get(p.url + "/metrics", timeout=10).text


def test_the_default_compacts_on_anthropic_messages_with_the_last_request_and_the_ask(
    proxy, anthropic_upstream: AnthropicUpstream, api_key
):
    summary = AnthropicReply(text=CLAUDE_SUMMARY)
    anthropic_upstream.responder = lambda body: summary if _asks(body) else _next_step(body)
    route = {
        "name": "claude",
        "match": {"model": "claude-*"},
        "upstream": {"base_url": anthropic_upstream.url, "api_key_env": "UPSTREAM_KEY", "timeouts": SCRIPTED_TIMEOUTS},
        "policy": "claude",
    }
    p = proxy(routes=[route], policies={"claude": POLICY})  # no summarizer setting
    conversation = _run(p, api_key, range(2, 24))
    assert active_checkpoint(p, conversation)["summary"] == CLAUDE_SUMMARY
    requests = anthropic_upstream.message_requests
    assert not [r for r in requests if _own_summary(r.body)]
    index = next(i for i, r in enumerate(requests) if _asks(r.body))
    shared = requests[index]
    before = _repeated(requests[:index], shared.raw, ("messages", "system", "tools"))  # breakpoints too
    assert shared.body["system"] == before.body["system"] and shared.body["tools"] == before.body["tools"]
    assert shared.headers["anthropic-version"] == before.headers["anthropic-version"]
    calls = p.wait_calls(conversation, 1, until=lambda cs: any(c["purpose"] == "summary" for c in cs))
    (call,) = [c for c in calls if c["purpose"] == "summary"]
    assert call["status"] == "complete" and call["projection"]["shared"] is True
    assert call["usage"]["cache_read"] > 0.8 * call["usage"]["input_total"]  # read from the cache


def test_a_tool_call_for_an_answer_falls_back_to_the_own_summarizer(proxy, upstream, api_key, monkeypatch):
    model = "gpt-auto-2"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    p = proxy(policies={"default": DEFAULT}, fresh=True)
    own = SUMMARY.replace("Continue the migration.", "own summary")

    def answer(body: dict[str, Any]) -> Reply | None:
        if _asked(body):  # the model ignores the instruction and goes on with the task
            return Reply(tool_calls=[tool_call("bash", '{"cmd": "ls config"}', "call_shared_1")])
        return Reply(content=own) if is_own_summary_request(body) else None

    upstream.responder = answer
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conversation = drive(p.client(api_key), model, messages, 20, words=150)
    assert "own summary" in active_checkpoint(p, conversation)["summary"]
    bodies = [r.body for r in upstream.chat_requests]
    assert [b for b in bodies if _asked(b)] and [b for b in bodies if is_own_summary_request(b)]

    # The shared call's answer is no turn of the conversation: what is stored is what the client sent.
    stored = event_views(p.events(conversation))
    assert stored == [view(m) for m in messages if m["role"] != "system"]
    assert "call_shared_1" not in json.dumps(p.events(conversation))

    calls = p.wait_calls(conversation, 1, until=lambda cs: sum(c["purpose"] == "summary" for c in cs) >= 2)
    failed = [c for c in calls if c["purpose"] == "summary" and c["status"] == "error"]
    assert failed and "tool call" in failed[0]["error"] and failed[0]["projection"]["shared"] is True
    assert [c for c in calls if c["purpose"] == "summary" and c["status"] == "complete"]  # the own summarizer's
    metrics = httpx.get(p.url + "/metrics", timeout=10).text
    assert FALLBACK in metrics


def test_a_summarizer_model_means_the_own_summarizer(proxy, upstream, api_key, monkeypatch):
    """`auto` with a `summarizer.model` is valid (an explicit `shared` with one is a config error)
    and means ctxproxy's own summarizer: no shared call, no fallback."""
    model = "gpt-auto-3"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    summarizer = {"model": "openai/gpt-summarizer", "base_url": upstream.base_url, "api_key_env": "UPSTREAM_KEY"}
    p = proxy(policies={"default": {**DEFAULT, "summarizer": summarizer}}, fresh=True)
    upstream.responder = lambda body: Reply(content=SUMMARY) if is_own_summary_request(body) else None
    conversation = drive(p.client(api_key), model, [SYSTEM, OBJECTIVE], 20, words=150)
    assert active_checkpoint(p, conversation)["model"] == "openai/gpt-summarizer"
    bodies = [r.body for r in upstream.chat_requests]
    assert not [b for b in bodies if _asked(b)]
    assert [b for b in bodies if is_own_summary_request(b) and b["model"] == "gpt-summarizer"]
    assert FALLBACK not in httpx.get(p.url + "/metrics", timeout=10).text


def test_a_litellm_route_goes_to_the_own_summarizer_quietly(proxy, upstream, api_key):
    """A litellm route reads no cache of the client's provider: `auto` is the own summarizer
    there from the start, neither tried nor counted as a fallback."""
    route = {
        "name": "lite",
        "match": {"model": "lite-*"},
        "upstream": {
            "model": "openai/gpt-lite",
            "base_url": upstream.base_url,
            "api_key_env": "UPSTREAM_KEY",
            "timeouts": SCRIPTED_TIMEOUTS,
        },
    }
    upstream.context_windows["gpt-lite"] = WINDOW
    p = proxy(routes=[route], policies={"default": {**DEFAULT, "context_window": WINDOW}}, fresh=True)
    upstream.responder = lambda body: Reply(content=SUMMARY) if is_own_summary_request(body) else None
    conversation = drive(p.client(api_key), "lite-auto", [SYSTEM, OBJECTIVE], 20, words=150)
    assert active_checkpoint(p, conversation)["summary"] == SUMMARY
    bodies = [r.body for r in upstream.chat_requests]
    assert not [b for b in bodies if _asked(b)] and [b for b in bodies if is_own_summary_request(b)]
    assert FALLBACK not in httpx.get(p.url + "/metrics", timeout=10).text
    assert "fell back" not in p.stderr()


def test_a_request_that_forces_a_tool_call_is_not_repeated_for_a_summary(proxy, upstream, api_key, monkeypatch):
    """An agent that sends `tool_choice: "required"` on every request: a repeat of it could only
    be answered with a tool call, so no shared call is made (it would be paid for nothing) and the
    own summarizer writes the summary; the fallback is counted."""
    model = "gpt-auto-4"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    p = proxy(policies={"default": DEFAULT}, fresh=True)
    bash = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}

    def answer(body: dict[str, Any]) -> Reply:
        if is_own_summary_request(body):
            return Reply(content=SUMMARY)
        assert body["tool_choice"] == "required"  # ... and so never the ask
        return Reply(tool_calls=[tool_call("bash", {"cmd": "ls"}, f"call_{len(body['messages'])}")])

    upstream.responder = answer
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conversation = ""
    for _ in range(40):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=messages, tools=[bash], tool_choice="required"
        )
        conversation = raw.headers["x-conversation-id"]
        turn = raw.parse().choices[0].message.model_dump(exclude_none=True)
        messages += [turn, {"role": "tool", "tool_call_id": turn["tool_calls"][0]["id"], "content": "file " * 200}]
    assert active_checkpoint(p, conversation)["summary"] == SUMMARY
    assert not [r for r in upstream.chat_requests if _asked(r.body)]
    calls = p.wait_calls(conversation, 1, until=lambda cs: any(c["purpose"] == "summary" for c in cs))
    assert all(c["status"] == "complete" for c in calls if c["purpose"] == "summary")  # none failed: none was made
    assert FALLBACK in httpx.get(p.url + "/metrics", timeout=10).text
