"""`summarizer.mode: native`: ctxproxy's own compaction done by the provider, through the real proxy
against the scripted Responses and Anthropic upstreams (which seal what they compact and refuse
an altered item or block, and count tokens their own way).

- Responses: the covered range goes to `/responses/compact`; the checkpoint holds the returned
  compaction item, which every later request carries exactly as the provider made it; ctxproxy's
  own summarizer is never called. A failing `/responses/compact` (the API's real 500) falls back to
  the own summarizer, and the failed call is recorded with its status.
- Anthropic: the covered range goes with a `compact_20260112` edit (the lowest trigger the API
  takes, 50,000 tokens) and `pause_after_compaction`; the checkpoint holds the compaction block's
  summary. A range below the provider's minimum is summarized by ctxproxy without a call the
  provider would answer instead of compacting; a failing call falls back the same way.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.anthropic_upstream import Reply as AnthropicReply
from tests.support.e2e import active_checkpoint
from tests.support.proxy_process import ADMIN_TOKEN
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, fcall

pytestmark = pytest.mark.slow

MODEL = "resp-native-1"
CLAUDE = "claude-native-1"
TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
OBJECTIVE = "Objective: migrate billing to the new queue. Never touch config/prod.yaml."
SMALL = {"context_window": 8000, "max_output_tokens": 500, "keep_recent_tokens": 1500}
LARGE = {
    "context_window": 160_000,
    "max_output_tokens": 2000,
    "trigger": 0.45,
    "late_trim": 0.45,  # compact from the trigger, not only once a request stops fitting
    "target": 0.2,
    "keep_recent_tokens": 4000,
    "summary_chunk_tokens": 120_000,
    "tool_results": {"exclude_tools": ["bash"]},  # untrimmed: the covered range passes the provider's minimum
}
SERVER_ERROR = {
    "error": {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}
ANTHROPIC_OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _proxy(proxy: Any, upstream_url: str, pattern: str, policy: dict[str, Any]) -> Any:
    route = {
        "name": "native",
        "match": {"model": pattern},
        "upstream": {"base_url": upstream_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
        "policy": "native",
    }
    return proxy(routes=[route], policies={"native": {**policy, "summarizer": {"mode": "native"}}})


def _own_summary(body: Any) -> bool:
    """A call of ctxproxy's own summarizer (its system prompt), not the agent's request."""
    system = body.get("instructions") or body.get("system") or "" if isinstance(body, dict) else ""
    return isinstance(system, str) and system.startswith("You compress the history")


def _output(step: int, lines: int) -> str:
    return "".join(f"step {step} line {k}: the quick brown fox jumps over the lazy dog\n" for k in range(lines))


def _responses_input(rounds: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": OBJECTIVE}]
    for step in range(rounds):
        call = {"type": "function_call", **fcall("bash", {"command": f"cat part{step}.txt"}, f"call_{step}")}
        items += [call, {"type": "function_call_output", "call_id": f"call_{step}", "output": _output(step, 40)}]
    return items


def _anthropic_messages(rounds: int, lines: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": OBJECTIVE}]
    for step in range(rounds):
        use = {"type": "tool_use", "id": f"toolu_{step}", "name": "bash", "input": {"cmd": f"cat part{step}.txt"}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{step}", "content": _output(step, lines)}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return messages


def _responses_run(p: Any, rup: ResponsesServer, api_key: str, rounds: range) -> str:
    client = p.client(api_key)
    conversation = ""
    tools = [{"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}}]
    # answers by what is asked (a queued answer could go to a summarizer call in the background)
    summary = ResponsesReply(text=f"## Goal\n{OBJECTIVE}\n## Progress\nread the parts")
    rup.responder = lambda body: summary if _own_summary(body) else ResponsesReply(text="done")
    for n in rounds:
        answer = client.responses.with_raw_response.create(model=MODEL, input=_responses_input(n), tools=tools)
        assert answer.parse().output_text == "done"
        conversation = answer.headers["x-conversation-id"]
    return conversation


def test_responses_checkpoints_hold_the_providers_compaction_item(proxy, rup, api_key):
    p = _proxy(proxy, rup.base_url, "resp-*", SMALL)
    conversation = _responses_run(p, rup, api_key, range(10, 70, 10))
    checkpoint = active_checkpoint(p, conversation)
    content = json.loads(checkpoint["summary"])
    made = [c for c in rup.compactions if c["via"] == "compact"]
    assert made and content["wire"] == "openai_responses" and content["text"] == ""
    kept = [i for m in content["messages"] for i in m["_responses"]["items"] if i["type"] == "compaction"]
    assert len(kept) == 1 and kept[0] in [c["item"] for c in made]

    # The next request carries the item exactly as the provider sealed it (an altered one is a 400).
    rup.responder = lambda body: ResponsesReply(text="after")
    client = p.client(api_key)
    tools = [{"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}}]
    answer = client.responses.create(model=MODEL, input=_responses_input(70), tools=tools)
    assert answer.output_text == "after"
    sent = rup.bodies[-1]["input"]
    carried = [i for i in sent if i.get("type") == "compaction"]  # the newest checkpoint's
    assert len(carried) == 1 and carried[0] in [c["item"] for c in rup.compactions]
    assert len(json.dumps(sent)) < len(json.dumps(_responses_input(70))) / 2
    assert not [b for b in rup.bodies if _own_summary(b)]  # the provider compacted; ctxproxy did not summarize

    calls = p.wait_calls(conversation, 1, until=lambda cs: any(c["purpose"] == "summary" for c in cs))
    compactions = [c for c in calls if c["purpose"] == "summary"]
    assert all(c["status"] == "complete" for c in compactions)
    assert sum(c["usage"]["input_total"] for c in compactions) == sum(
        c["input_tokens"] for c in rup.compactions if c["via"] == "compact"
    )
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    page = httpx.get(f"{p.url}/ui/conversations/{conversation}", headers=admin, timeout=10)
    assert "provider compaction, opaque" in page.text
    # the inspector rebuilds what was sent, the provider's compaction included, and finds it identical
    last = [c for c in calls if c["purpose"] == "main"][-1]
    view = httpx.get(f"{p.url}/ui/api/conversations/{conversation}/calls/{last['id']}", headers=admin, timeout=10)
    assert view.json()["verified"], view.json()["mismatches"]


def test_responses_compaction_failure_falls_back_to_the_own_summarizer(proxy, rup, api_key):
    p = _proxy(proxy, rup.base_url, "resp-*", SMALL)
    rup.compact_failure = (500, SERVER_ERROR)
    conversation = _responses_run(p, rup, api_key, range(10, 70, 10))
    checkpoint = active_checkpoint(p, conversation)
    assert not checkpoint["summary"].startswith("{")  # the own summarizer's text
    assert [b for b in rup.bodies if _own_summary(b)]
    calls = p.wait_calls(conversation, 1, until=lambda cs: any(c["upstream_status"] == 500 for c in cs))
    failed = [c for c in calls if c["purpose"] == "summary" and c["upstream_status"] == 500]
    assert failed and failed[0]["status"] == "error" and "server_error" in failed[0]["error"]
    assert not rup.compactions


def _anthropic_post(p: Any, api_key: str, rounds: int, lines: int) -> httpx.Response:
    tools = [{"name": "bash", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
    body = {"model": CLAUDE, "max_tokens": 300, "messages": _anthropic_messages(rounds, lines), "tools": tools}
    headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    return httpx.post(f"{p.base_url}/messages", content=json.dumps(body), headers=headers, timeout=120)


def _anthropic_run(
    p: Any, upstream: AnthropicUpstream, api_key: str, rounds: range, lines: int, failing: bool = False
) -> str:
    """`failing`: the provider answers a compaction request with its real 529 (overloaded)."""
    summary = AnthropicReply(text=f"## Goal\n{OBJECTIVE}\n## Progress\nread the parts")

    def answer_for(body: dict[str, Any]) -> AnthropicReply | None:
        if failing and "context_management" in body:
            return AnthropicReply(status=529, error=ANTHROPIC_OVERLOADED)
        return summary if _own_summary(body) else None

    upstream.responder = answer_for
    conversation = ""
    for n in rounds:
        answer = _anthropic_post(p, api_key, n, lines)
        assert answer.status_code == 200, answer.text
        conversation = answer.headers["x-conversation-id"]
    return conversation


def test_anthropic_checkpoints_hold_the_providers_summary(proxy, anthropic_upstream, api_key):
    anthropic_upstream.compactor = lambda messages: (
        f"## Goal\n{OBJECTIVE}\n(provider summary of {len(messages)} messages)"
    )
    p = _proxy(proxy, anthropic_upstream.url, "claude-*", LARGE)
    conversation = _anthropic_run(p, anthropic_upstream, api_key, range(90, 150, 20), 60)
    checkpoint = active_checkpoint(p, conversation)
    assert anthropic_upstream.compactions and anthropic_upstream.compactions[0]["paused"]
    assert checkpoint["summary"] == anthropic_upstream.compactions[-1]["summary"]
    native = [r for r in anthropic_upstream.message_requests if "context_management" in r.body]
    assert native[0].headers["anthropic-beta"] == "compact-2026-01-12"
    assert native[0].headers["anthropic-version"] == "2023-06-01"
    assert not [r for r in anthropic_upstream.message_requests if _own_summary(r.body)]

    answer = _anthropic_post(p, api_key, 150, 60)
    assert answer.status_code == 200, answer.text
    sent = anthropic_upstream.message_requests[-1].body
    assert any("provider summary of" in json.dumps(m) for m in sent["messages"])


def test_anthropic_below_the_minimum_or_failing_falls_back(proxy, anthropic_upstream, api_key):
    # Below the provider's 50,000-token minimum: ctxproxy summarizes without asking it.
    p = _proxy(proxy, anthropic_upstream.url, "claude-*", SMALL)
    conversation = _anthropic_run(p, anthropic_upstream, api_key, range(10, 70, 10), 40)
    assert active_checkpoint(p, conversation)["summary"].startswith("## Goal")
    assert not [r for r in anthropic_upstream.message_requests if "context_management" in r.body]
    assert [r for r in anthropic_upstream.message_requests if _own_summary(r.body)]

    # Above it, a provider error (its real 529 body) falls back too, and the call is recorded.
    anthropic_upstream.clear()
    p = _proxy(proxy, anthropic_upstream.url, "claude-*", LARGE)
    conversation = _anthropic_run(p, anthropic_upstream, api_key, range(90, 150, 20), 60, failing=True)
    assert active_checkpoint(p, conversation)["summary"].startswith("## Goal")
    assert [r for r in anthropic_upstream.message_requests if _own_summary(r.body)]
    assert not anthropic_upstream.compactions
    calls = p.wait_calls(conversation, 1, until=lambda cs: any(c["upstream_status"] == 529 for c in cs))
    assert [c for c in calls if c["purpose"] == "summary" and c["status"] == "error"]
