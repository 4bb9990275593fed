"""What the client gets is what upstream said; what upstream gets is what the client sent."""

from __future__ import annotations

import asyncio
import json

from tests.support.e2e import event_views, user, view, without_usage
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.upstream_server import Reply, tool_call

SYSTEM = {"role": "system", "content": "You are a terse assistant."}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_nonstream_sync_equals_upstream_and_uses_upstream_key(proxy, upstream, api_key):
    p = proxy()
    upstream.push(Reply(content="Hello from upstream", cached_tokens=3, reasoning_tokens=2))
    messages = [SYSTEM, user("hi sync")]
    raw = p.client(api_key).chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
    res = raw.parse()
    assert res.to_dict() == upstream.last_reply.sent_json()
    assert raw.headers.get("x-conversation-id")
    sent = upstream.last_chat
    assert sent.body["messages"] == messages
    assert sent.body["model"] == "gpt-4o"
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert all(api_key not in v for v in sent.headers.values()), "client key leaked upstream"


def test_stream_sync_chunks_equal_upstream(proxy, upstream, api_key):
    p = proxy()
    upstream.push(Reply(content="streaming reply text, five pieces", chunks=5))
    stream = p.client(api_key).chat.completions.create(model="gpt-4o", messages=[user("hi stream")], stream=True)
    got = [c.to_dict() for c in stream]
    assert got == without_usage(upstream.last_reply.sent_chunks())
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in got)
    assert text == "streaming reply text, five pieces"


async def test_async_nonstream_and_stream(proxy, upstream, api_key):
    p = proxy()
    async with p.async_client(api_key) as client:
        upstream.push(Reply(content="async answer"))
        res = await client.chat.completions.create(model="gpt-4o", messages=[user("hi async")])
        assert res.to_dict() == upstream.last_reply.sent_json()

        upstream.push(Reply(content="async streamed answer", chunks=4))
        stream = await client.chat.completions.create(
            model="gpt-4o",
            stream=True,
            stream_options={"include_usage": True},
            messages=[user("hi async"), res.choices[0].message.model_dump(exclude_none=True), user("again")],
        )
        got = [c.to_dict() async for c in stream]
    assert got == upstream.last_reply.sent_chunks()
    assert got[-1]["choices"] == [] and got[-1]["usage"]["prompt_tokens"] > 0


async def test_async_concurrent_conversations_stay_apart(proxy, upstream, api_key):
    p = proxy()
    # default replies echo the last user message, so the order upstream sees does not matter
    async with p.async_client(api_key) as client:  # one tenant, four conversations

        async def one(i: int) -> tuple[str, str]:
            raw = await client.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=[user(f"concurrent question {i}")]
            )
            return raw.headers["x-conversation-id"], raw.parse().choices[0].message.content

        results = await asyncio.gather(*(one(i) for i in range(4)))
    assert [r[1] for r in results] == [f"ok: concurrent question {i}" for i in range(4)]
    assert len({r[0] for r in results}) == 4


def test_tool_call_round_trip_nonstream(proxy, upstream, api_key):
    p = proxy()
    client = p.client(api_key)
    call = tool_call("get_weather", {"city": "Paris"})
    upstream.push(Reply(tool_calls=[call]), Reply(content="It is sunny in Paris."))
    messages = [SYSTEM, user("weather in Paris?")]
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages, tools=[WEATHER_TOOL])
    res = raw.parse()
    conv = raw.headers["x-conversation-id"]
    msg = res.choices[0].message
    assert res.choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls] == [
        (call["id"], "get_weather", '{"city": "Paris"}')
    ]
    messages += [
        msg.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call["id"], "content": '{"sky": "sunny"}'},
    ]
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages, tools=[WEATHER_TOOL])
    assert raw.parse().choices[0].message.content == "It is sunny in Paris."
    assert raw.headers["x-conversation-id"] == conv
    forwarded = upstream.last_chat.body["messages"]
    assert [view(m) for m in forwarded] == [view(m) for m in messages]
    events = p.events(conv)
    assert event_views(events) == [
        view(user("weather in Paris?")),
        view(msg.model_dump()),
        view(messages[-1]),
        view({"role": "assistant", "content": "It is sunny in Paris."}),
    ]


