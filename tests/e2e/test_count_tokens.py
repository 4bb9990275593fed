"""count_tokens answers for the projection: the real `anthropic` and `openai` SDKs -> the real
proxy -> scripted upstreams that count their own way (tests/support/counting.py).

A long conversation far over a small window is counted as ctxproxy would send it (its summary and
raw tail), within the window and within 3% of what the upstream then bills for the same body
sent as a model call; the count stores, forks and compacts nothing. The usage the client gets
from a rewritten call on each of the three wires is the projection's bill, not its history's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.agents.harness import wait_idle
from tests.support.anthropic_upstream import AnthropicUpstream, Reply, estimate_tokens
from tests.support.e2e import stored_snapshot
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, count_input_tokens
from tests.support.upstream_server import UpstreamServer, count_prompt_tokens

pytestmark = pytest.mark.slow

MODEL = "claude-count-1"
WINDOW = 8000
OUTPUT = 1000
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": OUTPUT,
    "keep_recent_tokens": 1500,
    "summary_chunk_tokens": 2000,
    "overflow_wait": 30,
    "summarizer": {"timeout": 10, "max_attempts": 2},
}
SUMMARY = (
    "## Goal\nAudit the inventory files.\n## Constraints\nnone\n## Decisions\nnone\n## Key facts\n"
    "none\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nRead the next file."
)
TOOLS = [
    {
        "name": "bash",
        "description": "Run a shell command and return its output.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    }
]
SYSTEM = "You are a careful auditor. Read every file you are asked about."
GROUPS = 40


def _responder(body: dict[str, Any]) -> Reply:
    system = body.get("system")
    if isinstance(system, str) and system.startswith("You compress the history"):
        return Reply(text=SUMMARY)
    return Reply(text="Noted; the next file, please.")


@pytest.fixture
def counting_upstream() -> Iterator[AnthropicUpstream]:
    """Counts like Claude might: another encoding, other framing, 15% more than tiktoken o200k."""
    server = AnthropicUpstream(api_key=UPSTREAM_KEY, counting="claude-like")
    server.responder = _responder
    server.start()
    yield server
    server.stop()


def _route(server: AnthropicUpstream) -> dict[str, Any]:
    return {
        "name": "claude",
        "match": {"model": "claude-*", "path": "/v1/messages"},
        "upstream": {"base_url": server.url, "api_key_env": "UPSTREAM_KEY"},
        "policy": "small",
    }


def _history(groups: int) -> list[dict[str, Any]]:
    """A user request, then `groups` tool calls with a ~450-token result each."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Audit every inventory file, one at a time."}]
    for i in range(groups):
        rows = "".join(f"file {i} row {r:03d}: item {r * 7 + i}, quantity {r % 13}, shelf {r % 5}\n" for r in range(30))
        use_id = f"toolu_{i:04d}"
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": use_id, "name": "bash", "input": {"command": f"cat f{i}.txt"}}],
            }
        )
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": use_id, "content": rows}]})
    return messages


def _billed(usage: Any) -> int:
    return int(usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0))


def test_count_tokens_is_the_projection(proxy, counting_upstream, api_key):
    p = proxy(fresh=True, routes=[_route(counting_upstream)], policies={"small": POLICY})
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=60)
    history = _history(GROUPS)
    args: dict[str, Any] = {"model": MODEL, "system": SYSTEM, "tools": TOOLS}
    # the agent holds this history; the proxy answered it within the window (summary + tail)
    answer = client.messages.create(max_tokens=OUTPUT, messages=history, **args)
    history.append({"role": "assistant", "content": answer.content[0].text})  # type: ignore[union-attr]
    wait_idle(p, timeout=60)
    whole = httpx.post(
        f"{counting_upstream.url}/v1/messages/count_tokens",
        headers={"x-api-key": UPSTREAM_KEY, "anthropic-version": "2023-06-01"},
        json={"messages": history, **args},
        timeout=30,
    ).json()["input_tokens"]
    assert whole > 3 * WINDOW, whole

    rows: list[tuple[str, int, int, str]] = []
    for step in range(3):
        notes = " ".join(f"note {step}.{n}: shelf {n % 5} holds item {n * 11}." for n in range(40))
        history.append({"role": "user", "content": f"Batch {step} notes: {notes} Continue."})
        before = stored_snapshot(p)
        counted = client.messages.with_raw_response.count_tokens(messages=history, **args)
        assert stored_snapshot(p) == before, "count_tokens changed the stored history"
        tokens = counted.parse().input_tokens
        source = counted.headers["x-ctxproxy-count"]
        answer = client.messages.create(max_tokens=OUTPUT, messages=history, **args)
        billed = _billed(answer.usage)
        rows.append((source, tokens, billed, f"{abs(tokens - billed) / billed:.2%}"))
        history.append({"role": "assistant", "content": answer.content[0].text})  # type: ignore[union-attr]
        wait_idle(p, timeout=60)
    print(f"[count_tokens] whole history {whole}; (source, count, billed, error): {rows}")
    for _source, tokens, billed, _ in rows:
        assert tokens <= WINDOW - OUTPUT, rows
        assert abs(tokens - billed) <= 0.03 * billed, rows
    assert "carried" in {source for source, *_ in rows}, rows


