"""Per-request control and visibility (`proxy/modes.py`), through the real openai and anthropic
SDKs against the scripted upstreams: `X-Ctxproxy-Mode: passthrough | observe` sends the client's
request as it came (the upstream gets the client's bytes and no `X-Ctxproxy-*` header) while the
call is recorded like any other, with its mode; every answer of the three APIs, streamed or not,
errors included, carries the `X-Ctxproxy-*` headers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.e2e import assert_openai_error, user
from tests.support.proxy_process import ADMIN_TOKEN, UPSTREAM_KEY
from tests.support.responses_upstream import ResponsesServer
from tests.support.upstream_server import Reply

pytestmark = pytest.mark.slow

MODE = "X-Ctxproxy-Mode"
# A window small enough that the history below is rewritten (its old tool result trimmed), while
# the upstream's own window takes it whole.
SMALL = {"context_window": 3000, "max_output_tokens": 500}
TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}


def history(tag: str) -> list[dict[str, Any]]:
    """An agent history whose old tool result is too long for `SMALL`'s window."""
    call = {"id": f"call_{tag}", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}
    return [
        {"role": "system", "content": "You are a coding agent."},
        user(f"objective {tag}: list the repository"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{tag}", "content": "file.py\n" * 1500},
        {"role": "assistant", "content": "There are many files."},
        user("which one is newest?"),
    ]


def own_headers(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-ctxproxy-")}


def assert_nothing_of_ours_upstream(requests: list[Any]) -> None:
    for request in requests:
        assert not [h for h in request.headers if h.startswith("x-ctxproxy-")], request.headers


def test_passthrough_sends_the_clients_bytes_and_records_the_call(proxy, upstream, api_key):
    p = proxy(policies={"default": SMALL})
    # Unusual spacing: a body the proxy re-encoded would not be these bytes.
    raw = json.dumps({"model": "gpt-4o", "messages": history("pass")}, indent=2).encode()
    upstream.push(Reply(content="file.py"))
    r = p.post_chat(api_key, raw, headers={MODE: "passthrough"})
    assert r.status_code == 200, r.text
    sent = upstream.last_chat
    assert sent.raw == raw
    assert_nothing_of_ours_upstream([sent])
    ours = own_headers(r.headers)
    assert ours["x-ctxproxy-mode"] == "passthrough"
    assert ours["x-ctxproxy-client-tokens"] == ours["x-ctxproxy-sent-tokens"]
    assert int(ours["x-ctxproxy-client-tokens"]) > 3000  # more than the policy's window: not rewritten
    assert ours["x-ctxproxy-checkpoint"] == "none"
    conv = ours["x-ctxproxy-conversation"]
    assert conv.startswith("c_") and r.headers["x-conversation-id"] == conv

    call = p.wait_calls(conv, 1)[0]
    assert call["status"] == "complete" and call["branch_id"] == ours["x-ctxproxy-branch"]
    assert call["projection"]["mode"] == "passthrough"
    assert call["projection"]["client_tokens"] == int(ours["x-ctxproxy-client-tokens"])
    assert "observed" not in call["projection"]
    assert call["usage"]["input_total"] == r.json()["usage"]["prompt_tokens"]
    assert [e["message"]["role"] for e in p.events(conv)][-2:] == ["user", "assistant"]
    ledger = p.admin_json("usage", params={"conversation": conv})["totals"]
    assert ledger["calls"] == 1 and ledger["input_total"] == call["usage"]["input_total"]
    metrics = httpx.get(f"{p.url}/metrics", timeout=10).text
    assert 'ctxproxy_mode_requests_total{route="main",mode="passthrough"}' in metrics


def test_the_same_history_rewritten_observed_and_streamed(proxy, upstream, api_key):
    p = proxy(policies={"default": SMALL})
    client = p.client(api_key)
    messages = history("obs")

    # Rewritten (no mode): fewer tokens sent than the client's.
    r = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
    ours = own_headers(r.headers)
    assert "x-ctxproxy-mode" not in ours
    assert int(ours["x-ctxproxy-sent-tokens"]) < int(ours["x-ctxproxy-client-tokens"])
    rewritten = ours

    # Observed: the client's request goes upstream; the record keeps what would have been sent.
    r = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, extra_headers={MODE: "observe"}
    )
    ours = own_headers(r.headers)
    assert ours["x-ctxproxy-mode"] == "observe"
    assert ours["x-ctxproxy-sent-tokens"] == ours["x-ctxproxy-client-tokens"] == rewritten["x-ctxproxy-client-tokens"]
    assert ours["x-ctxproxy-conversation"] == rewritten["x-ctxproxy-conversation"]
    assert upstream.last_chat.body["messages"] == messages  # not trimmed
    assert_nothing_of_ours_upstream(upstream.chat_requests)
    calls = p.wait_calls(ours["x-ctxproxy-conversation"], 2)
    observed = calls[-1]["projection"]
    assert observed["mode"] == "observe"
    assert observed["sent_tokens"] == observed["client_tokens"]
    assert observed["observed"]["sent_tokens"] == int(rewritten["x-ctxproxy-sent-tokens"])
    assert observed["observed"]["trimmed"] >= 1
    # The inspector's diff of the observed call: the client's request beside what would have gone.
    conv, call_id = ours["x-ctxproxy-conversation"], calls[-1]["id"]
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    view = httpx.get(f"{p.url}/ui/api/conversations/{conv}/calls/{call_id}", headers=admin, timeout=10).json()
    assert view["verified"], view["mismatches"]
    assert view["counts"].get("trimmed", 0) >= 1
    page = httpx.get(f"{p.url}/ui/conversations/{conv}/calls/{call_id}", headers=admin, timeout=10)
    assert 'id="observed"' in page.text and "Would have gone upstream" in page.text

    # Streamed, observed: the headers come with the stream; the client asked for usage, so the
    # upstream gets its bytes as they are.
    body = {"model": "gpt-4o", "messages": messages, "stream": True, "stream_options": {"include_usage": True}}
    raw = json.dumps(body).encode()
    upstream.push(Reply(content="newest.py"))
    with httpx.stream(
        "POST",
        f"{p.base_url}/chat/completions",
        content=raw,
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json", MODE: "observe"},
        timeout=30,
    ) as streamed:
        ours = own_headers(streamed.headers)
        text = streamed.read().decode()
    assert "newest.py" in "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in text.splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    assert upstream.last_chat.raw == raw
    assert ours["x-ctxproxy-mode"] == "observe" and ours["x-ctxproxy-checkpoint"] == "none"
    calls = p.wait_calls(ours["x-ctxproxy-conversation"], 3)
    assert calls[-1]["status"] == "complete" and calls[-1]["usage"]["input_total"]


def test_streamed_passthrough_without_usage_is_still_billed(proxy, upstream, api_key):
    p = proxy()
    client = p.client(api_key)
    r = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[user("stream me")], stream=True, extra_headers={MODE: "passthrough"}
    )
    ours = own_headers(r.headers)
    chunks = list(r.parse())
    assert all(c.usage is None for c in chunks)  # the client did not ask for it: not shown
    sent = upstream.last_chat.body
    assert sent["stream_options"] == {"include_usage": True}  # asked upstream, so the ledger has it
    assert {k: v for k, v in sent.items() if k != "stream_options"} == {
        "model": "gpt-4o",
        "messages": [user("stream me")],
        "stream": True,
    }
    call = p.wait_calls(ours["x-ctxproxy-conversation"], 1)[0]
    assert call["projection"]["mode"] == "passthrough" and call["usage"]["input_total"]


