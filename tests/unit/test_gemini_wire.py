"""The Gemini wire's pure parts: conversion both ways, identity of re-sent turns, stream
observation, usage, error shapes and the binding of a path to its model."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from proxy import errors
from proxy.identify import canonical
from proxy.protocols import GEMINI, wire_for_path
from proxy.protocols.gemini.convert import contents_to_common
from proxy.protocols.gemini.encode import SKIP_SIGNATURE, to_native
from proxy.protocols.gemini.errors import error_object
from proxy.protocols.gemini.wire import usage_of
from proxy.sse import SseSplitter
from proxy.usage import Usage

SIG = base64.b64encode(bytes(range(200, 232))).decode()  # has "+" and "/": URL-safe differs
SIG_URLSAFE = base64.urlsafe_b64encode(base64.b64decode(SIG)).decode()


def call_part(command: str, signature: str | None = None, **call: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {**call, "name": "run_shell_command", "args": {"command": command}}}
    if signature is not None:
        part["thoughtSignature"] = signature
    return part


def response_part(output: str, **response: Any) -> dict[str, Any]:
    return {"functionResponse": {**response, "name": "run_shell_command", "response": {"output": output}}}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


CONTENTS: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "<session_context>cwd</session_context>"}, {"text": "find the code"}]},
    {"role": "model", "parts": [call_part("ls", SIG, id="c1"), call_part("pwd", id="c2")]},
    {"role": "user", "parts": [response_part("a b", id="c1"), response_part("/w", id="c2")]},
    {"role": "model", "parts": [{"text": "Reading it."}, call_part("cat a", SIG)]},
    {"role": "user", "parts": [response_part("code 7"), {"text": "and be quick"}]},
    {"role": "model", "parts": [{"text": "The code is 7."}]},
    user("thanks"),
]


def test_unchanged_contents_convert_back_exactly():
    messages = contents_to_common(copy.deepcopy(CONTENTS))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant", "tool", "user"] + [
        "assistant",
        "user",
    ]
    assert to_native(messages, 0) == CONTENTS


def test_calls_and_responses_pair_by_name_in_order():
    messages = contents_to_common(copy.deepcopy(CONTENTS))
    ids = [c["id"] for c in messages[1]["tool_calls"]]
    assert [messages[2]["tool_call_id"], messages[3]["tool_call_id"]] == ids and len(set(ids)) == 2
    assert messages[2]["content"] == "a b"  # the response's one text field is the result's text
    assert messages[1]["tool_calls"][0]["function"] == {"name": "run_shell_command", "arguments": '{"command":"ls"}'}


def test_a_trimmed_result_goes_back_in_its_field_with_its_id():
    messages = contents_to_common(copy.deepcopy(CONTENTS))
    messages[2] = {**messages[2], "content": "[trimmed: 3 chars]"}
    native = to_native(messages, 0)
    assert native[2]["parts"][0] == {
        "functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "[trimmed: 3 chars]"}}
    }


def test_a_rebuilt_model_turn_keeps_each_calls_part_and_id():
    messages = contents_to_common(copy.deepcopy(CONTENTS))
    changed = {**messages[1], "tool_calls": messages[1]["tool_calls"][:1]}  # a detour keeps one call
    native = to_native([messages[0], changed, messages[2]], 0)
    assert native[1]["parts"] == [call_part("ls", SIG, id="c1")]


def test_a_turn_whose_signed_call_is_gone_marks_its_first_call():
    """A detour keeps the recall call and drops the client's call that carried the signature."""
    messages = contents_to_common(copy.deepcopy(CONTENTS))
    kept = {**messages[1], "tool_calls": messages[1]["tool_calls"][1:]}
    native = to_native([messages[0], kept, messages[3]], 0)
    assert native[1]["parts"] == [{**call_part("pwd", id="c2"), "thoughtSignature": SKIP_SIGNATURE}]
    unsigned = {"role": "model", "parts": [call_part("ls"), call_part("pwd")]}
    (plain,) = contents_to_common([user("go"), unsigned])[1:]
    rebuilt = to_native([{**plain, "tool_calls": plain["tool_calls"][1:]}], 0)
    assert rebuilt[1]["parts"] == [call_part("pwd")]  # nothing to stand in for: no signature added


def test_the_stored_answer_and_the_resent_turn_are_one_message():
    """What the upstream answered (a thought, the call signed in standard base64, no id) and what
    Gemini CLI / the Python SDK send back (no unsigned thought, the client's id, URL-safe
    base64): the same common message, so the history continues instead of forking."""
    answered = {"role": "model", "parts": [{"text": "hm", "thought": True}, call_part("ls", SIG)]}
    resent = {"role": "model", "parts": [call_part("ls", SIG_URLSAFE, id="run_shell_command_17_0")]}
    (stored,) = contents_to_common([user("go"), answered])[1:]
    (again,) = contents_to_common([user("go"), resent])[1:]
    assert canonical(stored) == canonical(again)


def test_a_turn_of_thoughts_alone_keeps_them():
    thoughts = {"role": "model", "parts": [{"text": "hm", "thought": True}]}
    messages = contents_to_common([user("go"), thoughts, user("and?")])
    assert to_native(messages, 0)[1] == thoughts  # never a content without parts


