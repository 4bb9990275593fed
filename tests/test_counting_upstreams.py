"""The scripted upstreams' counting modes (`tests.support.counting`) and overflow answers
(`tests.support.overflow`): each mode counts its own way, the same way every time, enforces the
window with that count and the provider's real 400 body, and bills that count in usage; jitter
stays within its bound and varies per request; the default is what the servers always did."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from policies.tokens import count_message, count_tools, encoding_for_model
from tests.support.anthropic_upstream import AnthropicUpstream, estimate_tokens
from tests.support.counting import EXACT, PRESETS, Counting, Meter, counting
from tests.support.overflow import RESPONSES_MESSAGE
from tests.support.responses_upstream import ResponsesServer, count_input_tokens
from tests.support.upstream_server import UpstreamServer, count_prompt_tokens

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat cfg.yaml"}'}}
MESSAGES = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "Bitte prüfe die Konfiguration: 数据库连接失败 at 10.0.3.17:5432, retry=12."},
    {"role": "assistant", "content": "Checking.", "tool_calls": [CALL]},
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "db_host: pg-replica-17.internal\nlisten_port = 48443\n" * 20,
    },
    {"role": "assistant", "content": "Der Host ist pg-replica-17.internal."},
    {"role": "user", "content": "Gut. Und der Port?"},
]
CHAT = {"model": "m", "messages": MESSAGES, "tools": TOOLS, "max_tokens": 100}
ANTHROPIC = {
    "model": "m",
    "max_tokens": 100,
    "system": "You are a careful coding agent.",
    "tools": [
        {"name": "bash", "description": "Run a shell command.", "input_schema": TOOLS[0]["function"]["parameters"]}
    ],
    "messages": [
        {"role": "user", "content": MESSAGES[1]["content"]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"c": 1}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": MESSAGES[3]["content"]}],
        },
        {"role": "assistant", "content": MESSAGES[4]["content"]},
        {"role": "user", "content": MESSAGES[5]["content"]},
    ],
}
RESPONSES = {
    "model": "m",
    "instructions": "You are a careful coding agent.",
    "tools": [{"type": "function", **TOOLS[0]["function"]}],
    "max_output_tokens": 100,
    "store": False,
    "input": [
        {"role": "user", "content": MESSAGES[1]["content"]},
        {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": CALL["function"]["arguments"]},
        {"type": "function_call_output", "call_id": "call_1", "output": MESSAGES[3]["content"]},
        {"role": "assistant", "content": MESSAGES[4]["content"]},
        {"role": "user", "content": MESSAGES[5]["content"]},
    ],
}
KEY = {"Authorization": "Bearer k"}


def proxy_estimate(body: dict[str, Any]) -> int:
    """What ctxproxy's own estimator (`policies.tokens`) makes of a chat body."""
    enc = encoding_for_model("gpt-4o")
    return 3 + sum(count_message(m, enc) for m in body["messages"]) + count_tools(body.get("tools"), enc)


def chat(server: UpstreamServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json=body, headers=KEY, timeout=10)


def messages(server: AnthropicUpstream, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/messages",
        json=body,
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        timeout=10,
    )


