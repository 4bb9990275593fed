"""The OpenAI Responses API through the real proxy, with the real SDK (`client.responses.create`),
against a scripted Responses upstream that validates like the real API."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.e2e import asks_shared_summary, assert_openai_error
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, fcall
from tests.support.waiting import wait_until

MODEL = "resp-4o"
SMALL_MODEL = "resp-small"
WINDOW = 6000
SMALL_POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 500,
    "keep_recent_tokens": 1500,
    "summary_chunk_tokens": 2000,
    "overflow_wait": 20,
    "summarizer": {"timeout": 5, "max_attempts": 2},
}
INSTRUCTIONS = "You are a careful coding agent. Do not overwrite prod config."
OBJECTIVE = {"role": "user", "content": "Objective: migrate billing to the new queue. Never touch config/prod.yaml."}
SUMMARY = (
    "## Goal\nMigrate billing to the new queue.\n## Constraints\nnone\n## Decisions\nnone\n## Key facts\n"
    "none\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue."
)
TOOLS = [
    {
        "type": "function",
        "name": "bash",
        "description": "run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


@pytest.fixture(scope="session")
def responses_server() -> Iterator[ResponsesServer]:
    server = ResponsesServer(context_windows={SMALL_MODEL: WINDOW}).start()
    yield server
    server.stop()


@pytest.fixture
def rup(responses_server: ResponsesServer) -> Iterator[ResponsesServer]:
    responses_server.clear()
    yield responses_server
    responses_server.clear()


def routes(server: ResponsesServer) -> list[dict[str, Any]]:
    timeouts = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
    return [
        {
            "name": "responses",
            "match": {"model": "resp-*"},
            "upstream": {"base_url": server.base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts},
            "policy": "default",
        }
    ]


def is_summary(body: dict[str, Any]) -> bool:
    return str(body.get("instructions") or "").startswith("You compress the history") or asks_shared_summary(body)


def agent_bodies(server: ResponsesServer) -> list[dict[str, Any]]:
    return [b for b in server.bodies if not is_summary(b)]


def post(p: Any, api_key: str, body: Any, **kw: Any) -> httpx.Response:
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    return httpx.post(
        f"{p.base_url}/responses",
        content=content,
        timeout=30,
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
        **kw,
    )


def test_non_stream_forwarded_and_recorded(proxy, rup, api_key):
    p = proxy(routes=routes(rup))
    rup.push(
        ResponsesReply(text="hello there", cached_tokens=5, cache_write_tokens=2, reasoning_tokens=3, reasoning=True)
    )
    client = p.client(api_key)
    raw = client.responses.with_raw_response.create(model=MODEL, instructions=INSTRUCTIONS, input="hi", store=False)
    response = raw.parse()
    assert response.output_text == "hello there"
    conv = raw.headers["x-conversation-id"]
    sent = rup.last
    assert sent.path == "/v1/responses"
    assert sent.headers["authorization"] == "Bearer sk-upstream-secret-0123456789"
    key = sent.body.pop("prompt_cache_key")  # the conversation's (tests/e2e/test_cache_affinity.py)
    assert key.startswith("ctxproxy-")
    assert sent.body == {"model": MODEL, "instructions": INSTRUCTIONS, "input": "hi", "store": False}
    call = p.wait_calls(conv, 1)[0]
    usage = rup.last_reply.usage
    assert call["status"] == "complete" and call["finish_reason"] == "completed"
    assert call["usage_raw"] == usage
    assert call["usage"] == {
        "input_total": usage["input_tokens"],
        "input_uncached": usage["input_tokens"] - 7,
        "cache_read": 5,
        "cache_write": 2,
        "output": usage["output_tokens"],
        "reasoning": 3,
    }
    assert call["response"]["content"] == "hello there"
    events = p.events(conv)
    assert [e["message"]["role"] for e in events] == ["user", "assistant"]
    # the reasoning item travels with the assistant turn
    items = events[1]["message"]["_responses"]["items"]
    assert [i["type"] for i in items] == ["reasoning", "message"]


def test_stream_relayed_unchanged_and_recorded(proxy, rup, api_key):
    p = proxy(routes=routes(rup))
    rup.push(
        ResponsesReply(
            text="streamed answer here", calls=[fcall("bash", {"command": "ls"}, "call_s1")], cached_tokens=7, chunks=4
        )
    )
    client = p.client(api_key)
    with client.responses.with_streaming_response.create(
        model=MODEL, input=[OBJECTIVE], tools=TOOLS, stream=True
    ) as raw:
        conv = raw.headers["x-conversation-id"]
        lines = list(raw.iter_lines())
    sent = rup.last_reply.sent_events
    got = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
    kinds = [line[6:].strip() for line in lines if line.startswith("event:")]
    assert got == [data for _, data in sent]
    assert kinds == [kind for kind, _ in sent]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    call = p.wait_calls(conv, 1)[0]
    assert call["status"] == "complete" and call["stream"] is True
    assert call["usage_raw"] == rup.last_reply.usage and call["usage"]["cache_read"] == 7
    assert call["response"]["content"] == "streamed answer here"
    assert call["response"]["tool_calls"] == [
        {"id": "call_s1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    ]

    # the SDK's own streaming iterator works through the proxy too
    rup.push(ResponsesReply(text="second"))
    stream = client.responses.create(model=MODEL, input="again", stream=True)
    types = [event.type for event in stream]
    assert types[-1] == "response.completed"


@pytest.mark.parametrize("stream", [False, True])
def test_continuation_matches_stored_response(proxy, rup, api_key, stream):
    """The SDK re-sends output items as objects or as easy assistant messages: same conversation."""
    p = proxy(routes=routes(rup))
    client = p.client(api_key)

    def create(items: list[Any]) -> tuple[Any, str]:
        if stream:
            with client.responses.with_streaming_response.create(
                model=MODEL, instructions=INSTRUCTIONS, input=items, stream=True
            ) as raw:
                conv = raw.headers["x-conversation-id"]
                final = None
                for line in raw.iter_lines():
                    if line.startswith("data:") and '"response.completed"' in line:
                        final = openai.types.responses.Response.model_validate(json.loads(line[5:])["response"])
            return final, conv
        raw = client.responses.with_raw_response.create(model=MODEL, instructions=INSTRUCTIONS, input=items)
        return raw.parse(), raw.headers["x-conversation-id"]

    rup.push(ResponsesReply(text="first answer", reasoning=True))
    items: list[Any] = [{"role": "user", "content": "one"}]
    r1, conv = create(items)
    items += list(r1.output)  # SDK objects, re-serialized by the SDK
    items.append({"role": "user", "content": "two"})
    rup.push(ResponsesReply(text="second answer"))
    r2, conv2 = create(items)
    assert conv2 == conv
    items.append({"role": "assistant", "content": [{"type": "output_text", "text": r2.output_text}]})
    items.append({"role": "user", "content": "three"})
    _, conv3 = create(items)
    assert conv3 == conv
    roles = [e["message"]["role"] for e in p.events(conv)]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert [c["status"] for c in p.wait_calls(conv, 3)] == ["complete"] * 3


def test_long_function_call_session_small_window(proxy, rup, api_key, monkeypatch):
    """35 turns of function calls with big outputs at a 6k window: trimmed and summarized, the
    upstream (which validates pairing, reasoning order and the window) never rejects."""
    p = proxy(routes=routes(rup), policies={"default": SMALL_POLICY})
    turn = {"n": 0}

    def respond(body: dict[str, Any]) -> ResponsesReply:
        if is_summary(body):
            return ResponsesReply(text=SUMMARY)
        turn["n"] += 1
        n = turn["n"]
        if n % 3 != 0:
            calls = [fcall("bash", {"command": f"cat f_{n}_{k}.py"}, f"call_{n}_{k}") for k in range(1 + n % 2)]
            return ResponsesReply(calls=calls, reasoning=n % 2 == 0, text="checking" if n % 4 == 1 else None)
        return ResponsesReply(text=f"step {n} done", reasoning=True)

    rup.responder = respond
    client = p.client(api_key)
    items: list[Any] = [OBJECTIVE]
    convs = set()
    for i in range(36):
        request_items = list(items)
        raw = client.responses.with_raw_response.create(
            model=SMALL_MODEL, instructions=INSTRUCTIONS, input=request_items, tools=TOOLS, store=False
        )
        response = raw.parse()
        convs.add(raw.headers["x-conversation-id"])
        sent = agent_bodies(rup)[-1]
        assert sent["instructions"] == INSTRUCTIONS and sent["tools"][:-1] == TOOLS and sent["store"] is False
        assert sent["tools"][-1]["name"] == "ctxproxy_recall"  # recall is offered to a tool-using agent
        assert sent["input"][0] == OBJECTIVE, "the objective is pinned"
        items += list(response.output)
        calls = [o for o in response.output if o.type == "function_call"]
        if calls:
            for k, call in enumerate(calls):
                lines = 150 if (i + k) % 7 == 0 else 20
                body = "\n".join(f"{call.call_id} line {j}: result value {j * 7}" for j in range(lines))
                items.append({"type": "function_call_output", "call_id": call.call_id, "output": body})
        else:
            items.append({"role": "user", "content": f"turn {i}: continue with the next part"})
    assert rup.rejections == []
    assert len(convs) == 1
    conv = convs.pop()
    bodies = agent_bodies(rup)
    assert len(bodies) == 36
    calls = p.wait_calls(conv, 36, until=lambda cs: sum(c["purpose"] == "main" for c in cs) >= 36)
    main = [c for c in calls if c["purpose"] == "main"]
    assert all(c["status"] == "complete" for c in main)
    assert any((c["projection"] or {}).get("trimmed") for c in main), "no tool output was trimmed"
    checkpoints = wait_until(
        lambda: [c for c in p.admin_json(f"conversations/{conv}/checkpoints")["data"] if c["status"] == "active"],
        interval=0.1,
        what=f"an active checkpoint of {conv}",
    )
    assert any(c["status"] == "active" for c in checkpoints), checkpoints
    assert any(is_summary(b) for b in rup.bodies)
    summarized = [b for b in bodies if any("<conversation_summary" in json.dumps(x) for x in b["input"])]
    assert summarized, "no request carried the summary block"
    block = next(x for x in summarized[-1]["input"] if "<conversation_summary" in json.dumps(x))
    assert block["role"] == "user"
    # a trimmed output keeps its call_id and carries the marker
    assert any(
        re.search(r"\[trimmed: [^\]\n]* of bash, ", str(x.get("output")))
        for b in bodies
        for x in b["input"]
        if isinstance(x, dict) and x.get("type") == "function_call_output"
    )


def test_previous_response_id_passed_through(proxy, rup, api_key):
    p = proxy(routes=routes(rup), policies={"default": SMALL_POLICY})
    client = p.client(api_key)
    first = client.responses.create(model=MODEL, input="remember 42")
    body = {
        "model": MODEL,
        "previous_response_id": first.id,
        "input": [{"role": "user", "content": "what number?"}],
        "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    }
    raw = json.dumps(body, indent=1).encode()  # unusual spacing: forwarded byte for byte
    r = post(p, api_key, raw)
    assert r.status_code == 200, r.text
    assert rup.last.raw == raw  # context_management: the provider's to manage, not even a cache key added
    conv = r.headers["x-conversation-id"]
    call = p.wait_calls(conv, 1)[0]
    assert call["status"] == "complete"
    projection = call["projection"]  # counted, not projected: what was sent is what the client sent
    assert "sent" not in projection and projection["client_tokens"] == projection["sent_tokens"] > 0
    assert r.headers["x-ctxproxy-sent-tokens"] == str(projection["sent_tokens"])
    assert call["usage_raw"] == r.json()["usage"]
    assert [e["message"]["role"] for e in p.events(conv)] == ["user", "assistant"]


def test_ledger_equals_upstream_usage(proxy, rup, api_key):
    p = proxy(routes=routes(rup))
    client = p.client(api_key)
    items: list[Any] = [{"role": "user", "content": "count me"}]
    conv = None
    for k in range(4):
        rup.push(ResponsesReply(text=f"answer {k}", cached_tokens=10 * k, reasoning_tokens=k))
        if k % 2:
            with client.responses.with_streaming_response.create(model=MODEL, input=items, stream=True) as raw:
                conv = raw.headers["x-conversation-id"]
                lines = list(raw.iter_lines())
            final = next(json.loads(x[5:]) for x in lines if '"response.completed"' in x)["response"]
            items += final["output"]
        else:
            raw = client.responses.with_raw_response.create(model=MODEL, input=items)
            conv = raw.headers["x-conversation-id"]
            items += list(raw.parse().output)
        items.append({"role": "user", "content": f"more {k}"})
    calls = p.wait_calls(conv, 4)
    reported = [r.usage for r in rup.replies_sent]
    assert sum(c["usage"]["input_total"] for c in calls) == sum(u["input_tokens"] for u in reported)
    assert sum(c["usage"]["cache_read"] for c in calls) == sum(
        u["input_tokens_details"]["cached_tokens"] for u in reported
    )
    assert sum(c["usage"]["input_uncached"] for c in calls) == sum(
        u["input_tokens"] - u["input_tokens_details"]["cached_tokens"] for u in reported
    )
    assert sum(c["usage"]["output"] for c in calls) == sum(u["output_tokens"] for u in reported)
    assert sum(c["usage"]["reasoning"] for c in calls) == sum(
        u["output_tokens_details"]["reasoning_tokens"] for u in reported
    )


def test_disconnect_mid_stream_records_partial(proxy, rup, api_key):
    p = proxy(routes=routes(rup))
    hold = threading.Event()
    reply = ResponsesReply(text="a long answer that never finishes", hold=hold, hold_after_events=4)
    rup.push(reply)
    try:
        with httpx.stream(
            "POST",
            f"{p.base_url}/responses",
            json={"model": MODEL, "input": "go", "stream": True},
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=30,
        ) as r:
            conv = r.headers["x-conversation-id"]
            seen = 0
            for line in r.iter_lines():
                if line.startswith("data:"):
                    seen += 1
                if seen == 3:
                    break
    finally:
        time.sleep(0.3)
        hold.set()
    call = p.wait_calls(conv, 1, until=lambda cs: cs[0]["status"] != "pending")[0]
    assert call["status"] == "partial", call
    assert "disconnected" in call["error"]
    assert [e["message"]["role"] for e in p.events(conv)] == ["user"]


def test_upstream_drop_and_failed_response(proxy, rup, api_key):
    p = proxy(routes=routes(rup))
    rup.push(ResponsesReply(text="cut short", drop_after_events=3))
    with httpx.stream(
        "POST",
        f"{p.base_url}/responses",
        json={"model": MODEL, "input": "drop", "stream": True},
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=30,
    ) as r:
        conv = r.headers["x-conversation-id"]
        list(r.iter_lines())
    call = p.wait_calls(conv, 1)[0]
    assert call["status"] == "partial"

    rup.push(ResponsesReply(end="failed"))
    with httpx.stream(
        "POST",
        f"{p.base_url}/responses",
        json={"model": MODEL, "input": "fail", "stream": True},
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=30,
    ) as r:
        conv = r.headers["x-conversation-id"]
        lines = list(r.iter_lines())
    assert any(line == "event: response.failed" for line in lines)
    call = p.wait_calls(conv, 1)[0]
    assert call["status"] == "error" and "failed" in call["error"]
    assert call["finish_reason"] == "failed"

    rup.push(ResponsesReply(text="truncated", end="incomplete"))
    r = post(p, api_key, {"model": MODEL, "input": "incomplete", "stream": True})
    call = p.wait_calls(r.headers["x-conversation-id"], 1)[0]
    assert call["status"] == "complete" and call["finish_reason"] == "incomplete:max_output_tokens"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        ({"input": "no model"}, "model"),
        ({"model": MODEL, "input": 42}, "input"),
        ({"model": MODEL, "input": ["text"]}, "input[0]"),
        ({"model": MODEL, "input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
        ({"model": MODEL, "input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"model": MODEL, "input": "x", "stream": "yes"}, "stream"),
        ({"model": MODEL, "input": "x", "instructions": ["a"]}, "instructions"),
    ],
)
def test_bad_input_openai_errors(proxy, rup, api_key, body, param):
    p = proxy(routes=routes(rup))
    error = assert_openai_error(post(p, api_key, body), 400)
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    assert rup.requests == []


def test_unknown_model_and_upstream_errors(proxy, rup, api_key):
    p = proxy(routes=routes(rup))
    error = assert_openai_error(post(p, api_key, {"model": "nope-1", "input": "x"}), 404)
    assert error["code"] == "model_not_found"
    # an upstream 400 (output without its call, sent with previous_response_id: not rewritten) is relayed
    first = p.client(api_key).responses.create(model=MODEL, input="hello")
    r = post(
        p,
        api_key,
        {
            "model": MODEL,
            "previous_response_id": first.id,
            "input": [{"type": "function_call_output", "call_id": "call_missing", "output": "x"}],
        },
    )
    error = assert_openai_error(r, 400)
    assert "No tool call found for function call output with call_id call_missing" in error["message"]
    client = p.client(api_key)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input=[{"role": "wizard", "content": "x"}])