def test_text_pieces_merge_as_clients_consolidate_them():
    pieces = {"role": "model", "parts": [{"text": "Hel"}, {"text": "lo"}, {"text": "", "thoughtSignature": SIG}]}
    whole = {"role": "model", "parts": [{"text": "Hello", "thoughtSignature": SIG}]}
    assert canonical(contents_to_common([pieces])[0]) == canonical(contents_to_common([whole])[0])


def test_a_projection_starting_with_the_model_gets_a_user_turn_first():
    messages = contents_to_common(copy.deepcopy(CONTENTS))[4:]
    native = to_native(messages, 0)
    assert native[0]["role"] == "user" and "omitted" in native[0]["parts"][0]["text"]


def test_snake_case_parts_are_read():
    contents = [
        user("go"),
        {"role": "model", "parts": [{"function_call": {"name": "ls", "args": {}}, "thought_signature": SIG}]},
        {"role": "user", "parts": [{"function_response": {"name": "ls", "response": {"result": "x"}}}]},
    ]
    messages = contents_to_common(copy.deepcopy(contents))
    assert messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"] and messages[2]["content"] == "x"
    assert to_native(messages, 0) == contents


@pytest.mark.parametrize(
    ("contents", "words"),
    [
        ([], "contents is not specified"),
        ([{"role": "system", "parts": [{"text": "x"}]}], "Please use a valid role: user, model."),
        ([{"role": "user", "parts": []}], "contents.parts must not be empty"),
        ([{"role": "user", "parts": ["x"]}], "a Part object is expected"),
        ([{"role": "model", "parts": [{"functionCall": {"args": {}}}]}], "function_call.name: Name is required"),
    ],
)
def test_invalid_contents_are_refused_in_geminis_words(contents, words):
    target = GEMINI.target("/v1beta/models/m:generateContent", {})
    with pytest.raises(errors.BadRequest) as caught:
        GEMINI.envelope({"contents": contents}, target)
        GEMINI.messages({"contents": contents})
    assert words in caught.value.message and caught.value.status == 400


def _chunk(parts: list[Any], usage: dict[str, int], finish: str | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return b"data: " + json.dumps({"candidates": [candidate], "usageMetadata": usage}).encode() + b"\r\n\r\n"


STREAM = b"".join(
    [
        _chunk([{"text": "Check"}], {"promptTokenCount": 100, "totalTokenCount": 100}),
        _chunk([{"text": "ing."}], {"promptTokenCount": 100, "totalTokenCount": 100}),
        _chunk(
            [call_part("ls", SIG)],
            {"promptTokenCount": 100, "candidatesTokenCount": 9, "thoughtsTokenCount": 4, "totalTokenCount": 113},
            "STOP",
        ),
    ]
)


@pytest.mark.parametrize("size", [len(STREAM), 1], ids=["whole", "byte-by-byte"])
def test_a_stream_is_relayed_unchanged_and_reassembled(size):
    observer = GEMINI.observer({})
    splitter = SseSplitter()
    relayed = b""
    for at in range(0, len(STREAM), size):
        for event in splitter.feed(STREAM[at : at + size]):
            relayed += observer(event) or b""
    assert relayed == STREAM and observer.done and observer.finish_reason() == "STOP" and observer.chunks == 3
    message = observer.message()
    assert message is not None and message["content"] == "Checking." and len(message["tool_calls"]) == 1
    assert GEMINI.usage(observer.usage_raw()) == Usage(100, 100, 0, None, 13, 4)  # the last snapshot, not a sum


def test_an_error_chunk_fails_the_stream():
    observer = GEMINI.observer({})
    (event,) = SseSplitter().feed(
        b'data: {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}\n\n'
    )
    observer(event)
    assert not observer.done and observer.failure() == "UNAVAILABLE: overloaded"
    assert observer.error_event(errors.UpstreamError("gone")).startswith(b'data: {"error": {"code": 502')


@pytest.mark.parametrize(
    ("raw", "usage"),
    [
        (None, Usage()),
        ({"totalTokenCount": 5}, Usage()),
        ({"promptTokenCount": 50, "candidatesTokenCount": 7}, Usage(50, 50, 0, None, 7, 0)),
        (
            {"promptTokenCount": 50, "cachedContentTokenCount": 30, "candidatesTokenCount": 7, "thoughtsTokenCount": 3},
            Usage(50, 20, 30, None, 10, 3),
        ),
        ({"promptTokenCount": 50, "toolUsePromptTokenCount": 5}, Usage(55, 55, 0, None, 0, 0)),
    ],
)
def test_usage_metadata_is_normalized(raw, usage):
    assert usage_of(raw) == usage


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (errors.BadRequest("x"), "INVALID_ARGUMENT"),
        (errors.ContextLengthExceeded("x"), "INVALID_ARGUMENT"),
        (errors.Unauthorized("x"), "UNAUTHENTICATED"),
        (errors.Forbidden("x"), "PERMISSION_DENIED"),
        (errors.NotFound("x"), "NOT_FOUND"),
        (errors.PayloadTooLarge("x"), "INVALID_ARGUMENT"),
        (errors.RequestTimeout("x"), "DEADLINE_EXCEEDED"),
        (errors.Overloaded("x"), "UNAVAILABLE"),
        (errors.UpstreamError("x"), "UNAVAILABLE"),
        (errors.UpstreamTimeout("x"), "DEADLINE_EXCEEDED"),
        (errors.ProxyError("x"), "INTERNAL"),
    ],
)
def test_errors_take_geminis_shape(exc, status):
    assert error_object(exc) == {"error": {"code": exc.status, "message": "x", "status": status}}
    assert json.loads(GEMINI.error_body(exc)) == error_object(exc)


