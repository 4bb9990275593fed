"""The Gemini wire served through chat completions (a litellm route): the request rendered as a
chat-completions body, the chat answer, stream and errors rendered back in Gemini's shape, and
a wire with no such rendering refused by the hop before anything is sent."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from proxy import errors
from proxy.config_file import parse_config
from proxy.protocols import ANTHROPIC, DEFAULT, GEMINI
from proxy.protocols.gemini.wire import usage_of
from proxy.upstream.litellm import LitellmHop, usage_from_litellm


def _events(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e[6:]) for e in data.decode().split("\n\n") if e]


def test_request_as_chat_completions():
    body = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "ls"}]},
            {
                "role": "model",
                "parts": [{"functionCall": {"name": "sh", "args": {"c": "ls"}}, "thoughtSignature": "Uw=="}],
            },
            {"role": "user", "parts": [{"functionResponse": {"name": "sh", "response": {"output": "a b"}}}]},
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "sh",
                        "description": "run",
                        "parameters": {"type": "OBJECT", "properties": {"c": {"type": "STRING", "enum": ["TYPE"]}}},
                    },
                    {"name": "j", "parametersJsonSchema": {"type": "object"}},
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["sh"]}},
        "generationConfig": {"temperature": 0.2, "maxOutputTokens": 50, "stopSequences": ["x"], "topP": 0.9},
    }
    request = GEMINI.chat_request(body, True)
    assert request is not None
    messages = request["messages"]
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert messages[1] == {"role": "user", "content": "ls"}
    (call,) = messages[2]["tool_calls"]
    assert messages[2]["role"] == "assistant" and call["function"] == {"name": "sh", "arguments": '{"c":"ls"}'}
    assert messages[3] == {"role": "tool", "tool_call_id": call["id"], "content": "a b"}
    assert not any(key.startswith("_") for m in messages for key in m)
    sh, j = request["tools"]
    assert sh["function"]["parameters"] == {"type": "object", "properties": {"c": {"type": "string", "enum": ["TYPE"]}}}
    assert sh["function"]["description"] == "run" and j["function"]["parameters"] == {"type": "object"}
    assert request["tool_choice"] == {"type": "function", "function": {"name": "sh"}}
    assert (request["temperature"], request["max_tokens"], request["stop"], request["top_p"]) == (0.2, 50, ["x"], 0.9)
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    whole = GEMINI.chat_request({"contents": body["contents"][:1]}, False)
    assert whole == {"messages": [{"role": "user", "content": "ls"}]}


@pytest.mark.parametrize(
    ("mode", "choice"),
    [("AUTO", "auto"), ("NONE", "none"), ("ANY", "required"), ("VALIDATED", "auto")],
)
def test_tool_config_as_tool_choice(mode, choice):
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": [{"name": "sh"}]}],
        "toolConfig": {"functionCallingConfig": {"mode": mode}},
    }
    request = GEMINI.chat_request(body, False)
    assert request is not None and request["tool_choice"] == choice


def test_a_part_chat_cannot_carry_is_refused():
    body = {"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]}
    with pytest.raises(errors.BadRequest, match="`inlineData` parts are not supported"):
        GEMINI.chat_request(body, False)


def test_whole_answer_in_gemini_shape():
    answer = {
        "id": "chatcmpl-1",
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Looking.",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": '{"c":1}'}}
                    ],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 12,
            "total_tokens": 112,
            "prompt_tokens_details": {"cached_tokens": 40},
            "completion_tokens_details": {"reasoning_tokens": 5},
        },
    }
    out = GEMINI.chat_answer(answer)
    assert out["candidates"] == [
        {
            "content": {
                "role": "model",
                "parts": [{"text": "Looking."}, {"functionCall": {"name": "sh", "args": {"c": 1}}}],
            },
            "finishReason": "STOP",
            "index": 0,
        }
    ]
    assert out["usageMetadata"] == {
        "promptTokenCount": 100,
        "candidatesTokenCount": 7,
        "totalTokenCount": 112,
        "cachedContentTokenCount": 40,
        "thoughtsTokenCount": 5,
    }
    assert (out["modelVersion"], out["responseId"]) == ("gpt-4o-mini", "chatcmpl-1")
    # the ledger reads the same tokens from either shape
    assert usage_of(out["usageMetadata"]) == DEFAULT.usage(answer["usage"])
    assert usage_from_litellm(out["usageMetadata"], GEMINI) == DEFAULT.usage(answer["usage"])
    truncated = {**answer, "choices": [{"finish_reason": "length", "message": {"content": "ab"}}]}
    assert GEMINI.chat_answer(truncated)["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert DEFAULT.chat_answer(answer) is answer


def test_stream_in_gemini_shape():
    render = GEMINI.chat_stream()
    base = {"id": "c1", "model": "m", "object": "chat.completion.chunk"}
    pieces = [
        render.chunk({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}),
        render.chunk({**base, "choices": [{"index": 0, "delta": {"content": "lo"}}]}),
        render.chunk(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [{"index": 0, "id": "x", "function": {"name": "sh", "arguments": '{"c"'}}]
                        },
                    }
                ],
            }
        ),
        render.chunk(
            {
                **base,
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ':"ls"}'}}]}}],
            }
        ),
        render.chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        render.chunk(
            {**base, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}}
        ),
        render.end(),
    ]
    chunks = _events(b"".join(pieces))
    assert [c["candidates"][0].get("content", {}).get("parts") for c in chunks] == [
        [{"text": "Hel"}],
        [{"text": "lo"}],
        [{"functionCall": {"name": "sh", "args": {"c": "ls"}}}],
    ]
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None, None, "STOP"]
    assert chunks[-1]["usageMetadata"] == {"promptTokenCount": 9, "candidatesTokenCount": 4, "totalTokenCount": 13}
    assert GEMINI.chat_stream().end() == b""  # nothing came: nothing to end
    text_only = GEMINI.chat_stream()
    text_only.chunk({**base, "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]})
    (closing,) = _events(text_only.end())
    # every chunk has a content with parts: the SDKs keep a streamed chat turn only then
    assert closing["candidates"][0]["content"] == {"role": "model", "parts": [{"text": ""}]}
    frames = DEFAULT.chat_stream()
    assert frames.chunk({"a": 1}) == b'data: {"a":1}\n\n' and frames.end() == b"data: [DONE]\n\n"


def test_errors_in_gemini_shape():
    body = json.loads(GEMINI.chat_error(429, {"error": {"message": "slow down", "type": "rate_limit_error"}}))
    assert body == {"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}
    assert json.loads(DEFAULT.chat_error(400, {"error": {"message": "bad"}})) == {"error": {"message": "bad"}}


def test_a_wire_without_a_chat_rendering_is_refused_by_the_hop():
    config = parse_config({"routes": [{"name": "r", "upstream": {"model": "openai/gpt-4o-mini"}}]}, env={})
    route = config.routes[0]
    hop = LitellmHop()
    body = json.dumps({"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}).encode()
    with pytest.raises(errors.UpstreamError, match="cannot be served through litellm"):
        asyncio.run(hop.send(route, "POST", "/v1/messages", body, {}, ANTHROPIC, False))
    with pytest.raises(errors.UpstreamError, match="serves only POST /v1/chat/completions"):
        asyncio.run(hop.send(route, "POST", "/v1/messages", body, {}))
