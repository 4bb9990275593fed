"""The Gemini API on a litellm route: the real `google-genai` SDK -> the real proxy subprocess ->
litellm's OpenAI provider (`openai/gpt-4o-mini`, `base_url` = the scripted OpenAI upstream).

The Gemini request goes upstream as chat completions (its common-model messages, its function
declarations as tools) and the chat answer, whole or streamed, comes back in Gemini's shape:
text and `functionCall` parts, Gemini's finish reasons, the usage in `usageMetadata`; the
ledger equals what the upstream billed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.upstream_server import Reply, tool_call

pytestmark = pytest.mark.slow

MODEL = "gemini-lite"
TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 60}
SHELL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="run_shell_command",
            description="Run a shell command and return its output.",
            parameters=types.Schema(
                type=types.Type.OBJECT,
                properties={"command": types.Schema(type=types.Type.STRING)},
                required=["command"],
            ),
        )
    ]
)
NO_AUTO = types.AutomaticFunctionCallingConfig(disable=True)


@pytest.fixture
def lite(proxy: Any, upstream: Any) -> Any:
    route = {
        "name": "lite-gemini",
        "match": {"model": "gemini-*", "path": "/v1beta/models"},
        "upstream": {
            "model": "openai/gpt-4o-mini",
            "base_url": upstream.base_url,
            "api_key_env": "UPSTREAM_KEY",
            "timeouts": TIMEOUTS,
        },
    }
    return proxy(routes=[route])


def client(p: Any, api_key: str) -> genai.Client:
    options = types.HttpOptions(base_url=p.url, api_version="v1beta", timeout=30_000)
    return genai.Client(api_key=api_key, http_options=options)


def billed(reply: Reply) -> dict[str, Any]:
    """The ledger's usage for what the scripted upstream reported."""
    usage = reply.sent_usage
    assert usage is not None
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_total": usage["prompt_tokens"],
        "input_uncached": usage["prompt_tokens"] - cached,
        "cache_read": cached,
        "cache_write": None,
        "output": usage["completion_tokens"],
        "reasoning": reasoning,
    }


def records(p: Any, conv: str, n: int) -> list[dict[str, Any]]:
    return p.wait_calls(conv, n, until=lambda cs: all(c["status"] != "pending" for c in cs))