def test_a_mode_not_allowed_or_unknown_is_a_400_and_nothing_is_stored(proxy, upstream, api_key):
    p = proxy(policies={"default": {"modes": ["observe"]}})
    before = len(upstream.chat_requests)
    conversations = len(p.admin_json("conversations", params={"limit": 100})["data"])
    for value, code in (("passthrough", "mode_not_allowed"), ("bypass", "invalid_mode")):
        r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("refused")]}, headers={MODE: value})
        error = assert_openai_error(r, 400)
        assert error["code"] == code and error["param"] == MODE
        assert "x-ctxproxy-conversation" not in r.headers
    assert len(upstream.chat_requests) == before
    assert len(p.admin_json("conversations", params={"limit": 100})["data"]) == conversations


def test_error_answers_name_the_conversation(proxy, upstream, api_key):
    p = proxy()
    upstream.push(Reply(status=429))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("rate limited")]})
    assert r.status_code == 429
    ours = own_headers(r.headers)
    assert ours["x-ctxproxy-conversation"].startswith("c_") and ours["x-ctxproxy-branch"]
    assert int(ours["x-ctxproxy-client-tokens"]) > 0


# ---- the Anthropic Messages and OpenAI Responses APIs


@pytest.fixture
def responses_up() -> Iterator[ResponsesServer]:
    server = ResponsesServer().start()
    yield server
    server.stop()


