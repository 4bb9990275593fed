"""The Gemini API end to end: the real `google-genai` SDK -> the real proxy subprocess -> a
scripted upstream that validates like generativelanguage.googleapis.com
(tests/support/gemini_upstream.py)."""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.agents.harness import outcome, wait_idle
from tests.support.e2e import SCRIPTED_TIMEOUTS, asks_shared_summary, scripted_route
from tests.support.gemini_rules import SKIP_SIGNATURE, sign
from tests.support.gemini_upstream import GeminiUpstream, Reply
from tests.support.proxy_process import ADMIN_TOKEN, UPSTREAM_KEY

MODEL = "gemini-3-flash"
SMALL = "gemini-3-small"
WINDOW = 6000
SMALL_POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 800,
    "keep_recent_tokens": 1200,
    "summary_chunk_tokens": 1500,
    "overflow_wait": 20,
    "summarizer": {"timeout": 5, "max_attempts": 2},
}
SUMMARY = (
    "## Goal\nFind the deploy token.\n## Constraints\nnone\n## Decisions\nnone\n## Key facts\n"
    "TOKEN=kiwi-4471 (f0)\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nRead on."
)
SHELL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="run_shell_command",
            description="Run a shell command and return its output.",
            parameters={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        )
    ]
)


@pytest.fixture(scope="module")
def gemini_server() -> Iterator[GeminiUpstream]:
    server = GeminiUpstream(api_key=UPSTREAM_KEY, context_windows={SMALL: int(WINDOW * 1.25)})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def gup(gemini_server: GeminiUpstream) -> Iterator[GeminiUpstream]:
    gemini_server.clear()
    yield gemini_server
    gemini_server.clear()


def _config(server: GeminiUpstream, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "routes": [scripted_route("gemini", "gemini-*", "/v1beta/models", server.url)],
        "policies": {"default": policy or {"context_window": 200000, "max_output_tokens": 4096}},
    }


@pytest.fixture
def proxied(proxy, gup):
    def start(policy: dict[str, Any] | None = None):
        return proxy(**_config(gup, policy))

    return start


def client(p, api_key: str) -> genai.Client:
    options = types.HttpOptions(base_url=p.url, api_version="v1beta", timeout=30_000)
    return genai.Client(api_key=api_key, http_options=options)


def expected_usage(raw: dict[str, Any]) -> dict[str, Any]:
    cached = raw.get("cachedContentTokenCount", 0)
    thoughts = raw.get("thoughtsTokenCount", 0)
    return {
        "input_total": raw["promptTokenCount"],
        "input_uncached": raw["promptTokenCount"] - cached,
        "cache_read": cached,
        "cache_write": None,
        "output": raw.get("candidatesTokenCount", 0) + thoughts,
        "reasoning": thoughts,
    }


def records(p, conv: str, n: int) -> list[dict[str, Any]]:
    return p.wait_calls(conv, n, until=lambda cs: all(c["status"] != "pending" for c in cs))


def test_generate_content_goes_with_the_route_key_and_is_recorded(proxied, gup, api_key):
    p = proxied()
    gup.push(Reply(text="hello there", thought="a short thought"))
    c = client(p, api_key)  # held: a client that is collected closes its connections
    raw = c.models.generate_content(model=MODEL, contents="hi")
    assert raw.text == "hello there"
    sent = gup.model_requests[-1]
    assert sent.path == f"/v1beta/models/{MODEL}:generateContent" and sent.query == ""
    assert sent.headers["x-goog-api-key"] == UPSTREAM_KEY and api_key not in json.dumps(sent.headers)
    assert sent.body == {"contents": [{"parts": [{"text": "hi"}], "role": "user"}]}
    conv = raw.sdk_http_response.headers["x-conversation-id"]
    call = records(p, conv, 1)[0]
    reply = gup.replies_sent[-1]
    assert call["usage_raw"] == reply.usage and call["usage"] == expected_usage(reply.usage)
    assert call["usage"]["reasoning"] > 0 and call["status"] == "complete" and call["finish_reason"] == "STOP"
    assert call["response"]["role"] == "assistant" and call["response"]["content"] == "hello there"