def test_generate_content_goes_as_chat_completions(lite, upstream, api_key):
    reply = Reply(content="hello via litellm", prompt_tokens=120, completion_tokens=11, cached_tokens=20)
    reply.reasoning_tokens = 3
    upstream.push(reply)
    c = client(lite, api_key)
    config = types.GenerateContentConfig(system_instruction="Be brief.", temperature=0, max_output_tokens=64)
    answer = c.models.generate_content(model=MODEL, contents="hi", config=config)
    assert answer.text == "hello via litellm"
    assert answer.candidates is not None and answer.candidates[0].finish_reason == types.FinishReason.STOP
    meta = answer.usage_metadata
    assert meta is not None
    assert (meta.prompt_token_count, meta.cached_content_token_count) == (120, 20)
    assert (meta.candidates_token_count, meta.thoughts_token_count) == (8, 3)
    sent = upstream.last_chat
    assert sent.body["model"] == "gpt-4o-mini" and sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert sent.body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert sent.body["temperature"] == 0 and sent.body["max_tokens"] == 64 and "stream" not in sent.body
    assert api_key not in str(sent.headers)
    conv = answer.sdk_http_response.headers["x-conversation-id"]
    call = records(lite, conv, 1)[0]
    assert call["status"] == "complete" and call["route"] == "lite-gemini" and call["finish_reason"] == "STOP"
    assert call["usage"] == billed(upstream.last_reply) and call["cost_usd"] is not None
    assert call["response"] == {"role": "assistant", "content": "hello via litellm"}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_function_calling_chat(lite, upstream, api_key, stream):
    """A call, its response sent back by the SDK, then the answer: the calls arrive as
    `functionCall` parts, the response goes upstream as a tool message paired with its call,
    and the conversation is one branch whose every call is billed as the upstream reported."""
    upstream.push(Reply(tool_calls=[tool_call("run_shell_command", {"command": "cat notes"})], chunks=4))
    upstream.push(Reply(content="The notes say kiwi-4471.", prompt_tokens=90, completion_tokens=7, chunks=4))
    c = client(lite, api_key)
    chat = c.chats.create(
        model=MODEL, config=types.GenerateContentConfig(tools=[SHELL], automatic_function_calling=NO_AUTO)
    )

    def send(message: Any) -> tuple[list[types.FunctionCall], str, Any]:
        if not stream:
            response = chat.send_message(message)
            return response.function_calls or [], response.text or "", response
        chunks = list(chat.send_message_stream(message))
        calls = [call for chunk in chunks for call in chunk.function_calls or []]
        text = "".join(chunk.text or "" for chunk in chunks if not chunk.function_calls)
        return calls, text, chunks[-1]

    calls, _, first = send(f"What do the notes say? ({stream})")
    assert [(call.name, call.args) for call in calls] == [("run_shell_command", {"command": "cat notes"})]
    assert first.candidates[0].finish_reason == types.FinishReason.STOP
    assert first.usage_metadata is not None and first.usage_metadata.prompt_token_count > 0
    tools = upstream.last_chat.body["tools"]
    assert tools[0]["function"]["name"] == "run_shell_command"
    assert tools[0]["function"]["parameters"]["type"] == "object"
    assert tools[0]["function"]["parameters"]["properties"]["command"]["type"] == "string"
    if stream:
        assert upstream.last_chat.body["stream_options"] == {"include_usage": True}

    result = types.Part.from_function_response(name="run_shell_command", response={"output": "TOKEN=kiwi-4471"})
    calls, text, second = send(result)
    assert calls == [] and text == "The notes say kiwi-4471."
    assert second.usage_metadata.prompt_token_count == 90 and second.usage_metadata.candidates_token_count == 7

    messages = upstream.last_chat.body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    (sent_call,) = messages[1]["tool_calls"]
    assert sent_call["function"]["name"] == "run_shell_command"
    assert messages[2] == {"role": "tool", "tool_call_id": sent_call["id"], "content": "TOKEN=kiwi-4471"}
    assert not any(key.startswith("_") for m in messages for key in m)

    conv = second.sdk_http_response.headers["x-conversation-id"]
    made = records(lite, conv, 2)
    assert len({(c["conversation_id"], c["branch_id"]) for c in made}) == 1
    assert [c["stream"] for c in made] == [stream, stream]
    assert [c["usage"] for c in made] == [billed(r) for r in upstream.replies_sent[-2:]]
    assert made[0]["response"]["tool_calls"][0]["function"]["name"] == "run_shell_command"
    assert made[1]["response"]["content"] == "The notes say kiwi-4471."


def test_stream_is_gemini_sse(lite, upstream, api_key):
    """The raw stream: `data:` chunks of GenerateContentResponse, text in pieces, the last chunk
    with the finish reason and the usage; no `[DONE]`."""
    upstream.push(Reply(content="one two three four", prompt_tokens=40, completion_tokens=5, chunks=4))
    body = {"contents": [{"role": "user", "parts": [{"text": "count"}]}]}
    url = f"{lite.url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    with httpx.stream("POST", url, json=body, headers={"x-goog-api-key": api_key}, timeout=30) as r:
        data = b"".join(r.iter_raw()).decode()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in data.split("\n\n") if e]
    assert all(e.startswith("data: {") for e in events)
    chunks = [json.loads(e[6:]) for e in events]
    text = "".join(p.get("text", "") for c in chunks for p in c["candidates"][0].get("content", {}).get("parts", []))
    assert text == "one two three four" and len(chunks) >= 3
    last = chunks[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["usageMetadata"] == {"promptTokenCount": 40, "candidatesTokenCount": 5, "totalTokenCount": 45}
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])


@pytest.mark.parametrize("stream", [False, True])
def test_provider_error_in_gemini_shape(lite, upstream, api_key, stream):
    upstream.push(Reply(status=429))
    c = client(lite, api_key)
    with pytest.raises(genai_errors.ClientError) as raised:
        if stream:
            list(c.models.generate_content_stream(model=MODEL, contents=f"limited {stream}"))
        else:
            c.models.generate_content(model=MODEL, contents=f"limited {stream}")
    assert raised.value.code == 429 and raised.value.status == "RESOURCE_EXHAUSTED"
    assert raised.value.message


