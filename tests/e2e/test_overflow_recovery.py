"""An upstream that counts its own way: overflows are learned from and recovered, never relayed.

The scripted upstreams here count 45% more than ctxproxy's estimate (`counting="bias+45"`, far
more than the margin kept before a route has any bills), enforce their model's window with that
count, bill it, and answer an oversized request with their API's real overflow error. A client
request sent as is (it fits by ctxproxy's estimate) is refused by the upstream; ctxproxy reads
the provider's numbers, projects the request smaller and sends it again: the client sees one
ordinary answer, the records show the refused attempt, and the recall tool is not blamed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.proxy_process import UPSTREAM_KEY, ProxyProcess, subprocess_env
from tests.support.responses_upstream import ResponsesServer
from tests.support.upstream_server import Reply, UpstreamServer

pytestmark = pytest.mark.slow

WINDOW = 8_000
MODELS = {"openai_chat": "gpt-4o-own", "anthropic": "claude-own", "openai_responses": "resp-own"}
POLICY = {"context_window": WINDOW, "max_output_tokens": 1_000, "overflow_wait": 5}
RESULT = "\n".join(f"line {i}: the check passed for module {i} with nothing unusual found" for i in range(60))


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    windows = {model: WINDOW for model in MODELS.values()}
    chat = UpstreamServer(api_key=UPSTREAM_KEY, context_windows=windows, counting="bias+45")
    claude = AnthropicUpstream(api_key=UPSTREAM_KEY, context_windows=windows, counting="bias+45")
    resp = ResponsesServer(context_windows=windows, counting="bias+45")
    for server in (chat, claude, resp):
        server.start()
    yield {"openai_chat": chat, "anthropic": claude, "openai_responses": resp}
    for server in (chat, claude, resp):
        server.stop()


def start_proxy(servers: dict[str, Any], tmp_path: Path, policy: dict[str, Any]) -> ProxyProcess:
    timeouts = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}

    def route(name: str, wire: str, base_url: str, path: str | None = None) -> dict[str, Any]:
        match = {"model": MODELS[wire], **({"path": path} if path else {})}
        upstream = {"base_url": base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts}
        return {"name": name, "match": match, "upstream": upstream, "policy": "default"}

    config = {
        "admin_token_env": "CTXPROXY_ADMIN_TOKEN",
        "open_access": True,
        "routes": [
            route("claude", "anthropic", servers["anthropic"].url, "/v1/messages"),
            route("responses", "openai_responses", servers["openai_responses"].base_url),
            route("chat", "openai_chat", servers["openai_chat"].base_url),
        ],
        "policies": {"default": policy},
    }
    return ProxyProcess(config, tmp_path, subprocess_env()).start()


def send(p: ProxyProcess, wire: str, turns: int, key: str, tools: bool = True) -> tuple[str, str]:
    """One client request of `turns` tool turns (about 980 tokens each by our count) and a question;
    the answer's text and the conversation id."""
    model = MODELS[wire]
    if wire == "anthropic":
        claude = anthropic.Anthropic(base_url=p.url, api_key=key, max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Run the checks."}]
        for i in range(turns):
            use = {"type": "tool_use", "id": f"toolu_{i}", "name": "bash", "input": {"cmd": f"check {i}"}}
            messages.append({"role": "assistant", "content": [use]})
            result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"{i}: {RESULT}"}
            messages.append({"role": "user", "content": [result]})
        messages.append({"role": "assistant", "content": "All checks ran."})
        messages.append({"role": "user", "content": "Summarize the results."})
        claude_tools = [{"name": "bash", "description": "run", "input_schema": {"type": "object"}}]
        raw = claude.messages.with_raw_response.create(
            model=model, max_tokens=1_000, messages=messages, **({"tools": claude_tools} if tools else {})
        )
        text = "".join(b.text for b in raw.parse().content if b.type == "text")
        return text, raw.headers["x-conversation-id"]
    client = openai.OpenAI(base_url=p.base_url, api_key=key, max_retries=0)
    if wire == "openai_responses":
        items: list[dict[str, Any]] = [{"role": "user", "content": "Run the checks."}]
        for i in range(turns):
            args = json.dumps({"cmd": f"check {i}"})
            items.append({"type": "function_call", "call_id": f"call_{i}", "name": "bash", "arguments": args})
            items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": f"{i}: {RESULT}"})
        items.append({"role": "user", "content": "Summarize the results."})
        resp_tools = [{"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}}]
        raw_r = client.responses.with_raw_response.create(
            model=model, input=items, max_output_tokens=1_000, store=False, **({"tools": resp_tools} if tools else {})
        )
        return raw_r.parse().output_text, raw_r.headers["x-conversation-id"]
    chat: list[dict[str, Any]] = [{"role": "user", "content": "Run the checks."}]
    for i in range(turns):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
        chat.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"{i}: {RESULT}"})
    chat.append({"role": "user", "content": "Summarize the results."})
    chat_tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    raw_c = client.chat.completions.with_raw_response.create(
        model=model,
        messages=chat,
        max_tokens=1_000,
        **({"tools": chat_tools} if tools else {}),  # type: ignore[arg-type]
    )
    return raw_c.parse().choices[0].message.content or "", raw_c.headers["x-conversation-id"]