def _route(name: str, model: str, base_url: str, path: str) -> dict[str, Any]:
    upstream = {"base_url": base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS}
    return {"name": name, "match": {"model": model, "path": path}, "upstream": upstream, "policy": "default"}


def test_anthropic_modes_and_headers(proxy, anthropic_upstream: AnthropicUpstream, api_key):
    route = _route("claude", "claude-*", anthropic_upstream.url, "/v1/messages")
    p = proxy(routes=[route], policies={"default": {"modes": ["observe"]}})
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=30)
    messages = [{"role": "user", "content": "hello claude"}]

    r = client.messages.with_raw_response.create(model="claude-test-1", max_tokens=100, messages=messages)
    ours = own_headers(r.headers)
    assert set(ours) >= {
        "x-ctxproxy-conversation",
        "x-ctxproxy-branch",
        "x-ctxproxy-client-tokens",
        "x-ctxproxy-sent-tokens",
        "x-ctxproxy-checkpoint",
    }

    with client.messages.with_streaming_response.create(
        model="claude-test-1",
        max_tokens=100,
        messages=messages,
        stream=True,
        extra_headers={MODE: "observe"},
    ) as streamed:
        ours = own_headers(streamed.headers)
        streamed.read()
    assert ours["x-ctxproxy-mode"] == "observe"
    sent = anthropic_upstream.message_requests[-1]
    assert sent.body["messages"] == messages
    assert_nothing_of_ours_upstream(anthropic_upstream.message_requests)
    calls = p.wait_calls(ours["x-ctxproxy-conversation"], 2)
    assert calls[-1]["projection"]["mode"] == "observe" and calls[-1]["usage"]["input_total"]

    # Not allowed on this route: a 400 in Anthropic's own error shape.
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="claude-test-1", max_tokens=100, messages=messages, extra_headers={MODE: "passthrough"}
        )
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "not allowed on route claude" in refused.value.body["error"]["message"]


def test_responses_modes_and_headers(proxy, responses_up: ResponsesServer, api_key):
    route = _route("responses", "resp-*", responses_up.base_url, "/v1/responses")
    p = proxy(routes=[route])
    client = p.client(api_key)

    raw = json.dumps({"model": "resp-4o", "input": "hello responses"}, indent=3).encode()
    r = httpx.post(
        f"{p.base_url}/responses",
        content=raw,
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json", MODE: "passthrough"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert responses_up.last.raw == raw
    assert own_headers(r.headers)["x-ctxproxy-mode"] == "passthrough"

    streamed = client.responses.with_raw_response.create(model="resp-4o", input="stream it", stream=True)
    ours = own_headers(streamed.headers)
    list(streamed.parse())
    assert int(ours["x-ctxproxy-sent-tokens"]) <= int(ours["x-ctxproxy-client-tokens"])
    assert ours["x-ctxproxy-checkpoint"] == "none"
    assert_nothing_of_ours_upstream(responses_up.requests)
    calls = p.wait_calls(ours["x-ctxproxy-conversation"], 1)
    assert calls[-1]["status"] == "complete"
    assert UPSTREAM_KEY not in json.dumps(ours)
