"""Routes whose upstream is a litellm model: OpenAI chat requests in, the provider called through
`litellm.acompletion`, OpenAI JSON / SSE out, recorded like any call.

Two providers on 127.0.0.1: litellm's OpenAI provider (`openai/gpt-4o-mini` with `base_url` = the
scripted OpenAI upstream) and its Anthropic provider (`anthropic/claude-haiku-4-5` with `base_url`
= the tiny Anthropic Messages endpoint below), so the OpenAI <-> Anthropic translation is real.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from proxy.catalog import ModelCatalog
from tests.support.e2e import assert_openai_error, json_chunks, sse_payloads, stream_raw, user
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

ANTHROPIC_USAGE = {
    "input_tokens": 50,
    "output_tokens": 9,
    "cache_read_input_tokens": 200,
    "cache_creation_input_tokens": 30,
}


class AnthropicEndpoint:
    """POST /v1/messages: a fixed answer ("hello from claude"), streamed as the real event
    sequence or whole; a queued status answers with Anthropic's error shape instead."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.statuses: list[int] = []
        self.port = 0

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = json.loads(raw) if raw else {}
        self.requests.append((scope["path"], headers, body))

        async def whole(status: int, obj: Any) -> None:
            await send(
                {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": json.dumps(obj).encode()})

        if self.statuses:
            status = self.statuses.pop(0)
            await whole(status, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
            return
        if not body.get("stream"):
            await whole(
                200,
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [{"type": "text", "text": "hello from claude"}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": ANTHROPIC_USAGE,
                },
            )
            return
        events = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_1",
                        "type": "message",
                        "role": "assistant",
                        "model": body["model"],
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {**ANTHROPIC_USAGE, "output_tokens": 1},
                    },
                },
            ),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
            ("ping", {"type": "ping"}),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hello "}},
            ),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "from claude"}},
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 9},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for name, obj in events:
            data = f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode()
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def start(self) -> AnthropicEndpoint:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, log_level="critical", lifespan="off", interface="asgi3", access_log=False)
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, interval=0.01, what="the Anthropic endpoint to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def anthropic() -> Iterator[AnthropicEndpoint]:
    server = AnthropicEndpoint().start()
    yield server
    server.stop()


@pytest.fixture
def lite(proxy: Any, upstream: Any, anthropic: AnthropicEndpoint, closed_port: int) -> Any:
    anthropic.requests.clear()
    anthropic.statuses.clear()
    timeouts = {"connect": 5, "first_byte": 30, "idle": 30, "total": 60}
    routes = [
        {
            "name": "lite-openai",
            "match": {"model": "lite-*"},
            "upstream": {
                "model": "openai/gpt-4o-mini",
                "base_url": upstream.base_url,
                "api_key_env": "UPSTREAM_KEY",
                "timeouts": timeouts,
            },
        },
        {
            "name": "lite-claude",
            "match": {"model": "claude-*"},
            "upstream": {
                "model": "anthropic/claude-haiku-4-5",
                "base_url": f"http://127.0.0.1:{anthropic.port}",
                "api_key_env": "UPSTREAM_KEY",
                "timeouts": timeouts,
            },
        },
        {
            "name": "lite-refused",
            "match": {"model": "down-*"},
            "upstream": {
                "model": "openai/gpt-4o-mini",
                "base_url": f"http://127.0.0.1:{closed_port}/v1",
                "api_key_env": "UPSTREAM_KEY",
                "timeouts": {**timeouts, "connect": 2},
            },
        },
        {
            "name": "main",
            "match": {"model": "gpt-*"},
            "upstream": {"base_url": upstream.base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts},
        },
    ]
    return proxy(routes=routes)


def _price(model: str, usage: dict[str, int]) -> float:
    info = ModelCatalog().info(model)
    assert info is not None and info.input_cost_per_token and info.output_cost_per_token
    read = info.cache_read_cost_per_token or info.input_cost_per_token
    write = info.cache_write_cost_per_token or info.input_cost_per_token
    return (
        usage["input_uncached"] * info.input_cost_per_token
        + usage["cache_read"] * read
        + (usage["cache_write"] or 0) * write
        + usage["output"] * info.output_cost_per_token
    )