def main_requests(server: Any, wire: str) -> list[Any]:
    """The server's window checks of the client's requests (not the summarizer's)."""
    return [m for m in server.measured if m.model == MODELS[wire] and "<history first=" not in json.dumps(m.request)]


def calls(p: ProxyProcess, conversation: str) -> list[dict[str, Any]]:
    return p.admin_json(f"/conversations/{conversation}/calls")["data"]


def metric(p: ProxyProcess, name: str, **labels: str) -> float:
    text = httpx.get(p.url + "/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("wire", list(MODELS))
def test_an_overflow_is_projected_smaller_and_sent_again(servers, tmp_path, wire):
    server = servers[wire]
    server.clear()
    p = start_proxy(servers, tmp_path, POLICY)
    try:
        text, conversation = send(p, wire, turns=5, key=f"sk-{uuid.uuid4().hex}")
        assert text  # one ordinary answer
        checked = main_requests(server, wire)
        assert checked[0].over and checked[0].error is not None  # sent as is, refused by the upstream's count
        assert not checked[-1].over and 2 <= len(checked) <= 3  # projected smaller until it fit
        records = calls(p, conversation)
        refused = [c for c in records if c["purpose"] == "overflow"]
        (answered,) = [c for c in records if c["purpose"] == "main"]
        assert len(refused) == len(checked) - 1 and all(c["upstream_status"] == 400 for c in refused)
        assert refused[0]["projection"]["attempt"] == 1
        assert answered["status"] == "complete" and answered["projection"]["attempt"] == len(checked)
        assert answered["projection"]["trimmed"] or answered["projection"]["covered_through_seq"]
        assert metric(p, "ctxproxy_upstream_overflows_total", purpose="main", outcome="retried") == len(refused)
        if wire != "openai_responses":  # its error names no numbers
            assert refused[0]["projection"]["overflow"]["input_tokens"] == checked[0].counted
        # the next request carries what was learned: no overflow
        before = len(main_requests(server, wire))
        send(p, wire, turns=9, key=f"sk-{uuid.uuid4().hex}")
        assert not any(m.over for m in main_requests(server, wire)[before:])
        learned = {row["route"]: row for row in p.admin_json("/estimates")["data"]}
        assert any(row["samples"] >= 1 for row in learned.values())
    finally:
        p.stop()


def test_a_route_that_does_not_rewrite_relays_the_overflow(servers, tmp_path):
    server = servers["openai_chat"]
    server.clear()
    p = start_proxy(servers, tmp_path, {**POLICY, "rewrite": False})
    try:
        with pytest.raises(openai.BadRequestError) as caught:
            send(p, "openai_chat", turns=5, key=f"sk-{uuid.uuid4().hex}")
        assert caught.value.code == "context_length_exceeded"
        assert "maximum context length is 8000 tokens" in caught.value.message
        assert len(server.measured) == 1
        assert metric(p, "ctxproxy_upstream_overflows_total", purpose="main", outcome="relayed") == 1
    finally:
        p.stop()


def test_an_overflow_never_marks_the_recall_tool_rejected(servers, tmp_path):
    server = servers["openai_chat"]
    server.clear()
    p = start_proxy(servers, tmp_path, {**POLICY, "recall": {"enabled": True}})
    try:
        send(p, "openai_chat", turns=5, key=f"sk-{uuid.uuid4().hex}")
        checked = main_requests(server, "openai_chat")
        assert checked[0].over and not checked[-1].over
        assert all("ctxproxy_recall" in json.dumps(m.request.get("tools")) for m in checked)
        assert p.admin_json("/recall/rejected")["data"] == []
        before = len(main_requests(server, "openai_chat"))
        send(p, "openai_chat", turns=2, key=f"sk-{uuid.uuid4().hex}")
        assert "ctxproxy_recall" in json.dumps(main_requests(server, "openai_chat")[before].request.get("tools"))
        assert metric(p, "ctxproxy_recall_rejected") == 0
    finally:
        p.stop()


# OpenAI's answer to a tool of a type it does not know (the provider's own body).
UNKNOWN_TOOL = {
    "error": {
        "message": "Invalid value: 'retrieval'. Supported values are: 'function' and 'custom'.",
        "type": "invalid_request_error",
        "param": "tools[1].type",
        "code": "invalid_value",
    }
}


def test_a_tool_rejection_marks_recall_until_the_mark_expires(servers, tmp_path):
    server = servers["openai_chat"]
    server.clear()
    rejecting = [True]

    def respond(body: dict[str, Any]) -> Reply | None:
        if rejecting[0] and "ctxproxy_recall" in json.dumps(body.get("tools")):
            return Reply(status=400, error_body=UNKNOWN_TOOL)
        return None

    server.responder = respond
    policy = {**POLICY, "recall": {"enabled": True, "rejected_seconds": 2}}
    p = start_proxy(servers, tmp_path, policy)
    try:
        assert send(p, "openai_chat", turns=1, key=f"sk-{uuid.uuid4().hex}")[0]  # answered without the tool
        (mark,) = p.admin_json("/recall/rejected")["data"]
        assert mark["route"] == "chat" and mark["reason"].startswith("a tool or schema rejection")
        assert 0 < mark["expires_in"] <= 2
        assert metric(p, "ctxproxy_recall_rejected", route="chat") == 1
        before = len(server.requests)
        send(p, "openai_chat", turns=1, key=f"sk-{uuid.uuid4().hex}")
        assert len(server.requests) == before + 1  # no tool, no second 400
        assert "ctxproxy_recall" not in json.dumps(server.requests[-1].body.get("tools"))
        time.sleep(2.2)
        rejecting[0] = False
        send(p, "openai_chat", turns=1, key=f"sk-{uuid.uuid4().hex}")
        assert "ctxproxy_recall" in json.dumps(server.requests[-1].body.get("tools"))  # offered again
        assert p.admin_json("/recall/rejected")["data"] == []
    finally:
        server.responder = None
        p.stop()


def test_a_stream_that_fails_with_an_overflow_before_its_answer_is_sent_again(servers, tmp_path):
    """The Responses API may refuse an oversized streamed request inside a 200 stream:
    `response.created`, then `response.failed` with `context_length_exceeded`. Nothing of it
    reaches the client: the request is projected smaller and sent again, and the client's stream
    is the retry's."""
    server = servers["openai_responses"]
    server.clear()
    server.overflow_in_stream = True
    p = start_proxy(servers, tmp_path, POLICY)
    try:
        client = openai.OpenAI(base_url=p.base_url, api_key=f"sk-{uuid.uuid4().hex}", max_retries=0)
        items: list[dict[str, Any]] = [{"role": "user", "content": "Run the checks."}]
        for i in range(5):
            args = json.dumps({"cmd": f"check {i}"})
            items.append({"type": "function_call", "call_id": f"call_{i}", "name": "bash", "arguments": args})
            items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": f"{i}: {RESULT}"})
        items.append({"role": "user", "content": "Summarize the results."})
        kinds, text = [], ""
        with client.responses.create(
            model=MODELS["openai_responses"], input=items, max_output_tokens=1_000, store=False, stream=True
        ) as stream:
            for event in stream:
                kinds.append(event.type)
                if event.type == "response.output_text.delta":
                    text += event.delta
        assert text and kinds[-1] == "response.completed" and "response.failed" not in kinds
        checked = main_requests(server, "openai_responses")
        assert checked[0].over and not checked[-1].over
        (conversation,) = p.admin_json("conversations")["data"]
        records = calls(p, conversation["id"])
        refused = [c for c in records if c["purpose"] == "overflow"]
        assert refused and refused[0]["upstream_status"] == 200 and "context_length_exceeded" in refused[0]["error"]
        assert [c["status"] for c in records if c["purpose"] == "main"] == ["complete"]
    finally:
        server.overflow_in_stream = False
        p.stop()