def responses(server: ResponsesServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/responses", json=body, headers=KEY, timeout=10)


def billed_chat(mode: str, body: dict[str, Any] = CHAT) -> int:
    with UpstreamServer(counting=mode) as up:
        r = chat(up, body)
        assert r.status_code == 200, r.text
        return r.json()["usage"]["prompt_tokens"]


# ---- the modes themselves


def test_presets_and_names():
    assert counting(None) is EXACT and counting("exact") is EXACT and EXACT.is_exact
    assert {"exact", "cl100k", "framing", "bias+5", "bias-5", "jitter8", "claude-like"} <= set(PRESETS)
    assert counting("bias+12").scale == pytest.approx(1.12) and counting("bias-3").scale == pytest.approx(0.97)
    assert counting("jitter3").jitter == pytest.approx(0.03)
    assert not any(PRESETS[n].is_exact for n in PRESETS if n != "exact")
    spec = Counting("mine", message_tokens=5)
    assert counting(spec) is spec
    with pytest.raises(ValueError, match="unknown counting"):
        counting("tokenizer-of-the-month")
    with pytest.raises(ValueError):
        Counting("bad", jitter=1.5)


def test_each_mode_counts_its_own_way_against_the_proxy_estimate():
    estimate = proxy_estimate(CHAT)
    billed = {mode: billed_chat(mode) for mode in ("exact", "cl100k", "framing", "bias+5", "bias-5")}
    # exact is the proxy's own rules (it also counts tool_call_id, which this upstream does not)
    assert abs(billed["exact"] - estimate) <= 0.01 * estimate
    assert billed["exact"] == count_prompt_tokens(CHAT)
    assert billed["cl100k"] != billed["exact"]  # another tokenizer: multilingual text splits otherwise
    assert billed["framing"] > 1.05 * estimate  # 7 per message, tools as JSON
    assert billed["bias+5"] == round(billed["exact"] * 1.05)
    assert billed["bias-5"] == round(billed["exact"] * 0.95)


def test_framing_is_per_message_and_tools_as_json():
    no_tools = {"model": "m", "messages": MESSAGES}
    framing, exact = PRESETS["framing"], EXACT
    roles = sum(exact.role(m["role"]) for m in MESSAGES)
    assert count_prompt_tokens(no_tools, framing) - count_prompt_tokens(no_tools, exact) == (
        4 * len(MESSAGES) + len(MESSAGES) - roles
    )
    assert framing.openai_tools(TOOLS) == sum(framing.json(t) for t in TOOLS) != exact.openai_tools(TOOLS)
    # Anthropic's turns are framed alike; its tools are JSON in every mode
    turns = len(ANTHROPIC["messages"])
    assert estimate_tokens(ANTHROPIC, framing) - estimate_tokens(ANTHROPIC, exact) == 5 * turns


@pytest.mark.parametrize("mode", sorted(PRESETS))
def test_a_mode_counts_the_same_as_itself(mode):
    c = PRESETS[mode]
    for count in (
        lambda: count_prompt_tokens(CHAT, c),
        lambda: estimate_tokens(ANTHROPIC, c),
        lambda: count_input_tokens(RESPONSES["instructions"], RESPONSES["input"], RESPONSES["tools"], c),
    ):
        assert count() == count()
    if not c.jitter:
        meter = Meter(c)
        assert len({meter.measure(lambda c: count_prompt_tokens(CHAT, c)) for _ in range(5)}) == 1


def test_jitter_is_bounded_varies_per_request_and_is_seeded():
    base = count_prompt_tokens(CHAT)
    with UpstreamServer(counting="jitter8") as up:
        billed = [chat(up, CHAT).json()["usage"]["prompt_tokens"] for _ in range(30)]
        # the count the window was checked with is the count billed, request by request
        assert [m.counted for m in up.measured] == billed
    assert len(set(billed)) > 10
    assert all(abs(b - base) <= 0.08 * base + 0.5 for b in billed)
    assert max(billed) > base > min(billed)
    first, second = Meter("jitter8"), Meter("jitter8")
    assert [first.factor() for _ in range(5)] == [second.factor() for _ in range(5)]


def test_default_is_unchanged():
    up = UpstreamServer()
    assert up.counting is EXACT and up.error_style == "openai"
    assert AnthropicUpstream().counting is EXACT and ResponsesServer().counting is EXACT
    assert count_prompt_tokens(CHAT) == count_prompt_tokens(CHAT, EXACT)
    with UpstreamServer() as up:
        usage = chat(up, CHAT).json()["usage"]
        assert usage["prompt_tokens"] == count_prompt_tokens(CHAT)


# ---- the window, by the mode's count, with the real body


def test_chat_window_is_enforced_by_the_modes_count():
    exact = count_prompt_tokens(CHAT)
    fits_exactly = exact + 100
    with UpstreamServer(counting="bias+5", context_windows={"m": fits_exactly}) as up:
        r = chat(up, CHAT)
        assert r.status_code == 400
        counted = round(exact * 1.05)
        assert r.json() == {
            "error": {
                "message": f"This model's maximum context length is {fits_exactly} tokens. However, you requested "
                f"{counted + 100} tokens ({counted} in the messages, 100 in the completion). Please reduce the "
                "length of the messages or completion.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
        assert [(o.counted, o.max_tokens, o.window) for o in up.overflows] == [(counted, 100, fits_exactly)]
    with UpstreamServer(counting="bias-5", context_windows={"m": exact + 99}) as up:
        r = chat(up, CHAT)  # over the window by the proxy's count, inside it by this provider's
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == round(exact * 0.95)
        assert up.overflows == [] and not up.measured[0].over


@pytest.mark.parametrize(
    "style, window, status, expected",
    [
        (
            "vllm",
            "input",
            400,
            {
                "error": {
                    "message": "This model's maximum context length is {w} tokens. However, your request has {p} "
                    "input tokens. Please reduce the length of the input messages.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            },
        ),
        (
            "vllm",
            "reserve",
            400,
            {
                "error": {
                    "message": "'max_tokens' or 'max_completion_tokens' is too large: 100. This model's maximum "
                    "context length is {w} tokens and your request has {p} input tokens (100 > {w} - {p}).",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            },
        ),
        ("llama.cpp", "reserve", 200, None),  # llama.cpp checks the prompt alone
        (
            "llama.cpp",
            "input",
            400,
            {
                "error": {
                    "code": 400,
                    "message": "request ({p} tokens) exceeds the available context size ({w} tokens), "
                    "try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": "{p}",
                    "n_ctx": "{w}",
                }
            },
        ),
        (
            "openrouter",
            "reserve",
            400,
            {
                "error": {
                    "message": "This endpoint's maximum context length is {w} tokens. However, you requested about "
                    "{p+100} tokens ({p-t} of text input, {t} of tool input, 100 in the output). Please reduce the "
                    'length of either one, or use the "middle-out" transform to compress your prompt automatically.',
                    "code": 400,
                }
            },
        ),
        (
            "litellm",
            "reserve",
            400,
            {
                "error": {
                    "message": "litellm.ContextWindowExceededError: litellm.BadRequestError: "
                    "ContextWindowExceededError: OpenAIException - This model's maximum context length is {w} "
                    "tokens. However, you requested {p+100} tokens ({p} in the messages, 100 in the completion). "
                    "Please reduce the length of the messages or completion.. Received Model Group=m\n"
                    "Available Model Group Fallbacks=None",
                    "type": None,
                    "param": None,
                    "code": "400",
                }
            },
        ),
    ],
)
def test_chat_error_styles(style, window, status, expected):
    prompt = count_prompt_tokens(CHAT, counting("cl100k"))
    tools = counting("cl100k").openai_tools(TOOLS)
    w = prompt if window == "input" else prompt + 50  # the prompt alone reaches it / only with the reply
    with UpstreamServer(counting="cl100k", error_style=style, context_windows={"m": w}) as up:
        r = chat(up, CHAT)
    assert r.status_code == status, r.text
    if expected is not None:
        numbers = {"{w}": w, "{p}": prompt, "{p+100}": prompt + 100, "{p-t}": prompt - tools, "{t}": tools}

        def fill(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: fill(v) for k, v in value.items()}
            if isinstance(value, str):
                if value in numbers:
                    return numbers[value]
                for key, number in numbers.items():
                    value = value.replace(key, str(number))
            return value

        assert r.json() == fill(expected)


def test_unknown_error_style_is_refused():
    with pytest.raises(ValueError, match="unknown error style"):
        UpstreamServer(error_style="acme")


def test_anthropic_overflow_messages_and_usage_by_the_modes_count():
    c = PRESETS["framing"]
    prompt = estimate_tokens(ANTHROPIC, c)
    with AnthropicUpstream(counting=c, context_windows={"m": prompt - 1}) as up:
        r = messages(up, ANTHROPIC)
        assert r.status_code == 400
        assert r.json() == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {prompt} tokens > {prompt - 1} maximum",
            },
        }
    with AnthropicUpstream(counting=c, context_windows={"m": prompt + 50}) as up:
        r = messages(up, ANTHROPIC)
        assert r.status_code == 400
        assert r.json()["error"]["message"] == (
            f"input length and `max_tokens` exceed context limit: {prompt} + 100 > {prompt + 50}, decrease input "
            "length or `max_tokens` and try again"
        )
        assert up.overflows[0].counted == prompt
    with AnthropicUpstream(counting=c, context_windows={"m": prompt + 100}) as up:
        usage = messages(up, ANTHROPIC).json()["usage"]
        assert usage["input_tokens"] == prompt != estimate_tokens(ANTHROPIC)
        r = httpx.post(
            f"{up.url}/v1/messages/count_tokens",
            json=ANTHROPIC,
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            timeout=10,
        )
        assert r.json() == {"input_tokens": prompt}


def test_anthropic_cache_parts_add_up_to_the_modes_count():
    cached = json.loads(json.dumps(ANTHROPIC))
    cached["system"] = [
        {"type": "text", "text": "You are a careful coding agent. " * 40, "cache_control": {"type": "ephemeral"}}
    ]
    base = estimate_tokens(cached)
    with AnthropicUpstream(counting="bias+5") as up:
        first, second = (messages(up, cached).json()["usage"] for _ in range(2))
    for usage in (first, second):
        parts = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        assert parts == round(base * 1.05)
    assert first["cache_creation_input_tokens"] > 0 and first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]


def test_responses_overflow_is_the_real_body_and_usage_the_modes_count():
    c = PRESETS["framing"]
    prompt = count_input_tokens(RESPONSES["instructions"], RESPONSES["input"], RESPONSES["tools"], c)
    exact = count_input_tokens(RESPONSES["instructions"], RESPONSES["input"], RESPONSES["tools"])
    assert prompt > exact
    with ResponsesServer(counting=c, context_windows={"m": exact + 100}) as up:
        r = responses(up, RESPONSES)  # fits by the proxy's count, not by this provider's
        assert r.status_code == 400
        assert r.json() == {
            "error": {
                "message": RESPONSES_MESSAGE,
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            }
        }
        assert RESPONSES_MESSAGE == (
            "Your input exceeds the context window of this model. Please adjust your input and try again."
        )
        assert up.overflows[0].counted == prompt
    with ResponsesServer(counting=c, context_windows={"m": prompt + 100}) as up:
        assert responses(up, RESPONSES).json()["usage"]["input_tokens"] == prompt


def test_cached_tokens_never_exceed_the_billed_input():
    from tests.support.responses_upstream import ResponsesReply
    from tests.support.upstream_server import Reply

    small = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with UpstreamServer(counting="bias-5") as up:
        up.push(Reply(cached_tokens=10_000))
        usage = chat(up, small).json()["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"]
    with ResponsesServer(counting="bias-5") as up:
        up.push(ResponsesReply(cached_tokens=10_000))
        usage = responses(up, {"model": "m", "input": "hi"}).json()["usage"]
        assert usage["input_tokens_details"]["cached_tokens"] == usage["input_tokens"]
