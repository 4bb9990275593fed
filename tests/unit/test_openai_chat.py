"""OpenAI chat wire format: validation, stream reassembly and hiding the usage the proxy asked for."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.errors import BadRequest
from proxy.protocols.openai_chat.encode import with_usage_requested
from proxy.protocols.openai_chat.stream import (
    StreamAccumulator,
    StreamFilter,
    client_wants_usage,
    is_usage_only,
    strip_null_usage,
)
from proxy.protocols.openai_chat.validate import parse_body, validate_request
from proxy.protocols.openai_chat.wire import response_message
from proxy.sse import SseEvent, SseSplitter, parse_event

# -- parse_body -----------------------------------------------------------------------------------


def test_parse_body_object() -> None:
    assert parse_body(b'{"model": "m", "messages": []}') == {"model": "m", "messages": []}


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b'{"a": }', b"\xff\xfe{", b'{"a": "\xff"}'])
def test_parse_body_invalid_json(raw: bytes) -> None:
    with pytest.raises(BadRequest) as info:
        parse_body(raw)
    assert info.value.status == 400
    assert info.value.type == "invalid_request_error"
    assert "could not parse the JSON body" in info.value.message


@pytest.mark.parametrize(("raw", "kind"), [(b"[]", "list"), (b'"x"', "str"), (b"3", "int"), (b"null", "NoneType")])
def test_parse_body_not_an_object(raw: bytes, kind: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_body(raw)
    assert info.value.message == f"The request body must be a JSON object, got {kind}."


# -- validate_request -----------------------------------------------------------------------------

USER = {"role": "user", "content": "hi"}


def test_validate_happy_path() -> None:
    messages = [
        {"role": "system", "content": "s"},
        USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "ok"}]},
    ]
    model, got, stream = validate_request(
        {"model": "gpt-4o", "messages": messages, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert (model, got, stream) == ("gpt-4o", messages, True)
    assert got is messages


@pytest.mark.parametrize("stream", [None, False])
def test_validate_stream_defaults_false(stream: Any) -> None:
    body: dict[str, Any] = {"model": "m", "messages": [USER]}
    assert validate_request(body)[2] is False
    body["stream"] = stream
    assert validate_request(body)[2] is False


def _err(body: dict[str, Any]) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        validate_request(body)
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        pytest.param({"messages": [USER]}, "model", None, id="model-missing"),
        pytest.param({"model": "", "messages": [USER]}, "model", None, id="model-empty"),
        pytest.param({"model": 4, "messages": [USER]}, "model", None, id="model-not-string"),
        pytest.param({"model": "m"}, "messages", "missing_required_parameter", id="messages-missing"),
        pytest.param({"model": "m", "messages": None}, "messages", "missing_required_parameter", id="messages-null"),
        pytest.param({"model": "m", "messages": {"role": "user"}}, "messages", "invalid_type", id="messages-object"),
        pytest.param({"model": "m", "messages": "hi"}, "messages", "invalid_type", id="messages-string"),
        pytest.param({"model": "m", "messages": []}, "messages", "empty_array", id="messages-empty"),
        pytest.param({"model": "m", "messages": ["hi"]}, "messages[0]", "invalid_type", id="message-not-object"),
        pytest.param(
            {"model": "m", "messages": [USER, {"content": "x"}]},
            "messages[1].role",
            "missing_required_parameter",
            id="role-missing",
        ),
        pytest.param(
            {"model": "m", "messages": [{"role": 1, "content": "x"}]},
            "messages[0].role",
            "missing_required_parameter",
            id="role-not-string",
        ),
        pytest.param(
            {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
            "messages[0].role",
            "invalid_value",
            id="role-unknown",
        ),
        pytest.param(
            {"model": "m", "messages": [{"role": "user", "content": 5}]},
            "messages[0].content",
            "invalid_type",
            id="content-number",
        ),
        pytest.param(
            {"model": "m", "messages": [{"role": "user", "content": {"text": "x"}}]},
            "messages[0].content",
            "invalid_type",
            id="content-object",
        ),
        pytest.param(
            {"model": "m", "messages": [{"role": "assistant", "tool_calls": {"id": "c"}}]},
            "messages[0].tool_calls",
            "invalid_type",
            id="tool_calls-object",
        ),
        pytest.param(
            {"model": "m", "messages": [{"role": "assistant", "tool_calls": ["c"]}]},
            "messages[0].tool_calls",
            "invalid_type",
            id="tool_calls-item-not-object",
        ),
        pytest.param(
            {"model": "m", "messages": [USER, {"role": "tool", "content": "r"}]},
            "messages[1].tool_call_id",
            "missing_required_parameter",
            id="tool-without-id",
        ),
        pytest.param(
            {"model": "m", "messages": [{"role": "tool", "content": "r", "tool_call_id": 7}]},
            "messages[0].tool_call_id",
            "missing_required_parameter",
            id="tool-id-not-string",
        ),
        pytest.param({"model": "m", "messages": [USER], "stream": "yes"}, "stream", "invalid_type", id="stream-string"),
        pytest.param({"model": "m", "messages": [USER], "stream": 1}, "stream", "invalid_type", id="stream-int"),
        pytest.param(
            {"model": "m", "messages": [USER], "stream_options": [1]},
            "stream_options",
            "invalid_type",
            id="stream_options-list",
        ),
    ],
)
def test_validate_errors(body: dict[str, Any], param: str, code: str | None) -> None:
    err = _err(body)
    assert err.param == param
    assert err.code == code
    assert err.openai_body() == {
        "error": {"message": err.message, "type": "invalid_request_error", "param": param, "code": code}
    }


def test_validate_role_error_lists_supported_roles() -> None:
    err = _err({"model": "m", "messages": [{"role": "robot"}]})
    assert err.message == (
        "Invalid value: 'robot'. Supported values are: assistant, developer, function, system, tool, user."
    )


# -- stream options -------------------------------------------------------------------------------


def test_client_wants_usage() -> None:
    assert client_wants_usage({"stream_options": {"include_usage": True}}) is True
    assert client_wants_usage({"stream_options": {"include_usage": False}}) is False
    assert client_wants_usage({"stream_options": {"include_usage": "true"}}) is False
    assert client_wants_usage({"stream_options": None}) is False
    assert client_wants_usage({}) is False


def test_with_usage_requested_keeps_other_options_and_does_not_mutate() -> None:
    body = {"model": "m", "stream": True, "stream_options": {"include_obfuscation": False}}
    out = with_usage_requested(body)
    assert out == {
        "model": "m",
        "stream": True,
        "stream_options": {"include_obfuscation": False, "include_usage": True},
    }
    assert body == {"model": "m", "stream": True, "stream_options": {"include_obfuscation": False}}
    assert with_usage_requested({"model": "m"}) == {"model": "m", "stream_options": {"include_usage": True}}
    assert with_usage_requested({"stream_options": None})["stream_options"] == {"include_usage": True}


def test_response_message() -> None:
    msg = {"role": "assistant", "content": "hi"}
    assert response_message({"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}) == (msg, "stop")
    assert response_message({"choices": []}) == (None, None)
    assert response_message({}) == (None, None)
    assert response_message({"choices": [{"message": "x", "finish_reason": "length"}]}) == (None, "length")


# -- StreamAccumulator ----------------------------------------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    index: int = 0,
    finish: str | None = None,
    usage: Any = "absent",
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-x",
        "choices": [{"index": index, "delta": delta or {}, "finish_reason": finish}],
    }
    if usage != "absent":
        out["usage"] = usage
    out.update(extra)
    return out


USAGE = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}


def test_content_split_over_chunks() -> None:
    acc = StreamAccumulator()
    acc.feed(chunk({"role": "assistant", "content": ""}))
    for piece in ["Hel", "lo, ", "wor", "ld"]:
        acc.feed(chunk({"content": piece}))
    acc.feed(chunk({}, finish="stop"))
    assert acc.message() == {"role": "assistant", "content": "Hello, world"}
    assert acc.finish_reason() == "stop"
    assert acc.id == "chatcmpl-1"
    assert acc.model == "gpt-x"
    assert acc.chunks == 6


def test_empty_stream_has_no_message() -> None:
    acc = StreamAccumulator()
    assert acc.message() is None
    assert acc.finish_reason() is None
    assert acc.usage is None


def test_parallel_tool_calls_with_split_arguments() -> None:
    acc = StreamAccumulator()
    acc.feed(chunk({"role": "assistant", "content": None}))
    acc.feed(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_a", "type": "function", "function": {"name": "read", "arguments": ""}}
                ]
            }
        )
    )
    acc.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"pa'}}]}))
    acc.feed(
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "call_b", "type": "function", "function": {"name": "grep", "arguments": '{"q":'}}
                ]
            }
        )
    )
    acc.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "a.py"}'}}]}))
    acc.feed(chunk({"tool_calls": [{"index": 1, "function": {"arguments": ' "x"}'}}]}))
    acc.feed(chunk({}, finish="tool_calls"))
    assert acc.message() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "grep", "arguments": '{"q": "x"}'}},
        ],
    }
    assert acc.finish_reason() == "tool_calls"


def test_tool_calls_ordered_by_index_not_arrival() -> None:
    acc = StreamAccumulator()
    acc.feed(chunk({"tool_calls": [{"index": 1, "id": "second", "function": {"name": "b", "arguments": "{}"}}]}))
    acc.feed(chunk({"tool_calls": [{"index": 0, "id": "first", "function": {"name": "a", "arguments": "{}"}}]}))
    message = acc.message()
    assert message is not None
    assert [c["id"] for c in message["tool_calls"]] == ["first", "second"]


def test_n_greater_than_one_choices() -> None:
    acc = StreamAccumulator()
    acc.feed(chunk({"role": "assistant", "content": "A"}, index=0))
    acc.feed(chunk({"role": "assistant", "content": "B"}, index=1))
    acc.feed(chunk({"content": "a"}, index=0))
    acc.feed(chunk({"content": "b"}, index=1))
    acc.feed(chunk({}, index=1, finish="length"))
    acc.feed(chunk({}, index=0, finish="stop"))
    assert acc.message(0) == {"role": "assistant", "content": "Aa"}
    assert acc.message(1) == {"role": "assistant", "content": "Bb"}
    assert (acc.finish_reason(0), acc.finish_reason(1)) == ("stop", "length")
    assert acc.message(2) is None


def test_refusal_and_reasoning_are_concatenated() -> None:
    acc = StreamAccumulator()
    acc.feed(chunk({"reasoning_content": "think "}))
    acc.feed(chunk({"reasoning_content": "more"}))
    acc.feed(chunk({"refusal": "I can"}))
    acc.feed(chunk({"refusal": "not."}))
    assert acc.message() == {
        "role": "assistant",
        "content": None,
        "refusal": "I cannot.",
        "reasoning_content": "think more",
    }


def test_usage_last_snapshot_wins() -> None:
    acc = StreamAccumulator()
    acc.feed(chunk({"content": "x"}, usage=None))
    assert acc.usage is None
    acc.feed({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
    acc.feed({"id": "chatcmpl-1", "choices": [], "usage": USAGE})
    acc.feed(chunk({}, usage=None))  # a later null does not erase the snapshot
    assert acc.usage == USAGE


def test_duplicated_final_chunk_adds_nothing() -> None:
    acc = StreamAccumulator()
    acc.feed(chunk({"content": "hi"}))
    final = {"id": "chatcmpl-1", "choices": [], "usage": USAGE}
    acc.feed(final)
    acc.feed(json.loads(json.dumps(final)))
    assert acc.usage == USAGE
    assert acc.message() == {"role": "assistant", "content": "hi"}


def test_accumulator_ignores_non_dict_choices() -> None:
    acc = StreamAccumulator()
    acc.feed({"choices": ["junk", None]})
    assert acc.message() is None


# -- strip_null_usage -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            b'data: {"id":"x","choices":[],"usage":null}\n\n', b'data: {"id":"x","choices":[]}\n\n', id="compact-last"
        ),
        pytest.param(b'data: {"usage":null,"id":"x"}\n\n', b'data: {"id":"x"}\n\n', id="compact-first"),
        pytest.param(
            b'data: {"id":"x","usage":null,"model":"m"}\n\n', b'data: {"id":"x","model":"m"}\n\n', id="compact-middle"
        ),
        pytest.param(
            b'data: {"id": "x", "choices": [], "usage": null}\n\n',
            b'data: {"id": "x", "choices": []}\n\n',
            id="spaced-last",
        ),
        pytest.param(b'data: {"usage": null, "id": "x"}\n\n', b'data: {"id": "x"}\n\n', id="spaced-first"),
        pytest.param(
            b'data: {"id": "x", "usage": null, "model": "m"}\r\n\r\n',
            b'data: {"id": "x", "model": "m"}\r\n\r\n',
            id="spaced-middle-crlf",
        ),
    ],
)
def test_strip_null_usage(raw: bytes, expected: bytes) -> None:
    event = parse_event(raw)
    assert strip_null_usage(raw, json.loads(event.data or "")) == expected
    # The result still parses to the same chunk without the key.
    stripped = json.loads(parse_event(expected).data or "")
    assert stripped == {k: v for k, v in json.loads(event.data or "").items() if k != "usage"}


def test_strip_null_usage_keeps_text_that_merely_mentions_usage() -> None:
    content = 'a,"usage":null, "usage": null'
    body = {"id": "x", "choices": [{"index": 0, "delta": {"content": content}}], "usage": None}
    raw = b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
    out = strip_null_usage(raw, body)
    assert json.loads(parse_event(out).data or "") == {
        "id": "x",
        "choices": [{"index": 0, "delta": {"content": content}}],
    }


def test_strip_null_usage_leaves_other_chunks_alone() -> None:
    raw = b'data: {"id":"x","usage":{"prompt_tokens":1}}\n\n'
    assert strip_null_usage(raw, {"id": "x", "usage": {"prompt_tokens": 1}}) is raw
    raw2 = b'data: {"id":"x"}\n\n'
    assert strip_null_usage(raw2, {"id": "x"}) is raw2


def test_strip_null_usage_fallback_reserializes() -> None:
    raw = b'data: {"id":"x","usage" : null}\n\n'
    assert strip_null_usage(raw, {"id": "x", "usage": None}) == b'data: {"id":"x"}\n\n'


def test_is_usage_only() -> None:
    assert is_usage_only({"choices": [], "usage": USAGE}) is True
    assert is_usage_only({"choices": [{"index": 0, "delta": {}}], "usage": USAGE}) is False
    assert is_usage_only({"choices": []}) is False


# -- StreamFilter ---------------------------------------------------------------------------------


def sse(obj: Any, spaced: bool = False) -> bytes:
    text = json.dumps(obj) if spaced else json.dumps(obj, separators=(",", ":"))
    return b"data: " + text.encode() + b"\n\n"


def events_of(stream: bytes) -> list[SseEvent]:
    splitter = SseSplitter()
    out = splitter.feed(stream)
    assert splitter.rest() == b""
    return out


def run(filter_: StreamFilter, stream: bytes) -> bytes:
    return b"".join(out for e in events_of(stream) if (out := filter_(e)) is not None)


def upstream_stream(spaced: bool = False) -> bytes:
    """What an upstream sends when the proxy asked for include_usage."""
    return b"".join(
        [
            b": OPENROUTER PROCESSING\n\n",
            sse(chunk({"role": "assistant", "content": ""}, usage=None), spaced),
            sse(chunk({"content": "Hi"}, usage=None), spaced),
            sse(chunk({}, finish="stop", usage=None), spaced),
            sse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "gpt-x",
                    "choices": [],
                    "usage": USAGE,
                },
                spaced,
            ),
            b"data: [DONE]\n\n",
        ]
    )


def client_view(spaced: bool = False) -> bytes:
    """What the same upstream sends when nobody asked for usage."""
    return b"".join(
        [
            b": OPENROUTER PROCESSING\n\n",
            sse(chunk({"role": "assistant", "content": ""}), spaced),
            sse(chunk({"content": "Hi"}), spaced),
            sse(chunk({}, finish="stop"), spaced),
            b"data: [DONE]\n\n",
        ]
    )


@pytest.mark.parametrize("spaced", [False, True])
def test_filter_hides_usage_when_client_did_not_ask(spaced: bool) -> None:
    f = StreamFilter(client_wants_usage=False)
    assert run(f, upstream_stream(spaced)) == client_view(spaced)
    # ... while the proxy still learns everything.
    assert f.accumulator.usage == USAGE
    assert f.accumulator.message() == {"role": "assistant", "content": "Hi"}
    assert f.accumulator.finish_reason() == "stop"
    assert f.done is True


@pytest.mark.parametrize("spaced", [False, True])
def test_filter_keeps_bytes_identical_when_client_asked(spaced: bool) -> None:
    f = StreamFilter(client_wants_usage=True)
    stream = upstream_stream(spaced)
    for event in events_of(stream):
        assert f(event) == event.raw
    assert run(StreamFilter(client_wants_usage=True), stream) == stream
    assert f.accumulator.usage == USAGE
    assert f.done is True


def test_filter_passes_non_json_and_comments_untouched() -> None:
    f = StreamFilter(client_wants_usage=False)
    for raw in [b": ping\n\n", b"data: not json\n\n", b"data: [1,2]\n\n", b"event: x\n\n"]:
        assert f(parse_event(raw)) == raw
    assert f.done is False
    assert f.accumulator.chunks == 0


def test_filter_done_with_spaces() -> None:
    f = StreamFilter(client_wants_usage=False)
    assert f(parse_event(b"data:  [DONE] \n\n")) == b"data:  [DONE] \n\n"
    assert f.done is True


def test_filter_duplicated_usage_chunk_is_hidden_twice_and_counted_once() -> None:
    f = StreamFilter(client_wants_usage=False)
    final = sse({"id": "chatcmpl-1", "choices": [], "usage": USAGE})
    assert f(parse_event(final)) is None
    assert f(parse_event(final)) is None
    assert f.accumulator.usage == USAGE


def test_filter_forwards_choiceless_chunk_that_carries_no_usage() -> None:
    # Azure OpenAI opens every stream with a `"choices": []` chunk holding prompt_filter_results. With
    # include_usage the upstream adds `"usage": null` to it; it is not the usage chunk, and a client
    # that did not ask must still receive it, minus the null usage.
    azure_first = {
        "id": "",
        "object": "",
        "created": 0,
        "model": "",
        "choices": [],
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],
    }
    f = StreamFilter(client_wants_usage=False)
    out = f(parse_event(sse({**azure_first, "usage": None})))
    assert out == sse(azure_first)


def test_accumulator_content_delta_with_finish_and_extras_in_one_chunk() -> None:
    """A delta of content alone skips the other fields' checks; its choice's finish reason still
    counts, and a delta holding content with other text fields is read whole."""
    acc = StreamAccumulator()
    acc.feed({"choices": [{"index": 0, "delta": {"content": "a", "reasoning_content": "r1"}}]})
    acc.feed({"choices": [{"index": 0, "delta": {"refusal": "no", "content": "b"}}]})
    acc.feed({"choices": [{"index": 0, "delta": {"content": "c"}, "finish_reason": "length"}]})
    assert acc.message(0) == {"role": "assistant", "content": "abc", "reasoning_content": "r1", "refusal": "no"}
    assert list(acc.message(0) or {}) == ["role", "content", "reasoning_content", "refusal"]
    assert acc.finish_reason(0) == "length"