def test_a_path_says_the_model_and_method_and_the_upstream_path_follows():
    target = GEMINI.target("/v1beta/models/gemini-2.5-flash:streamGenerateContent", {"alt": "sse"})
    assert target is not None and GEMINI.envelope({"contents": [user("x")]}, target) == ("gemini-2.5-flash", True)
    assert GEMINI.upstream_path_for("gemini-2.5-flash", True) == (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    whole = GEMINI.target("/v1/models/m:generateContent", {})
    assert whole is not None and GEMINI.envelope({"contents": [user("x")]}, whole) == ("m", False)
    assert GEMINI.upstream_path_for("m", False) == "/v1beta/models/m:generateContent"
    assert GEMINI.target("/v1beta/models/m:countTokens", {}) is None
    assert GEMINI.target("/v1/chat/completions", {}) is None
    with pytest.raises(errors.BadRequest, match="model in the path"):
        GEMINI.envelope({"contents": [user("x")]}, None)


def test_a_stream_without_sse_is_refused_clearly():
    target = GEMINI.target("/v1beta/models/m:streamGenerateContent", {})
    with pytest.raises(errors.BadRequest, match="alt=sse"):
        GEMINI.envelope({"contents": [user("x")]}, target)


def test_the_key_is_read_from_its_header_first_then_the_query():
    assert GEMINI.client_key({"x-goog-api-key": "k0"}, {"key": "k1"}) == "k0"
    assert GEMINI.client_key({}, {"key": "k1"}) == "k1"
    assert GEMINI.client_key({}, {}) is None
    assert GEMINI.auth_headers("k2") == {"x-goog-api-key": "k2"}


def test_gemini_paths_answer_in_geminis_shape_and_openais_stay_openais():
    assert wire_for_path("/v1beta/models/m:countTokens") is GEMINI
    assert wire_for_path("/v1/models") is not GEMINI and wire_for_path("/v1/models/gpt-4o") is not GEMINI


def test_the_summarizer_call_is_a_gemini_request():
    path, body = GEMINI.summary_request(
        "gemini-2.5-flash", [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], 99
    )
    assert path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert body == {
        "contents": [{"role": "user", "parts": [{"text": "U"}]}],
        "generationConfig": {"maxOutputTokens": 99, "temperature": 0},
        "systemInstruction": {"parts": [{"text": "S"}]},
    }
    answer = {
        "candidates": [{"content": {"parts": [{"text": "## Goal"}], "role": "model"}}],
        "usageMetadata": {"promptTokenCount": 3},
    }
    assert GEMINI.summary_text(answer) == ("## Goal", {"promptTokenCount": 3})
    assert GEMINI.auth_headers("k") == {"x-goog-api-key": "k"} and GEMINI.probe(None) == ("/v1beta/models", {})


def test_a_count_path_says_the_model_and_goes_upstream_under_v1beta():
    target = GEMINI.count_target("/v1/models/gemini-2.5-flash:countTokens", {})
    assert (target.model, target.stream) == ("gemini-2.5-flash", False)
    assert GEMINI.upstream_count_path_for("gemini-2.5-flash") == "/v1beta/models/gemini-2.5-flash:countTokens"
    with pytest.raises(errors.NotFound):
        GEMINI.count_target("/v1beta/models/a:b:countTokens", {})
    assert wire_for_path("/v1beta/models/m:countTokens") is GEMINI


def test_a_counting_body_stands_for_its_model_call():
    call = {"contents": [user("x")], "systemInstruction": {"parts": [{"text": "s"}]}, "tools": []}
    wrapped = {"generateContentRequest": {"model": "models/m", **call}, "contents": [user("ignored")]}
    assert GEMINI.count_body(wrapped) == call  # `contents` is ignored beside a generateContentRequest
    assert GEMINI.count_body({"generate_content_request": call}) == call
    assert GEMINI.count_body({"contents": [user("x")], "model": "models/m"}) == {"contents": [user("x")]}
    with pytest.raises(errors.BadRequest, match="GenerateContentRequest object"):
        GEMINI.count_body({"generateContentRequest": [call]})
    asked = json.loads(GEMINI.count_request(json.dumps(call).encode(), "m"))
    assert asked == {"generateContentRequest": {**call, "model": "models/m"}}
    assert GEMINI.count_answer(12) == {"totalTokens": 12} and GEMINI.counted_tokens({"totalTokens": 12}) == 12
    assert GEMINI.counted_tokens({"input_tokens": 12}) is None