def test_openai_provider_non_stream(lite, upstream, api_key):
    upstream.push(
        Reply(content="via litellm", prompt_tokens=120, completion_tokens=11, cached_tokens=20, reasoning_tokens=3)
    )
    r = lite.post_chat(api_key, {"model": "lite-fast", "messages": [user("hello litellm")], "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and message["content"] == "via litellm"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == 120 and body["usage"]["completion_tokens"] == 11
    assert "provider_specific_fields" not in json.dumps(body)
    sent = upstream.last_chat
    assert sent.body["model"] == "gpt-4o-mini"  # the route's model, not the client's
    assert sent.body["temperature"] == 0
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    conv = r.headers["x-conversation-id"]
    call = lite.wait_calls(conv, 1)[0]
    assert call["status"] == "complete" and call["route"] == "lite-openai" and call["model"] == "lite-fast"
    assert call["upstream_status"] == 200 and call["stream"] is False
    assert call["usage"] == {
        "input_total": 120,
        "input_uncached": 100,
        "cache_read": 20,
        "cache_write": None,
        "output": 11,
        "reasoning": 3,
    }
    assert call["cost_usd"] == pytest.approx(_price("gpt-4o-mini", call["usage"]))
    assert call["response"]["content"] == "via litellm"
    events = lite.events(conv)
    assert [e["message"]["role"] for e in events] == ["user", "assistant"]
    assert events[1]["message"]["content"] == "via litellm"


@pytest.mark.parametrize("client_wants_usage", [False, True])
def test_openai_provider_stream(lite, upstream, api_key, client_wants_usage):
    upstream.push(
        Reply(content="streamed through litellm", prompt_tokens=80, completion_tokens=6, cached_tokens=16, chunks=4)
    )
    body: dict[str, Any] = {"model": "lite-fast", "messages": [user(f"stream {client_wants_usage}")], "stream": True}
    if client_wants_usage:
        body["stream_options"] = {"include_usage": True}
    r, lines = stream_raw(lite.base_url, api_key, body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(lines)
    assert payloads[-1] == "[DONE]"
    chunks = json_chunks(payloads)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "streamed through litellm"
    usage_chunks = [c for c in chunks if c.get("usage")]
    if client_wants_usage:
        assert len(usage_chunks) == 1 and usage_chunks[0]["usage"]["prompt_tokens"] == 80
    else:
        assert usage_chunks == [] and not any("usage" in c for c in chunks)
    # the proxy asked the provider for usage either way
    assert upstream.last_chat.body["stream_options"] == {"include_usage": True}
    conv = r.headers["x-conversation-id"]
    call = lite.wait_calls(conv, 1)[0]
    assert call["status"] == "complete" and call["stream"] is True
    assert call["usage"]["input_total"] == 80 and call["usage"]["cache_read"] == 16
    assert call["usage"]["input_uncached"] == 64 and call["usage"]["output"] == 6
    assert call["ttfb_ms"] is not None and call["cost_usd"] is not None
    assert call["response"]["content"] == "streamed through litellm"


def test_openai_sdk_through_litellm_route(lite, upstream, api_key):
    client = lite.client(api_key)
    upstream.push(Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.py"}, "id": "call_a1"}]))
    stream = client.chat.completions.create(
        model="lite-fast",
        messages=[user("read a.py")],
        stream=True,
        tools=[{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}],
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                slot["name"] += (tc.function.name or "") if tc.function else ""
                slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
            finish = choice.finish_reason or finish
    assert calls == {0: {"id": "call_a1", "name": "read_file", "arguments": '{"path": "a.py"}'}}
    assert finish == "tool_calls"
    assert upstream.last_chat.body["tools"][0]["function"]["name"] == "read_file"


def opened(p, api_key: str, model: str, text: str) -> list[dict]:
    """A conversation's history after one answered turn, plus a new user message: the error a test
    expects then lands in a conversation that exists (a failed first request leaves none)."""
    r = p.post_chat(api_key, {"model": model, "messages": [user(f"opening {text}")]})
    assert r.status_code == 200, r.text
    return [user(f"opening {text}"), r.json()["choices"][0]["message"], user(text)]


@pytest.mark.parametrize("stream", [False, True])
def test_provider_error_keeps_its_status(lite, upstream, api_key, stream):
    history = opened(lite, api_key, "lite-fast", f"limited {stream}")
    upstream.push(Reply(status=429))
    r = lite.post_chat(api_key, {"model": "lite-fast", "messages": history, "stream": stream})
    error = assert_openai_error(r, 429)
    assert error["message"] == "Rate limit reached for requests"
    assert error["code"] == "rate_limit_exceeded"
    assert UPSTREAM_KEY not in r.text
    call = lite.wait_calls(r.headers["x-conversation-id"], 2)[-1]
    assert call["status"] == "error" and call["upstream_status"] == 429
    assert call["usage"]["input_total"] is None and call["cost_usd"] is None


def test_unreachable_provider_is_a_502(lite, api_key):
    r = lite.post_chat(api_key, {"model": "down-1", "messages": [user("anyone there?")]})
    error = assert_openai_error(r, 502)
    assert UPSTREAM_KEY not in r.text
    assert "lite-refused" in error["message"]


def test_no_request_field_changes_the_provider(lite, upstream, api_key):
    """SSRF: api_base, base_url, custom_llm_provider, extra_headers, fallbacks, mock_response...
    in the body are not litellm arguments; the configured host gets the call."""
    catcher = Reply(content="configured host")
    upstream.push(catcher)
    evil = f"http://127.0.0.1:{upstream.port}/evil/v1"
    body = {
        "model": "lite-fast",
        "messages": [user("where do you go?")],
        "api_base": evil,
        "base_url": evil,
        "custom_llm_provider": "anthropic",
        "api_key": "sk-client-chosen",
        "extra_headers": {"x-evil": "1"},
        "fallbacks": ["gpt-4o"],
        "mock_response": "mocked!",
        "metadata": {"a": "b"},
    }
    r = lite.post_chat(api_key, body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "configured host"
    request = upstream.last_chat
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert "x-evil" not in request.headers
    assert set(request.body) == {"model", "messages"}


def test_anthropic_provider_non_stream(lite, anthropic, api_key):
    r = lite.post_chat(
        api_key,
        {
            "model": "claude-fast",
            "messages": [{"role": "system", "content": "Be brief."}, user("hi claude")],
            "max_tokens": 100,
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "hello from claude"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == 280  # litellm: input + cache reads + cache writes
    path, headers, sent = anthropic.requests[-1]
    assert path == "/v1/messages"
    assert headers["x-api-key"] == UPSTREAM_KEY
    assert sent["model"] == "claude-haiku-4-5" and sent["max_tokens"] == 100
    assert sent["system"] == [{"type": "text", "text": "Be brief."}]
    call = lite.wait_calls(r.headers["x-conversation-id"], 1)[0]
    # Anthropic's three disjoint input fields, each counted once
    assert call["usage"] == {
        "input_total": 280,
        "input_uncached": 50,
        "cache_read": 200,
        "cache_write": 30,
        "output": 9,
        "reasoning": 0,
    }
    assert call["cost_usd"] == pytest.approx(_price("anthropic/claude-haiku-4-5", call["usage"]))


def test_anthropic_provider_stream(lite, anthropic, api_key):
    client = lite.client(api_key)
    raw = client.chat.completions.with_raw_response.create(
        model="claude-fast", messages=[user("stream, claude")], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hello from claude"
    usage = [c.usage for c in chunks if c.usage]
    assert usage and usage[-1].prompt_tokens == 280 and usage[-1].completion_tokens == 9
    assert anthropic.requests[-1][2]["stream"] is True
    call = lite.wait_calls(raw.headers["x-conversation-id"], 1)[0]
    assert call["status"] == "complete"
    assert call["usage"]["cache_write"] == 30 and call["usage"]["input_uncached"] == 50
    assert call["usage"]["cache_read"] == 200 and call["usage"]["output"] == 9


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_error_keeps_its_status(lite, anthropic, api_key, stream):
    history = opened(lite, api_key, "claude-fast", f"too fast {stream}")
    anthropic.statuses.append(429)
    r = lite.post_chat(api_key, {"model": "claude-fast", "messages": history, "stream": stream})
    error = assert_openai_error(r, 429)
    assert error["message"] == "slow down" and error["type"] == "rate_limit_error"
    call = lite.wait_calls(r.headers["x-conversation-id"], 2)[-1]
    assert call["status"] == "error" and call["upstream_status"] == 429


def test_raw_routes_still_use_the_raw_hop(lite, upstream, api_key):
    r = lite.post_chat(api_key, {"model": "gpt-4o", "messages": [user("raw hop")]})
    assert r.status_code == 200
    assert "litellm" not in upstream.last_chat.headers.get("user-agent", "")
    models = httpx.get(f"{lite.base_url}/models", headers={"Authorization": f"Bearer {api_key}"}, timeout=10)
    assert models.status_code == 200


def test_config_requires_base_url_or_model():
    from proxy.config_file import parse_config
    from proxy.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        parse_config({"routes": [{"name": "r", "upstream": {"api_key_env": "K"}}]}, env={})
    assert "base_url" in str(info.value) and "model" in str(info.value)
    config = parse_config({"routes": [{"name": "r", "upstream": {"model": "anthropic/claude-haiku-4-5"}}]}, env={})
    assert config.routes[0].upstream.base_url is None


def test_openai_sdk_error_type(lite, upstream, api_key):
    upstream.push(Reply(status=401))
    with pytest.raises(openai.AuthenticationError) as info:
        lite.client(api_key).chat.completions.create(model="lite-fast", messages=[user("bad key upstream")])
    assert info.value.status_code == 401


def test_a_wire_without_a_chat_rendering_is_a_502_in_its_shape(lite, anthropic, api_key):
    """An Anthropic Messages request on a litellm route: the wire has no rendering as chat
    completions (`Wire.chat_request` is None), so the hop refuses it before calling anyone."""
    body = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01"}
    r = httpx.post(f"{lite.url}/v1/messages", json=body, headers=headers, timeout=30)
    assert r.status_code == 502, r.text
    error = r.json()
    assert error["type"] == "error" and "cannot be served through litellm" in error["error"]["message"]
    assert anthropic.requests == []