# --------------------------------------------------------------------------- the Responses API


def _responses_proxy(proxy: Any, server: ResponsesServer) -> Any:
    """A private proxy whose `resp-*` route goes to `server` under the small policy."""
    route = {
        "name": "responses",
        "match": {"model": "resp-*", "path": "/v1/responses"},
        "upstream": {"base_url": server.base_url, "api_key_env": "UPSTREAM_KEY"},
        "policy": "small",
    }
    return proxy(fresh=True, routes=[route], policies={"small": POLICY})


def _responses_summary(body: dict[str, Any]) -> ResponsesReply:
    if str(body.get("instructions") or "").startswith("You compress the history"):
        return ResponsesReply(text=SUMMARY)
    return ResponsesReply(text="Noted; the next file, please.")


def _responses_history(groups: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Audit every inventory file, one at a time."}]
    for i in range(groups):
        rows = "".join(f"file {i} row {r:03d}: item {r * 7 + i}, quantity {r % 13}, shelf {r % 5}\n" for r in range(30))
        call = f"call_{i:04d}"
        items.append({"type": "function_call", "call_id": call, "name": "bash", "arguments": json.dumps({"n": i})})
        items.append({"type": "function_call_output", "call_id": call, "output": rows})
    return items


FUNCTION_TOOLS = [
    {
        "type": "function",
        "name": "bash",
        "description": "Run a shell command and return its output.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
    }
]


def test_responses_input_tokens_is_the_projection(proxy, api_key):
    server = ResponsesServer(counting="framing").start()
    server.responder = _responses_summary
    try:
        p = _responses_proxy(proxy, server)
        client = p.client(api_key)
        args: dict[str, Any] = {"model": "resp-count", "instructions": SYSTEM, "tools": FUNCTION_TOOLS, "store": False}
        history = _responses_history(GROUPS)
        answer = client.responses.create(input=history, max_output_tokens=OUTPUT, **args)
        history.append({"role": "assistant", "content": answer.output_text})
        wait_idle(p, timeout=60)
        whole = count_input_tokens(SYSTEM, history, FUNCTION_TOOLS, server.counting)
        rows = []
        for step in range(2):
            history.append({"role": "user", "content": f"Batch {step} is done. Continue."})
            before = stored_snapshot(p)
            counted = client.responses.input_tokens.count(input=history, **{k: args[k] for k in args if k != "store"})
            assert stored_snapshot(p) == before, "input_tokens changed the stored history"
            assert counted.object == "response.input_tokens"
            answer = client.responses.create(input=history, max_output_tokens=OUTPUT, **args)
            billed = answer.usage.input_tokens if answer.usage else 0
            rows.append((counted.input_tokens, billed))
            history.append({"role": "assistant", "content": answer.output_text})
            wait_idle(p, timeout=60)
        print(f"[input_tokens] whole history {whole}; (count, billed): {rows}")
        assert whole > 2 * WINDOW, whole
        for tokens, billed in rows:
            assert tokens <= WINDOW - OUTPUT and abs(tokens - billed) <= 0.03 * billed, rows
    finally:
        server.stop()


# --------------------------------------------------------------------------- usage on every wire


def test_usage_describes_the_projection_on_every_wire(proxy, api_key):
    """A rewritten call's usage is what the upstream billed for the projection it was sent: far
    below the history the client holds, on chat completions, Responses and Messages alike."""
    chat = UpstreamServer(counting="framing")
    chat.start()
    responses = ResponsesServer(counting="framing").start()
    responses.responder = _responses_summary
    claude = AnthropicUpstream(api_key=UPSTREAM_KEY, counting="claude-like")
    claude.responder = _responder
    claude.start()
    try:

        def route(name: str, model: str, path: str, base_url: str) -> dict[str, Any]:
            upstream = {"base_url": base_url, "api_key_env": "UPSTREAM_KEY"}
            return {"name": name, "match": {"model": model, "path": path}, "upstream": upstream, "policy": "small"}

        routes = [
            route("chat", "gpt-*", "/v1/chat/completions", chat.base_url),
            route("responses", "resp-*", "/v1/responses", responses.base_url),
            route("claude", "claude-*", "/v1/messages", claude.url),
        ]
        p = proxy(fresh=True, routes=routes, policies={"small": POLICY})
        numbers = {}

        openai_messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        openai_messages.append({"role": "user", "content": "Audit every inventory file, one at a time."})
        for i in range(GROUPS):
            rows = "".join(f"file {i} row {r:03d}: item {r * 7 + i}, quantity {r % 13}\n" for r in range(30))
            call = {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            openai_messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            openai_messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": rows})
        completion = p.client(api_key).chat.completions.create(
            model="gpt-count", messages=openai_messages, max_tokens=OUTPUT
        )
        assert completion.usage is not None
        numbers["chat"] = (
            completion.usage.prompt_tokens,
            chat.replies_sent[-1].sent_usage["prompt_tokens"],  # type: ignore[index]
            count_prompt_tokens({"messages": openai_messages}, chat.counting),
        )

        history = _responses_history(GROUPS)
        answer = p.client(api_key).responses.create(
            model="resp-count", instructions=SYSTEM, input=history, max_output_tokens=OUTPUT, store=False
        )
        assert answer.usage is not None
        numbers["responses"] = (
            answer.usage.input_tokens,
            responses.replies_sent[-1].usage["input_tokens"],  # type: ignore[index]
            count_input_tokens(SYSTEM, history, None, responses.counting),
        )

        messages = _history(GROUPS)
        client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=60)
        message = client.messages.create(model=MODEL, system=SYSTEM, max_tokens=OUTPUT, messages=messages)
        numbers["messages"] = (
            _billed(message.usage),
            _billed_raw(claude.replies_sent[-1].usage),
            claude.counting.scaled(estimate_tokens({"system": SYSTEM, "messages": messages}, claude.counting), 1.0),
        )
        print(f"[usage] (client's usage, upstream's bill, the history's count) per wire: {numbers}")
        for wire, (usage, billed, history_tokens) in numbers.items():
            assert usage == billed, (wire, numbers)
            assert usage <= WINDOW - OUTPUT < 2 * WINDOW < history_tokens, (wire, numbers)
    finally:
        chat.stop()
        responses.stop()
        claude.stop()


def _billed_raw(usage: Any) -> int:
    return int(usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"])


# --------------------------------------------------------------------------- fallbacks


def test_input_tokens_falls_back_to_the_estimate_and_relays_what_it_may_not_rewrite(proxy, api_key):
    """An upstream without the counting endpoint (a scripted Responses server answering it 404):
    the prediction answers. A body the wire may not rewrite (`previous_response_id`) goes to
    the upstream's endpoint as it is, and its answer (here the 404, in OpenAI's shape) is relayed."""
    server = ResponsesServer()
    server.paths = tuple(path for path in server.paths if not path.endswith("/input_tokens"))
    server.start()
    try:
        p = _responses_proxy(proxy, server)
        client = p.client(api_key)
        items = [{"role": "user", "content": "How many tokens is this question, roughly?"}]
        raw = client.responses.input_tokens.with_raw_response.count(
            model="resp-count", instructions=SYSTEM, input=items
        )
        counted = raw.parse()
        exact = count_input_tokens(SYSTEM, items, None, server.counting)
        assert raw.headers["x-ctxproxy-count"] == "estimated"
        assert counted.object == "response.input_tokens" and abs(counted.input_tokens - exact) <= 0.05 * exact
        assert [r.path for r in server.requests] == ["/v1/responses/input_tokens"]
        relayed = httpx.post(
            f"{p.base_url}/responses/input_tokens",
            json={"model": "resp-count", "input": items, "previous_response_id": "resp_1"},
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=30,
        )
        assert relayed.status_code == 404 and "error" in relayed.json(), relayed.text
        assert "x-ctxproxy-count" not in relayed.headers
        assert p.admin_json("conversations")["data"] == []
    finally:
        server.stop()