def test_a_part_chat_cannot_carry_is_a_400_in_gemini_shape(lite, upstream, api_key):
    c = client(lite, api_key)
    image = types.Part.from_bytes(data=b"\x89PNG\r\n", mime_type="image/png")
    with pytest.raises(genai_errors.ClientError) as raised:
        c.models.generate_content(model=MODEL, contents=[image, "what is this?"])
    assert raised.value.code == 400 and raised.value.status == "INVALID_ARGUMENT"
    assert "`inlineData` parts are not supported" in str(raised.value.message)
    assert upstream.chat_requests == []


FACT = "listen_port = 48443"
RECALL = "ctxproxy_recall"
RECALL_POLICY = {
    "context_window": 128000,
    "max_output_tokens": 4096,
    "trigger": 0.02,  # the 12k-char result puts the request over it, so it is trimmed
    "target": 0.01,
    "late_trim": 0.02,
    "tool_results": {"keep_recent_groups": 1, "old_max_chars": 200, "recent_max_chars": 1000, "clear_at_least": 1},
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_recall_is_offered_and_answered(proxy, upstream, api_key, stream):
    """A tool result holding a value is trimmed; asked for it, the model (the scripted upstream)
    calls the recall tool, which the proxy offered as a function tool and answers itself: the
    client sees only the final answer, and the ledger has the recall call as billed."""
    route = {
        "name": "lite-gemini",
        "match": {"model": "gemini-*", "path": "/v1beta/models"},
        "upstream": {
            "model": "openai/gpt-4o-mini",
            "base_url": upstream.base_url,
            "api_key_env": "UPSTREAM_KEY",
            "timeouts": TIMEOUTS,
        },
        "policy": "small",
    }
    p = proxy(routes=[route], policies={"small": RECALL_POLICY})
    script = [Reply(tool_calls=[tool_call("run_shell_command", {"command": "cat app.conf"})])]
    script += [Reply(content=f"noted {k}") for k in range(3)]

    def model(body: dict[str, Any]) -> Reply | None:
        if "You compress the history" in json.dumps(body["messages"][:1]):
            return None  # a compaction's summary call: the server's default answer
        if script:
            return script.pop(0)
        port = re.search(r"listen_port = (\d+)", json.dumps(body["messages"]))
        offered = RECALL in json.dumps(body.get("tools") or [])
        if port is None and offered:
            return Reply(tool_calls=[tool_call(RECALL, {"query": "listen_port"})])
        return Reply(content=f"The config sets port {port.group(1)}." if port else "I do not know.")

    upstream.responder = model
    c = client(p, api_key)
    chat = c.chats.create(
        model=MODEL, config=types.GenerateContentConfig(tools=[SHELL], automatic_function_calling=NO_AUTO)
    )

    def send(message: Any) -> tuple[list[types.FunctionCall], str, Any]:
        if not stream:
            response = chat.send_message(message)
            return response.function_calls or [], response.text or "", response
        chunks = list(chat.send_message_stream(message))
        calls = [call for chunk in chunks for call in chunk.function_calls or []]
        return calls, "".join(chunk.text or "" for chunk in chunks if not chunk.function_calls), chunks[-1]

    calls, _, _ = send("Read the config, please.")
    assert [call.name for call in calls] == ["run_shell_command"]
    output = "a" * 6000 + f" {FACT} " + "b" * 6000
    send(types.Part.from_function_response(name="run_shell_command", response={"output": output}))
    for k in (1, 2):
        send(f"carry on {k}")
    before = len(upstream.chat_requests)
    calls, text, last = send("Which port does the config set?")
    assert (calls, text) == ([], "The config sets port 48443.")
    first, second = [r.body for r in upstream.chat_requests[before:]]
    assert FACT not in json.dumps(first["messages"]), "the model saw the value: nothing was trimmed"
    assert first["tools"][-1]["function"]["name"] == RECALL
    call, result = second["messages"][-2:]
    assert call["tool_calls"][0]["function"]["name"] == RECALL
    assert result["tool_call_id"] == call["tool_calls"][0]["id"] and FACT in result["content"]
    conv = last.sdk_http_response.headers["x-conversation-id"]
    made = p.wait_calls(
        conv,
        1,
        until=lambda cs: any(c["purpose"] == "recall" for c in cs) and all(c["status"] != "pending" for c in cs),
    )
    (recall_call,) = [c for c in made if c["purpose"] == "recall"]
    assert recall_call["usage"] == billed(upstream.replies_sent[-2])
    assert [e["message"]["role"] for e in p.events(conv)][-2:] == ["user", "assistant"]
