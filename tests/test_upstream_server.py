"""Self-tests of the scripted upstream: it must speak the wire protocol the e2e tests rely on."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from tests.support.upstream_server import Reply, UpstreamServer, count_prompt_tokens, tool_call


@pytest.fixture(scope="module")
def server():
    with UpstreamServer(context_windows={"gpt-small": 200}) as s:
        yield s


@pytest.fixture
def up(server):
    server.clear()
    yield server
    server.clear()


def sse_events(lines: list[str]) -> list[str]:
    return [line[len("data: ") :] for line in lines if line.startswith("data: ")]


def post(up, body, **kw):
    return httpx.post(
        f"{up.base_url}/chat/completions", json=body, headers={"Authorization": "Bearer sk-test"}, timeout=10, **kw
    )


def test_nonstream_default_echo_and_usage(up):
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello there"}]}
    r = post(up, body)
    assert r.status_code == 200
    for h in ("x-request-id", "x-ratelimit-remaining-requests", "openai-processing-ms"):
        assert h in r.headers
    data = r.json()
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    assert data["choices"][0]["message"]["content"] == "ok: hello there"
    assert data["choices"][0]["finish_reason"] == "stop"
    usage = data["usage"]
    assert usage["prompt_tokens"] == count_prompt_tokens(body)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    rec = up.last_chat
    assert rec.body == body and rec.headers["authorization"] == "Bearer sk-test"


def test_nonstream_tool_calls_n2_cached_reasoning_with_sdk(up):
    calls = [tool_call("a", {"x": 1}), tool_call("b", {"y": 2})]
    up.push(Reply(tool_calls=calls, cached_tokens=5, reasoning_tokens=7, contents=None))
    client = openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
    res = client.chat.completions.create(model="gpt-4o", n=2, messages=[{"role": "user", "content": "go"}])
    assert len(res.choices) == 2
    msg = res.choices[0].message
    assert [c.id for c in msg.tool_calls] == [c["id"] for c in calls]
    assert msg.tool_calls[1].function.arguments == '{"y": 2}'
    assert res.choices[0].finish_reason == "tool_calls"
    assert res.usage.prompt_tokens_details.cached_tokens == 5
    assert res.usage.completion_tokens_details.reasoning_tokens == 7


def test_stream_without_include_usage_has_no_usage(up):
    up.push(Reply(content="abcdefghij", chunks=4))
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.stream("POST", f"{up.base_url}/chat/completions", json=body, timeout=10) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(list(r.iter_lines()))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("usage" not in c for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "abcdefghij"
    assert len(chunks) == 1 + 4 + 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_stream_with_include_usage_and_parallel_tools_via_sdk(up):
    calls = [tool_call("f", {"q": "long argument text"}), tool_call("g", {"r": [1, 2, 3]})]
    up.push(Reply(tool_calls=calls, chunks=3, cached_tokens=2))
    body = {
        "model": "gpt-4o",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "x"}],
    }
    with httpx.stream("POST", f"{up.base_url}/chat/completions", json=body, timeout=10) as r:
        events = sse_events(list(r.iter_lines()))
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("usage" in c for c in chunks)
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 2
    args: dict[int, str] = {}
    for c in chunks[:-1]:
        for tc in c["choices"][0]["delta"].get("tool_calls") or []:
            args[tc["index"]] = args.get(tc["index"], "") + tc["function"]["arguments"]
    assert args == {0: calls[0]["function"]["arguments"], 1: calls[1]["function"]["arguments"]}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"

    up.push(Reply(content="streamed!"))
    client = openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-4o", stream=True, stream_options={"include_usage": True}, messages=[{"role": "user", "content": "x"}]
    )
    got = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == "streamed!"
    assert got[-1].usage is not None and got[-1].choices == []


def test_validation_errors(up):
    cases = [
        ({"model": "gpt-4o"}, "missing_required_parameter"),
        ({"model": "gpt-4o", "messages": []}, "empty_array"),
        (
            {
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "c1", "content": "r"}],
            },
            None,
        ),
        (
            {
                "model": "gpt-4o",
                "messages": [
                    {"role": "user", "content": "a"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [tool_call("f", {}, "c1"), tool_call("f", {}, "c2")],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "r"},
                    {"role": "user", "content": "b"},
                ],
            },
            None,
        ),
        ({"model": "gpt-small", "messages": [{"role": "user", "content": "word " * 400}]}, "context_length_exceeded"),
    ]
    for body, code in cases:
        r = post(up, body)
        assert r.status_code == 400, body
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["code"] == code
    msgs = [r.body for r in up.chat_requests]
    assert len(msgs) == len(cases)
    r = post(up, cases[2][0])
    assert "must be a response to a preceeding message with 'tool_calls'" in r.json()["error"]["message"]
    r = post(up, cases[3][0])
    assert r.json()["error"]["message"].endswith("did not have response messages: c2")
    r = post(up, cases[4][0])
    assert r.json()["error"]["message"].startswith(
        "This model's maximum context length is 200 tokens. However, your messages resulted in "
    )
    r = post(up, {"model": "gpt-small", "max_tokens": 150, "messages": [{"role": "user", "content": "word " * 100}]})
    assert r.status_code == 400 and "in the completion" in r.json()["error"]["message"]
    assert up.pending == 0


def test_error_status_headers_and_models(up):
    up.push(Reply(status=429, headers={"retry-after": "1", "x-ratelimit-remaining-requests": "0"}))
    r = post(up, {"model": "gpt-4o", "messages": [{"role": "user", "content": "a"}]})
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    r = httpx.get(f"{up.base_url}/models")
    assert r.json()["object"] == "list" and r.json()["data"][0]["object"] == "model"


def test_hold_delivers_first_chunk_then_waits(up):
    hold = threading.Event()
    reply = Reply(content="one two three", hold=hold)
    up.push(reply)
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.stream("POST", f"{up.base_url}/chat/completions", json=body, timeout=10) as r:
        lines = r.iter_lines()
        first = next(lines)
        assert first.startswith("data: ") and not hold.is_set()
        # the server counts a chunk after writing it: the client may see it a moment earlier
        assert reply.first_chunk_sent.wait(5)
        time.sleep(0.05)
        assert reply.chunks_sent == 1
        hold.set()
        rest = list(lines)
    assert sse_events(rest)[-1] == "[DONE]"


def test_drop_and_hang(up):
    up.push(Reply(content="abcdef", drop_after_chunks=2))
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    got = []
    with pytest.raises(httpx.HTTPError):
        with httpx.stream("POST", f"{up.base_url}/chat/completions", json=body, timeout=10) as r:
            for line in r.iter_lines():
                got.append(line)
    assert "data: [DONE]" not in got and len(sse_events(got)) == 2

    reply = Reply(hang=True)
    up.push(reply)
    t0 = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{up.base_url}/chat/completions",
            timeout=httpx.Timeout(60, read=0.5),
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]},
        )
    elapsed = time.monotonic() - t0
    assert elapsed < 30, f"the 0.5 s read timeout fired after {elapsed:.1f} s (the other timeouts are 60 s)"
    assert reply.disconnected.wait(5)


def test_sent_records_match_the_wire(up):
    up.push(Reply(content="abc", chunks=2))
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.stream("POST", f"{up.base_url}/chat/completions", json=body, timeout=10) as r:
        events = [json.loads(e) for e in sse_events(list(r.iter_lines()))[:-1]]
        request_id = r.headers["x-request-id"]
    reply = up.last_reply
    assert reply.sent_chunks() == events
    assert reply.sent_headers["x-request-id"] == request_id
    r = post(up, {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
    assert up.last_reply.sent_json() == r.json()