def test_parallel_tool_calls_streamed_round_trip(proxy, upstream, api_key):
    p = proxy()
    client = p.client(api_key)
    calls = [tool_call("get_weather", {"city": c}) for c in ("Paris", "Oslo", "Lima")]
    upstream.push(Reply(tool_calls=calls, chunks=4), Reply(content="Three cities done.", chunks=3))
    messages = [user("weather in three cities")]
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, tools=[WEATHER_TOOL], stream=True, parallel_tool_calls=True
    )
    conv = raw.headers["x-conversation-id"]
    acc: dict[int, dict] = {}
    finish = None
    for chunk in raw.parse():
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for d in choice.delta.tool_calls or []:
                slot = acc.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = d.id or slot["id"]
                if d.function:
                    slot["name"] += d.function.name or ""
                    slot["arguments"] += d.function.arguments or ""
    assert finish == "tool_calls"
    assert [acc[i] for i in sorted(acc)] == [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls
    ]
    assistant = {"role": "assistant", "content": None, "tool_calls": calls}
    messages += [assistant] + [
        {"role": "tool", "tool_call_id": c["id"], "content": f"result {i}"} for i, c in enumerate(calls)
    ]
    stream = client.chat.completions.create(model="gpt-4o", messages=messages, tools=[WEATHER_TOOL], stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Three cities done."
    assert upstream.chat_requests[-2].body["parallel_tool_calls"] is True
    calls_rec = p.wait_calls(conv, 2)
    first = calls_rec[0]["response"]
    assert [tc["id"] for tc in first["tool_calls"]] == [c["id"] for c in calls]
    assert [tc["function"]["arguments"] for tc in first["tool_calls"]] == [c["function"]["arguments"] for c in calls]
    assert event_views(p.events(conv)) == [view(m) for m in messages] + [
        view({"role": "assistant", "content": "Three cities done."})
    ]


def test_n2_choices(proxy, upstream, api_key):
    p = proxy()
    upstream.push(Reply(contents=["first choice", "second choice"]))
    res = p.client(api_key).chat.completions.create(model="gpt-4o", n=2, messages=[user("two answers please")])
    assert [c.message.content for c in res.choices] == ["first choice", "second choice"]
    assert [c.index for c in res.choices] == [0, 1]
    assert upstream.last_chat.body["n"] == 2
    assert res.to_dict() == upstream.last_reply.sent_json()


def test_request_fields_arrive_upstream_unchanged(proxy, upstream, api_key):
    p = proxy()
    schema = {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a"],
                "additionalProperties": False,
            },
        },
    }
    fields = {
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": schema,
        "seed": 42,
        "logprobs": True,
        "top_logprobs": 2,
        "temperature": 0.25,
        "user": "end-user-7",
    }
    extra = {"foo": {"bar": [1, 2, {"baz": None}], "q": "ü"}, "vendor_flag": True}
    upstream.push(Reply(content='{"a": "x"}'))
    res = p.client(api_key).chat.completions.create(
        model="gpt-4o", messages=[user("fields")], extra_body=extra, **fields
    )
    body = upstream.last_chat.body
    for key, value in {**fields, **extra}.items():
        assert body.get(key) == value, f"{key}: sent {value!r}, upstream got {body.get(key)!r}"
    assert res.choices[0].logprobs is not None and res.choices[0].logprobs.content

    # the same through a stream; stream_options.include_usage is the only addition
    upstream.push(Reply(content='{"a": "y"}'))
    list(
        p.client(api_key).chat.completions.create(
            model="gpt-4o", messages=[user("fields stream")], extra_body=extra, stream=True, **fields
        )
    )
    body = upstream.last_chat.body
    for key, value in {**fields, **extra}.items():
        assert body.get(key) == value, f"stream {key}: upstream got {body.get(key)!r}"
    assert body["stream"] is True and body["stream_options"]["include_usage"] is True


def test_passthrough_route_forwards_client_authorization(proxy, upstream, api_key):
    p = proxy()
    res = p.client(api_key).chat.completions.create(model="pass-model", messages=[user("pt")])
    assert res.choices[0].message.content == "ok: pt"
    assert upstream.last_chat.headers["authorization"] == f"Bearer {api_key}"


def test_models_endpoint(proxy, upstream, api_key):
    p = proxy()
    page = p.client(api_key).models.list()
    data = [m.to_dict() for m in page.data]
    assert data, "GET /v1/models returned no models"
    assert all(m["object"] == "model" and m["id"] for m in data)


def test_raw_body_bytes_not_reencoded_for_unicode(proxy, upstream, api_key):
    """Non-ASCII text survives both directions unchanged."""
    p = proxy()
    text = "naïve café — 日本語 🚀"
    upstream.push(Reply(content=text[::-1]))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user(text)]})
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == text[::-1]
    assert upstream.last_chat.body["messages"][0]["content"] == text
    assert json.loads(r.content) == upstream.last_reply.sent_json()