def test_stream_is_relayed_byte_for_byte_and_reassembled(proxied, gup, api_key):
    p = proxied()
    reply = Reply(text="Checking the files now.", calls=[{"name": "run_shell_command", "args": {"command": "ls"}}])
    reply.thought = "look first"
    gup.push(reply)
    body = {
        "contents": [{"role": "user", "parts": [{"text": "list files"}]}],
        "tools": [{"functionDeclarations": [{"name": "run_shell_command", "description": "run"}]}],
    }
    url = f"{p.url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    with httpx.stream("POST", url, json=body, headers={"x-goog-api-key": api_key}, timeout=30) as r:
        data = b"".join(r.iter_raw())
        conv = r.headers["x-conversation-id"]
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    chunks = [json.loads(line[6:]) for line in data.decode().split("\r\n\r\n") if line.startswith("data: ")]
    assert len(chunks) == 4 and chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    call = records(p, conv, 1)[0]
    assert call["status"] == "complete" and call["usage"] == expected_usage(reply.usage)
    response = call["response"]
    assert response["content"] == "Checking the files now."
    (tool_call,) = response["tool_calls"]
    assert tool_call["function"] == {"name": "run_shell_command", "arguments": '{"command":"ls"}'}
    part = response["_gemini"]["parts"][-1]
    assert part["thoughtSignature"] == sign(part)  # the signature kept as it came


def _chat_turns(chat: Any, gup: GeminiUpstream, n: int, stream: bool) -> str:
    """`n` shell steps, then the answer: the model calls the tool, the SDK user answers with its
    output (the first one holding the token). The model's replies are scripted by the server's
    responder, which answers the proxy's summarizer calls (they carry no tools) with a summary."""
    script = deque(
        Reply(thought=f"step {k}", calls=[{"name": "run_shell_command", "args": {"command": f"cat f{k}"}}])
        for k in range(n)
    )
    script.append(Reply(text="The token is kiwi-4471."))
    gup.responder = lambda body: Reply(text=SUMMARY) if _is_summary(body) else script.popleft()
    message: Any = "Find the deploy token; run one command per step."
    for step in range(n + 1):
        if stream:
            chunks = list(chat.send_message_stream(message))
            calls = [call for chunk in chunks for call in chunk.function_calls or []]
            text = "".join(chunk.text or "" for chunk in chunks if not chunk.function_calls)
        else:
            response = chat.send_message(message)
            calls, text = response.function_calls or [], response.text or ""
        if step == n:
            return text
        assert calls[0].name == "run_shell_command" and calls[0].args == {"command": f"cat f{step}"}
        output = f"f{step}: " + ("TOKEN=kiwi-4471 " if step == 0 else "") + f"line {step} " * 200
        message = types.Part.from_function_response(name="run_shell_command", response={"output": output})
    raise AssertionError("unreachable")


def _is_summary(body: Any) -> bool:
    return isinstance(body, dict) and ("tools" not in body or asks_shared_summary(body))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_function_calling_chat_is_one_conversation(proxy, gup, api_key, stream):
    """A chat with function calls and signed thoughts on a gemini-3 model: every turn is
    accepted (calls and responses paired, signatures back unmodified) and they make one
    conversation on one branch, the stored answers equal to the turns the SDK re-sends."""
    p = proxy(fresh=True, **_config(gup))
    config = types.GenerateContentConfig(
        tools=[SHELL], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    c = client(p, api_key)
    chat = c.chats.create(model=MODEL, config=config)
    answer = _chat_turns(chat, gup, 3, stream)
    assert answer == "The token is kiwi-4471."
    assert gup.rejections == []
    last = gup.model_requests[-1]
    assert [c["role"] for c in last.body["contents"]] == ["user", "model"] * 3 + ["user"]
    assert "x-conversation-id" not in last.headers  # the proxy's own headers never go upstream
    got = outcome(p, 4)
    assert len(got.conversations) == 1 and len(got.branches) == 1 and len(got.calls) == 4
    events = p.events(got.conversations[0]["id"])
    assert [e["message"]["role"] for e in events] == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]


