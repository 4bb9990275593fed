"""The providers' own context management through the real proxy, with the real SDKs and raw HTTP,
against the scripted Responses and Anthropic upstreams.

- A request whose `context_management` asks the provider to compact (a Responses `compaction`
  entry, an Anthropic `compact_*` edit) leaves its context to the provider. Under the policy's
  default `provider_context: defer` it reaches the upstream byte for byte even when ctxproxy would
  have trimmed it (two compactors on one window undo each other), and is still recorded; under
  `combine` ctxproxy projects it and the field goes along. Context editing alone (clearing old
  thinking or tool uses) is projected as any request.
- The provider's compaction that a client sends back (a Responses `compaction` item, an Anthropic
  `compaction` block) is the client's checkpoint: when ctxproxy rewrites the history around it,
  the item arrives upstream unmodified.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.anthropic_context import compaction_block
from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.anthropic_upstream import Reply as AnthropicReply
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.responses_context import compaction_item
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, fcall

pytestmark = pytest.mark.slow

RESPONSES_MODEL = "resp-ctx-1"
CLAUDE_MODEL = "claude-ctx-1"
POLICY = {"context_window": 8000, "max_output_tokens": 500, "keep_recent_tokens": 1500}
TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
OBJECTIVE = "Objective: migrate billing to the new queue. Never touch config/prod.yaml."
COMPACTION = compaction_item("Earlier: read the queue code.", [], 40)
ANTHROPIC_COMPACTION = compaction_block("Earlier: read the queue code.")
CONTEXT_MANAGEMENT = [{"type": "compaction", "compact_threshold": 200000}]
ANTHROPIC_CONTEXT = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 150000}}]}
CLEARING = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}  # what Claude Code sends every time
BETA = "compact-2026-01-12"


def _proxy(proxy: Any, rup: ResponsesServer, claude: AnthropicUpstream, provider_context: str) -> Any:
    routes = [
        {
            "name": "responses",
            "match": {"model": "resp-*"},
            "upstream": {"base_url": rup.base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
            "policy": "ctx",
        },
        {
            "name": "claude",
            "match": {"model": "claude-*", "path": "/v1/messages"},
            "upstream": {"base_url": claude.url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
            "policy": "ctx",
        },
    ]
    return proxy(routes=routes, policies={"ctx": {**POLICY, "provider_context": provider_context}})


def _summary(body: dict[str, Any]) -> bool:
    """A summarizer call of ctxproxy's own (its system prompt), not the agent's request."""
    system = body.get("instructions") or body.get("system") or ""
    return isinstance(system, str) and system.startswith("You compress the history")


def _output(step: int) -> str:
    return "".join(f"step {step} line {k}: the quick brown fox jumps over the lazy dog\n" for k in range(40))


def _responses_input(rounds: int, compaction: bool = False) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": OBJECTIVE}]
    if compaction:
        items.append(dict(COMPACTION))
    for step in range(rounds):
        call = {"type": "function_call", **fcall("bash", {"command": f"cat part{step}.txt"}, f"call_{step}")}
        items += [call, {"type": "function_call_output", "call_id": f"call_{step}", "output": _output(step)}]
    return items


def _anthropic_messages(rounds: int, compaction: bool = False) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": OBJECTIVE}]
    if compaction:
        messages.append({"role": "assistant", "content": [dict(ANTHROPIC_COMPACTION)]})
        messages.append({"role": "user", "content": "Go on."})
    for step in range(rounds):
        use = {"type": "tool_use", "id": f"toolu_{step}", "name": "bash", "input": {"cmd": f"cat part{step}.txt"}}
        messages.append({"role": "assistant", "content": [use]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{step}", "content": _output(step)}
        messages.append({"role": "user", "content": [result]})
    return messages


def _post(url: str, api_key: str, raw: bytes, **headers: str) -> httpx.Response:
    base = {
        "Authorization": f"Bearer {api_key}",
        "x-api-key": api_key,
        "anthropic-version": "2023-06-01",
        "Content-Type": "application/json",
    }
    return httpx.post(url, content=raw, timeout=60, headers={**base, **headers})


def _responses_body(rounds: int, **extra: Any) -> bytes:
    tools = [{"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}}]
    body = {"model": RESPONSES_MODEL, "input": _responses_input(rounds), "tools": tools, **extra}
    return json.dumps(body).encode()


def _anthropic_body(rounds: int, **extra: Any) -> bytes:
    tools = [{"name": "bash", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
    body = {"model": CLAUDE_MODEL, "max_tokens": 300, "messages": _anthropic_messages(rounds), "tools": tools, **extra}
    return json.dumps(body).encode()


def test_context_management_is_deferred_to_the_provider_and_recorded(proxy, rup, anthropic_upstream, api_key):
    p = _proxy(proxy, rup, anthropic_upstream, "defer")
    rup.push(ResponsesReply(text="done"))
    raw = _responses_body(14, context_management=CONTEXT_MANAGEMENT)
    answer = _post(f"{p.base_url}/responses", api_key, raw)
    assert answer.status_code == 200, answer.text
    assert rup.last.raw == raw  # byte for byte: not trimmed, no recall tool added
    calls = p.wait_calls(answer.headers["x-conversation-id"], 1)
    assert calls[0]["status"] == "complete" and calls[0]["usage"]["input_total"] == rup.last_reply.usage["input_tokens"]

    anthropic_upstream.push(AnthropicReply(text="done"))
    raw = _anthropic_body(14, context_management=ANTHROPIC_CONTEXT)
    answer = _post(f"{p.base_url}/messages", api_key, raw, **{"anthropic-beta": BETA})
    assert answer.status_code == 200, answer.text
    sent = anthropic_upstream.message_requests[-1]
    assert sent.raw == raw and sent.headers["anthropic-beta"] == BETA
    assert p.wait_calls(answer.headers["x-conversation-id"], 1)[0]["status"] == "complete"

    # The same history without the field is rewritten: the deferral is what kept it whole.
    rup.push(ResponsesReply(text="done"))
    answer = _post(f"{p.base_url}/responses", api_key, _responses_body(14))
    assert answer.status_code == 200, answer.text
    assert len(rup.last.raw) < len(_responses_body(14))

    # Context editing alone (Claude Code clears old thinking on every request) is no compaction:
    # ctxproxy projects the request, and the edit goes along.
    anthropic_upstream.push(AnthropicReply(text="done"))
    raw = _anthropic_body(14, context_management=CLEARING)
    answer = _post(f"{p.base_url}/messages", api_key, raw, **{"anthropic-beta": "context-management-2025-06-27"})
    assert answer.status_code == 200, answer.text
    sent = anthropic_upstream.message_requests[-1]
    assert len(sent.raw) < len(raw) and sent.body["context_management"] == CLEARING


def test_combine_projects_the_request_and_keeps_the_field(proxy, rup, anthropic_upstream, api_key):
    p = _proxy(proxy, rup, anthropic_upstream, "combine")
    rup.push(ResponsesReply(text="done"))
    raw = _responses_body(14, context_management=CONTEXT_MANAGEMENT)
    answer = _post(f"{p.base_url}/responses", api_key, raw)
    assert answer.status_code == 200, answer.text
    assert len(rup.last.raw) < len(raw) and rup.last.body["context_management"] == CONTEXT_MANAGEMENT

    anthropic_upstream.push(AnthropicReply(text="done"))
    raw = _anthropic_body(14, context_management=ANTHROPIC_CONTEXT)
    answer = _post(f"{p.base_url}/messages", api_key, raw, **{"anthropic-beta": BETA})
    assert answer.status_code == 200, answer.text
    sent = anthropic_upstream.message_requests[-1]
    assert len(sent.raw) < len(raw) and sent.body["context_management"] == ANTHROPIC_CONTEXT


def test_a_compaction_item_sent_back_survives_every_rewrite(proxy, rup, anthropic_upstream, api_key):
    """Over the window, the old tool results are trimmed, summarized or pruned; the compaction
    item and the block the client sent back reach the upstream exactly as the provider made them."""
    p = _proxy(proxy, rup, anthropic_upstream, "defer")
    for rounds in (14, 30):
        rup.push(ResponsesReply(text="done"))
        tools = [{"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}}]
        body = {"model": RESPONSES_MODEL, "input": _responses_input(rounds, compaction=True), "tools": tools}
        raw = json.dumps(body).encode()
        answer = _post(f"{p.base_url}/responses", api_key, raw)
        assert answer.status_code == 200, answer.text
        sent = [b for b in rup.bodies if not _summary(b)][-1]
        assert len(json.dumps(sent)) < len(raw)  # rewritten
        assert [i for i in sent["input"] if i.get("type") == "compaction"] == [COMPACTION]

        anthropic_upstream.push(AnthropicReply(text="done"))
        tools = [{"name": "bash", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
        messages = _anthropic_messages(rounds, compaction=True)
        body = {"model": CLAUDE_MODEL, "max_tokens": 300, "messages": messages, "tools": tools}
        raw = json.dumps(body).encode()
        answer = _post(f"{p.base_url}/messages", api_key, raw)
        assert answer.status_code == 200, answer.text
        sent = [r.body for r in anthropic_upstream.message_requests if not _summary(r.body)][-1]
        assert len(json.dumps(sent)) < len(raw)
        blocks = [b for m in sent["messages"] if isinstance(m["content"], list) for b in m["content"]]
        assert [b for b in blocks if b.get("type") == "compaction"] == [ANTHROPIC_COMPACTION]


def test_a_client_compaction_is_recorded_and_its_item_comes_back_unmodified(proxy, rup, anthropic_upstream, api_key):
    """`/v1/responses/compact` through the proxy (the real SDK's `responses.compact`): routed like
    `/v1/responses`, relayed as the provider answered, recorded and billed as `client_compaction`
    on the conversation it compacts; the next request, built from its output, continues that
    conversation and its compaction item reaches the upstream as the provider made it."""
    p = _proxy(proxy, rup, anthropic_upstream, "defer")
    client = p.client(api_key)
    items = _responses_input(6)
    rup.push(ResponsesReply(text="first answer"))
    first = client.responses.with_raw_response.create(model=RESPONSES_MODEL, input=items)
    conversation = first.headers["x-conversation-id"]
    items = [*items, {"role": "assistant", "content": "first answer"}]
    compacted = client.responses.with_raw_response.compact(model=RESPONSES_MODEL, input=items)
    assert compacted.headers["x-conversation-id"] == conversation
    answer = compacted.parse()
    assert answer.object == "response.compaction" and answer.output[-1].type == "compaction"
    sent = json.loads(rup.last.raw)
    key = sent.pop("prompt_cache_key")  # the conversation's, as on its other calls
    assert rup.last.path == "/v1/responses/compact" and sent == {"model": RESPONSES_MODEL, "input": items}
    assert key == rup.bodies[-2]["prompt_cache_key"]
    calls = p.wait_calls(conversation, 2)
    compaction = next(c for c in calls if c["purpose"] == "client_compaction")
    assert compaction["status"] == "complete" and compaction["finish_reason"] == "compacted"
    assert (
        compaction["usage"]["input_total"] == answer.usage.input_tokens
        and compaction["usage"]["output"] == answer.usage.output_tokens
    )

    output = compacted.http_response.json()["output"]  # sent back as the provider wrote it
    item = output[-1]
    following = [*output, {"role": "user", "content": "go on"}]
    rup.push(ResponsesReply(text="continued"))
    after = client.responses.with_raw_response.create(model=RESPONSES_MODEL, input=following)
    assert after.parse().output_text == "continued"
    assert after.headers["x-conversation-id"] == conversation
    assert [i for i in rup.bodies[-1]["input"] if i.get("type") == "compaction"] == [item]


@pytest.fixture
def counted_upstreams() -> Iterator[tuple[ResponsesServer, AnthropicUpstream]]:
    """Upstreams that count tokens their own way, not ctxproxy's: the Responses one with another
    framing, the Anthropic one like Claude (another encoding and framing, 15% more)."""
    responses = ResponsesServer(counting="framing").start()
    claude = AnthropicUpstream(api_key=UPSTREAM_KEY, counting="claude-like")
    claude.start()
    yield responses, claude
    claude.stop()
    responses.stop()


def test_combine_projects_below_the_providers_trigger(proxy, counted_upstreams, api_key):
    """Under `combine` ctxproxy's budget stops below the provider's compaction trigger, so its own
    trim and summary act first: a history that fits the window but crosses the trigger reaches
    the upstream below it (in the upstream's own count, which is not ctxproxy's) and the provider
    does not compact. The same history under a window-sized budget (no trigger stated) would have
    crossed it."""
    rup, anthropic_upstream = counted_upstreams
    routes = [
        {
            "name": "responses",
            "match": {"model": "resp-*"},
            "upstream": {"base_url": rup.base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
            "policy": "wide",
        },
        {
            "name": "claude",
            "match": {"model": "claude-*", "path": "/v1/messages"},
            "upstream": {"base_url": anthropic_upstream.url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
            "policy": "wide",
        },
    ]
    wide = {"context_window": 400_000, "max_output_tokens": 500, "provider_context": "combine"}
    p = proxy(routes=routes, policies={"wide": wide})

    threshold = 3000
    rup.push(ResponsesReply(text="done"))
    raw = _responses_body(14, context_management=[{"type": "compaction", "compact_threshold": threshold}])
    answer = _post(f"{p.base_url}/responses", api_key, raw)
    assert answer.status_code == 200, answer.text
    assert rup.last.body["context_management"] == [{"type": "compaction", "compact_threshold": threshold}]
    assert rup.compactions == [] and rup.last_reply.usage["input_tokens"] < threshold
    rup.push(ResponsesReply(text="done"))
    answer = _post(f"{p.base_url}/responses", api_key, _responses_body(14, context_management=[{"type": "compaction"}]))
    assert answer.status_code == 200, answer.text
    assert rup.last_reply.usage["input_tokens"] > threshold  # no threshold stated: the window's budget

    trigger = {"type": "input_tokens", "value": 50_000}  # the API's least
    management = {"edits": [{"type": "compact_20260112", "trigger": trigger}]}
    anthropic_upstream.push(AnthropicReply(text="done"))
    raw = _anthropic_body(110, context_management=management)
    answer = _post(f"{p.base_url}/messages", api_key, raw, **{"anthropic-beta": BETA})
    assert answer.status_code == 200, answer.text
    sent = anthropic_upstream.message_requests[-1]
    assert sent.body["context_management"] == management and len(sent.raw) < len(raw)
    assert anthropic_upstream.compactions == []
    assert json.loads(answer.text)["usage"]["input_tokens"] < trigger["value"]