def test_small_window_projects_and_every_call_is_accepted(proxy, gup, api_key):
    """Tool results far past the window: the proxy trims and summarizes what it sends, the
    upstream (which pairs calls and responses and checks signatures) accepts every call, and the
    ledger equals what the upstream billed."""
    p = proxy(fresh=True, **_config(gup, SMALL_POLICY))
    config = types.GenerateContentConfig(
        tools=[SHELL], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    c = client(p, api_key)
    chat = c.chats.create(model=SMALL, config=config)
    answer = _chat_turns(chat, gup, 22, stream=False)
    assert answer == "The token is kiwi-4471."
    wait_idle(p)
    got = outcome(p, len(gup.replies_sent))
    assert gup.rejections == [] and gup.overflows == []
    assert len(got.conversations) == 1 and len(got.branches) == 1 and got.compactions >= 1
    main = [r for r in gup.model_requests if not _is_summary(r.body)]
    assert len(main[-1].body["contents"]) < len(chat.get_history())  # the window held, not the history
    usages = [r.usage for r in gup.replies_sent if r.usage]
    assert got.ledger["input_total"] == sum(u["promptTokenCount"] for u in usages)
    assert got.ledger["output"] == sum(u["candidatesTokenCount"] + u.get("thoughtsTokenCount", 0) for u in usages)


def test_query_key_is_the_callers_and_never_goes_upstream(proxied, gup, api_key):
    p = proxied()
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    r = httpx.post(f"{p.url}/v1beta/models/{MODEL}:generateContent?key={api_key}", json=body, timeout=30)
    assert r.status_code == 200, r.text
    sent = gup.model_requests[-1]
    assert sent.query == "" and sent.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert api_key not in json.dumps(sent.headers)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"contents": []}, "contents is not specified"),
        ({"contents": [{"role": "system", "parts": [{"text": "x"}]}]}, "Please use a valid role: user, model."),
        ({"contents": [{"role": "user", "parts": []}]}, "contents.parts must not be empty"),
        ([1, 2], "Invalid JSON payload received"),
    ],
)
def test_bad_input_is_a_gemini_error(proxied, gup, api_key, body, words):
    p = proxied()
    r = httpx.post(
        f"{p.url}/v1beta/models/{MODEL}:generateContent", json=body, headers={"x-goog-api-key": api_key}, timeout=30
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT" and words in error["message"]
    assert gup.model_requests == []


def test_sdk_raises_the_upstreams_error(proxied, gup, api_key):
    p = proxied()
    gup.push(Reply(status=503))
    c = client(p, api_key)
    with pytest.raises(genai_errors.ServerError) as caught:
        c.models.generate_content(model=MODEL, contents="hi")
    assert caught.value.code == 503 and caught.value.status == "UNAVAILABLE"


def _recall_result(body: Any) -> str | None:
    """The text of the recall result the request ends with, if it does."""
    last = (body.get("contents") or [{}])[-1] if isinstance(body, dict) else {}
    for part in last.get("parts") or []:
        response = part.get("functionResponse") or {}
        if response.get("name") == "ctxproxy_recall":
            return json.dumps(response.get("response"))
    return None


@pytest.mark.parametrize("first", ["recall", "client", "text"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_recall_detour_is_invisible(proxy, gup, api_key, stream, first):
    """The recall tool goes as a functionDeclaration; the model's call of it is answered by the
    proxy (a function response after the signed call turn, accepted by the upstream) and the
    client sees only the final answer, which quotes what recall found in the trimmed result.
    When the model called a client tool first, that call (which carried the turn's signature) is
    dropped from the detour and the recall call stands in with Gemini's documented placeholder;
    when it wrote text first, a stream's text reached the client and the answer continues it."""
    p = proxy(fresh=True, **_config(gup, SMALL_POLICY))
    steps = 12
    script = deque(
        Reply(thought=f"step {k}", calls=[{"name": "run_shell_command", "args": {"command": f"cat f{k}"}}])
        for k in range(steps)
    )
    recall = {"name": "ctxproxy_recall", "args": {"query": "TOKEN"}}
    shell = {"name": "run_shell_command", "args": {"command": "ls"}}
    calls = [recall] if first != "client" else [shell, recall]
    script.append(Reply(thought="look it up", calls=calls, text="Let me check." if first == "text" else None))

    def respond(body: Any) -> Reply:
        if _is_summary(body):
            return Reply(text=SUMMARY.replace("TOKEN=kiwi-4471 (f0)", "the token is in f0"))
        found = _recall_result(body)
        if found is not None:
            token = re.search(r"kiwi-\d+", found)
            return Reply(text=f"The token is {token.group(0) if token else 'unknown'}.")
        return script.popleft()

    gup.responder = respond
    config = types.GenerateContentConfig(
        tools=[SHELL], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    c = client(p, api_key)
    chat = c.chats.create(model=SMALL, config=config)
    message: Any = "Find the deploy token; run one command per step."
    for step in range(steps + 1):
        if stream:
            chunks = list(chat.send_message_stream(message))
            calls = [call for chunk in chunks for call in chunk.function_calls or []]
            text = "".join(chunk.text or "" for chunk in chunks if not chunk.function_calls)
        else:
            response = chat.send_message(message)
            calls, text = response.function_calls or [], response.text or ""
        if step == steps:
            break
        output = f"f{step}: " + ("TOKEN=kiwi-4471 " if step == 0 else "") + f"line {step} " * 200
        message = types.Part.from_function_response(name="run_shell_command", response={"output": output})
    # a stream's text before the recall call already reached the client: the answer continues it
    shown = "Let me check." if first == "text" and stream else ""
    assert calls == [] and text == shown + "The token is kiwi-4471."
    assert gup.rejections == []
    offered = [r for r in gup.model_requests if not _is_summary(r.body)]
    assert all(any("ctxproxy_recall" in json.dumps(t) for t in r.body["tools"]) for r in offered)
    followup = offered[-1].body["contents"]
    assert [c["role"] for c in followup[-2:]] == ["model", "user"]
    signed = followup[-2]["parts"][-1]
    expected = sign(signed) if first != "client" else SKIP_SIGNATURE
    assert signed["functionCall"]["name"] == "ctxproxy_recall" and signed["thoughtSignature"] == expected
    wait_idle(p)
    got = outcome(p, len(gup.replies_sent))
    assert len(got.conversations) == 1 and len(got.branches) == 1
    assert [c["purpose"] for c in got.calls].count("recall") == 1
    conv = got.conversations[0]["id"]
    for call in got.main_calls:  # the inspector rebuilds each projection, recall tool included
        view = httpx.get(
            f"{p.url}/ui/api/conversations/{conv}/calls/{call['id']}",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=30,
        ).json()
        assert view["verified"], view["mismatches"]


def test_an_overflow_teaches_the_window_and_is_sent_again(proxy, gup, api_key):
    """The upstream's window is smaller than the policy says: its refusal ("The input token count
    (N) exceeds the maximum number of tokens allowed (W).") is read as an overflow, the proxy
    projects smaller and sends again, and the client never sees the refusal."""
    model = "gemini-3-tight"
    gup.context_windows[model] = 4000
    p = proxy(fresh=True, **_config(gup, SMALL_POLICY))
    config = types.GenerateContentConfig(
        tools=[SHELL], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    c = client(p, api_key)
    answer = _chat_turns(c.chats.create(model=model, config=config), gup, 10, stream=False)
    assert answer == "The token is kiwi-4471."
    assert gup.overflows and len(gup.rejections) == len(gup.overflows)  # refused only as too long
    assert all(m.counted <= 4000 for m in gup.measured[gup.measured.index(gup.overflows[-1]) + 1 :])
    (learned,) = p.admin_json("estimates")["data"]
    # Gemini limits the input alone: the window learned is that limit plus the reply's reserve
    assert learned["learned_window"] == 4000 + SMALL_POLICY["max_output_tokens"], learned


def _last_user_text(body: dict[str, Any]) -> str:
    texts = [p.get("text", "") for c in body["contents"] if c.get("role") == "user" for p in c["parts"]]
    return texts[-1] if texts else ""


def test_long_term_memory_on_the_gemini_wire(proxy, gup, api_key):
    """The memory tool is a functionDeclaration too: the model saves a fact through it (answered by
    the proxy, never seen by the client), and a later conversation of the project is given it in
    a user-role block, never in the system instruction."""
    policy = {"context_window": 200000, "max_output_tokens": 4096, "memory": {"enabled": True, "scopes": ["project"]}}
    p = proxy(fresh=True, **_config(gup, policy))

    def respond(body: dict[str, Any]) -> Reply:
        last = body["contents"][-1]["parts"][-1]
        if last.get("functionResponse", {}).get("name") == "ctxproxy_memory":
            return Reply(text="Noted.")
        said = _last_user_text(body)
        if said.startswith("Remember: "):
            save = {"action": "save", "text": said.removeprefix("Remember: ")}
            return Reply(thought="save it", calls=[{"name": "ctxproxy_memory", "args": save}])
        found = re.search(r"deploy target: [\w-]+", json.dumps(body["contents"]))
        return Reply(text=found.group(0) if found else "unknown")

    gup.responder = respond
    options = types.HttpOptions(
        base_url=p.url, api_version="v1beta", timeout=30_000, headers={"X-Ctxproxy-Project": "/srv/gemini-app"}
    )
    c = genai.Client(api_key=api_key, http_options=options)
    config = types.GenerateContentConfig(
        tools=[SHELL], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    saved = c.chats.create(model=MODEL, config=config).send_message("Remember: deploy target: staging-2")
    assert saved.text == "Noted." and not saved.function_calls
    (memory,) = p.admin_json("memories")["data"]
    assert memory["text"] == "deploy target: staging-2" and memory["status"] == "active"
    asked = c.chats.create(model=MODEL, config=config).send_message("Question: deploy target?")
    assert asked.text == "deploy target: staging-2"
    body = gup.model_requests[-1].body
    blocks = [c for c in body["contents"] if "<memories" in json.dumps(c)]
    assert [b["role"] for b in blocks] == ["user"] and "<memories" not in json.dumps(body.get("systemInstruction"))
    assert gup.rejections == []


def test_a_method_the_proxy_does_not_serve_answers_in_geminis_shape(proxied, gup, api_key):
    p = proxied()
    body = {"content": {"parts": [{"text": "hi"}]}}
    r = httpx.post(
        f"{p.url}/v1beta/models/{MODEL}:embedContent", json=body, headers={"x-goog-api-key": api_key}, timeout=30
    )
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND", r.text
    assert gup.requests == []


@pytest.mark.parametrize("where", ["header", "query"])
def test_without_a_route_key_the_callers_own_key_goes_upstream_as_a_header(proxy, api_key, where):
    with GeminiUpstream(api_key=api_key) as own:
        route = {
            "name": "gemini",
            "match": {"model": "gemini-*", "path": "/v1beta/models"},
            "upstream": {"base_url": own.url, "timeouts": SCRIPTED_TIMEOUTS},  # no api_key_env: the caller's
            "policy": "default",
        }
        p = proxy(routes=[route], policies={"default": {"context_window": 200000, "max_output_tokens": 4096}})
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        url = f"{p.url}/v1beta/models/{MODEL}:generateContent"
        if where == "header":
            r = httpx.post(url, json=body, headers={"x-goog-api-key": api_key}, timeout=30)
        else:
            r = httpx.post(url, params={"key": api_key}, json=body, timeout=30)
        assert r.status_code == 200, r.text
        (sent,) = own.model_requests
        assert sent.headers["x-goog-api-key"] == api_key and sent.query == ""
