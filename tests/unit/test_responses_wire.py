"""ResponsesWire: items <-> common messages, identity canonicalization, stream reassembly, usage."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.summary_prompt import summary_block
from policies.trim_tool_results import trim_message
from proxy import codec, identify
from proxy.errors import BadRequest
from proxy.protocols import wire_for_path
from proxy.protocols.responses import WIRE
from proxy.protocols.responses.convert import items_to_messages, request_messages
from proxy.protocols.responses.items import PRIVATE
from proxy.protocols.responses.output import output_message
from proxy.protocols.responses.stream import ResponsesObserver
from proxy.protocols.responses.usage import from_openai_responses
from proxy.sse import SseSplitter
from proxy.usage import Usage
from tests.support.lanes import examples


def encode(body: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    raw, _ = WIRE.encode(body, messages, bool(body.get("stream")), None)
    assert raw is not None
    return json.loads(raw)


# --------------------------------------------------------------------------- strategies

text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
ids = st.text(alphabet="abcdef0123456789", min_size=4, max_size=8)


@st.composite
def content(draw: Any, role: str) -> Any:
    part_type = "output_text" if role == "assistant" else "input_text"
    if draw(st.booleans()):
        return draw(text)
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        part: dict[str, Any] = {"type": part_type, "text": draw(text)}
        if role == "assistant" and draw(st.booleans()):
            part["annotations"] = []
        parts.append(part)
    if role == "user" and draw(st.booleans()):
        parts.append({"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"})
    return parts


@st.composite
def message_item(draw: Any, role: str) -> dict[str, Any]:
    item: dict[str, Any] = {}
    if draw(st.booleans()):
        item["type"] = "message"
    item["role"] = role
    item["content"] = draw(content(role))
    if role == "assistant" and draw(st.booleans()):
        item["id"] = "msg_" + draw(ids)
        item["status"] = "completed"
    return item


@st.composite
def turn(draw: Any) -> list[dict[str, Any]]:
    """One user turn, then an assistant run (maybe with reasoning and parallel calls + outputs)."""
    items = [draw(message_item(draw(st.sampled_from(["user", "user", "developer", "system"]))))]
    if draw(st.booleans()):
        items.append({"type": "compaction", "id": "cmp_" + draw(ids), "encrypted_content": draw(ids)})
        items.append(draw(message_item("user")))
    run: list[dict[str, Any]] = []
    if draw(st.booleans()):
        run.append({"type": "reasoning", "id": "rs_" + draw(ids), "summary": [], "encrypted_content": draw(ids)})
    if draw(st.booleans()) or not run:
        run.append(draw(message_item("assistant")))
    calls = []
    for k in range(draw(st.integers(0, 3))):
        call_id = f"call_{draw(ids)}_{k}"
        call: dict[str, Any] = {
            "type": "function_call",
            "call_id": call_id,
            "name": "bash",
            "arguments": json.dumps({"c": draw(text)}),
        }
        if draw(st.booleans()):
            call = {"id": "fc_" + draw(ids), **call, "status": "completed"}
        calls.append(call)
    run.extend(calls)
    if calls and draw(st.booleans()):
        run.append({"type": "web_search_call", "id": "ws_" + draw(ids), "status": "completed"})
    outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": draw(text)} for c in calls]
    return items + run + outputs


bodies = st.builds(
    lambda turns, instructions, stream: {
        "model": "gpt-4o",
        **({"instructions": instructions} if instructions is not None else {}),
        "input": [item for t in turns for item in t],
        "tools": [{"type": "function", "name": "bash", "parameters": {"type": "object"}}],
        "stream": stream,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    },
    st.lists(turn(), min_size=1, max_size=4),
    st.none() | text.filter(bool),
    st.booleans(),
)


# --------------------------------------------------------------------------- round trips


@settings(max_examples=examples(200), deadline=None)
@given(bodies)
def test_round_trip_is_byte_exact(body: dict[str, Any]) -> None:
    messages = request_messages(body)
    raw, _ = WIRE.encode(body, messages, body["stream"], None)
    assert raw == codec.dumps(body)
    # the conversion is deterministic, and validates
    assert request_messages(json.loads(json.dumps(body))) == messages
    WIRE.envelope(body)
    assert WIRE.rewrite_allowed(body)


@settings(max_examples=examples(100), deadline=None)
@given(bodies)
def test_every_item_lands_in_exactly_one_message(body: dict[str, Any]) -> None:
    messages = [m for m in request_messages(body) if not m[PRIVATE].get("instructions")]
    carried = [i for m in messages for i in m[PRIVATE]["items"]]
    assert len(carried) == len(body["input"])
    # tool pairing in the common model mirrors the items
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    outputs = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(calls) == sorted(outputs)


def test_string_input_and_instructions() -> None:
    body = {"model": "gpt-4o", "instructions": "be brief", "input": "hi"}
    messages = request_messages(body)
    assert [(m["role"], m["content"]) for m in messages] == [("system", "be brief"), ("user", "hi")]
    prefix, history = identify.split_prefix(messages)
    assert len(prefix) == 1 and len(history) == 1
    out = encode(body, messages)
    assert out["instructions"] == "be brief"
    assert out["input"] == "hi"


def test_equal_items_keep_their_own_spelling_when_earlier_ones_are_dropped() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "same"},
            {"role": "assistant", "content": "a"},
            {"type": "message", "role": "user", "content": "same"},
        ],
    }
    messages = request_messages(body)
    assert messages[0] == messages[2]
    assert encode(body, messages[1:])["input"] == body["input"][1:]
    assert encode(body, messages)["input"] == body["input"]


def test_parallel_calls_form_one_assistant_turn_with_reasoning_first() -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENC"},
        {"type": "function_call", "id": "fc_1", "call_id": "a", "name": "bash", "arguments": "{}"},
        {"type": "function_call", "id": "fc_2", "call_id": "b", "name": "grep", "arguments": '{"x":1}'},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
        {"type": "function_call_output", "call_id": "b", "output": "B"},
    ]
    messages = items_to_messages(items)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assistant = messages[1]
    assert assistant["content"] is None
    assert [c["id"] for c in assistant["tool_calls"]] == ["a", "b"]
    assert [i["type"] for i in assistant[PRIVATE]["items"]] == ["reasoning", "function_call", "function_call"]
    assert assistant[PRIVATE]["items"][0]["encrypted_content"] == "ENC"


def test_trimmed_output_summary_block_and_synthetic_result() -> None:
    body: dict[str, Any] = {
        "model": "gpt-4o",
        "input": [
            {"role": "user", "content": "objective"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENC"},
            {"type": "function_call", "id": "fc_1", "call_id": "a", "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "id": "fco_1", "call_id": "a", "output": "x" * 5000},
            {"role": "user", "content": "next"},
        ],
        "previous_response_id": None,
        "truncation": "disabled",
    }
    messages = request_messages(body)
    trimmed, _ = trim_message(messages[2], max_chars=100, head_ratio=0.5, tool_name="bash", seq=3) or (None, None)
    assert trimmed is not None
    block = summary_block("earlier work", 0)
    synthetic = {"role": "tool", "tool_call_id": "a", "content": "[no result recorded]"}
    out = encode(body, [messages[0], block, messages[1], trimmed, messages[3]])
    assert out["truncation"] == "disabled" and out["previous_response_id"] is None
    assert list(out) == list(body)
    sent = out["input"]
    assert sent[0] == body["input"][0]
    assert sent[1] == {"role": "user", "content": block["content"]}
    assert sent[2:4] == body["input"][1:3], "reasoning stays right before its call, byte-exact"
    assert sent[4]["type"] == "function_call_output" and sent[4]["call_id"] == "a" and sent[4]["id"] == "fco_1"
    assert "[trimmed: tool result of bash" in sent[4]["output"] and len(sent[4]["output"]) < 400
    assert sent[5] == body["input"][4]
    out = encode(body, [messages[0], messages[1], synthetic, messages[3]])
    assert out["input"][3] == {"type": "function_call_output", "call_id": "a", "output": "[no result recorded]"}


def test_changed_arguments_and_text_are_rebuilt() -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"type": "message", "id": "m1", "role": "assistant", "content": [{"type": "output_text", "text": "t" * 50}]},
        {"type": "function_call", "call_id": "a", "name": "bash", "arguments": "y" * 50},
        {"type": "function_call_output", "call_id": "a", "output": "ok"},
    ]
    body = {"model": "m", "input": items}
    messages = request_messages(body)
    cut = {
        **messages[1],
        "content": "short",
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
    }
    sent = encode(body, [messages[0], cut, messages[2]])["input"]
    assert sent[1] == {
        "type": "message",
        "id": "m1",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "short", "annotations": []}],
    }
    assert sent[2] == {"type": "function_call", "call_id": "a", "name": "bash", "arguments": "{}"}


# --------------------------------------------------------------------------- identity


OUTPUT: list[dict[str, Any]] = [
    {"id": "rs_9", "type": "reasoning", "summary": [], "encrypted_content": "ENC9", "status": None},
    {
        "id": "msg_9",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "done", "annotations": [], "logprobs": []}],
    },
    {"id": "fc_9", "type": "function_call", "status": "completed", "call_id": "c9", "name": "ls", "arguments": "{}"},
]


@pytest.mark.parametrize(
    "resent",
    [
        OUTPUT,
        [{k: v for k, v in i.items() if v is not None} for i in OUTPUT],
        [
            OUTPUT[0],
            {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
            {"type": "function_call", "call_id": "c9", "name": "ls", "arguments": "{}"},
        ],
        [OUTPUT[0], {"role": "assistant", "content": "done"}, {**OUTPUT[2], "id": "other"}],
    ],
)
def test_resent_output_matches_stored_response(resent: list[dict[str, Any]]) -> None:
    stored = output_message(OUTPUT)
    assert stored is not None
    again = items_to_messages(resent)
    assert len(again) == 1
    assert again[0] == stored
    assert identify.message_hash("root", again[0]) == identify.message_hash("root", stored)


def test_different_content_or_reasoning_is_a_different_turn() -> None:
    stored = output_message(OUTPUT)
    assert stored is not None
    other_text = items_to_messages([OUTPUT[0], {"role": "assistant", "content": "other"}, OUTPUT[2]])[0]
    no_reasoning = items_to_messages(OUTPUT[1:])[0]
    assert identify.message_hash("r", other_text) != identify.message_hash("r", stored)
    assert identify.message_hash("r", no_reasoning) != identify.message_hash("r", stored)


# --------------------------------------------------------------------------- rewrite_allowed / validation


@pytest.mark.parametrize(
    ("body", "allowed"),
    [
        ({"model": "m", "input": "hi"}, True),
        ({"model": "m", "input": "hi", "previous_response_id": "resp_1"}, False),
        ({"model": "m", "input": "hi", "conversation": "conv_1"}, False),
        ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}, {"role": "user", "content": "x"}]}, False),
        ({"model": "m", "input": [{"type": "computer_call_output", "call_id": "c", "output": {}}]}, False),
        (
            {
                "model": "m",
                "input": [{"type": "compaction", "encrypted_content": "E"}, {"role": "user", "content": "x"}],
            },
            True,
        ),
        ({"model": "m", "input": []}, False),
        ({"model": "m"}, False),
        ({"model": "m", "input": "x", "context_management": [{"type": "compaction"}]}, True),
    ],
)
def test_rewrite_allowed(body: dict[str, Any], allowed: bool) -> None:
    assert WIRE.rewrite_allowed(body) is allowed
    request_messages(body)  # still converts (recorded)


def test_unmappable_items_ride_along_and_round_trip() -> None:
    body = {
        "model": "m",
        "input": [
            {"type": "item_reference", "id": "msg_1"},
            {"role": "user", "content": "x"},
            {"type": "computer_call_output", "call_id": "c", "output": {"type": "computer_screenshot"}},
        ],
    }
    messages = request_messages(body)
    assert [m["role"] for m in messages] == ["user"]
    assert encode(body, messages) == body


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": [1]}, "input[0]"),
        ({"model": "m", "input": [{"content": "x"}]}, "input[0].type"),
        ({"model": "m", "input": [{"role": "bot", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"role": "user", "content": 5}]}, "input[0].content"),
        ({"model": "m", "input": [{"type": "function_call", "call_id": "a", "name": "f"}]}, "input[0].arguments"),
        ({"model": "m", "input": [{"type": "function_call_output", "call_id": "a"}]}, "input[0].output"),
        ({"model": "m", "input": "x", "stream": 1}, "stream"),
    ],
)
def test_envelope_errors(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as info:
        WIRE.envelope(body)
    assert info.value.param == param


def test_registered_on_both_paths() -> None:
    assert wire_for_path("/v1/responses") is WIRE and wire_for_path("/responses") is WIRE
    assert WIRE.upstream_path == "/responses"
    assert WIRE.auth_headers("k") == {"Authorization": "Bearer k"}


# --------------------------------------------------------------------------- usage


def test_usage_normalization() -> None:
    raw: dict[str, Any] = {
        "input_tokens": 1000,
        "input_tokens_details": {"cached_tokens": 384},
        "output_tokens": 120,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 1120,
    }
    assert from_openai_responses(raw) == Usage(1000, 616, 384, None, 120, 64)
    raw["input_tokens_details"]["cache_write_tokens"] = 100
    assert from_openai_responses(raw) == Usage(1000, 516, 384, 100, 120, 64)
    assert from_openai_responses({"input_tokens": 5, "output_tokens": 2}) == Usage(5, None, None, None, 2, None)
    assert from_openai_responses(None) == Usage()
    assert from_openai_responses({"input_tokens": True}) == Usage()
    assert WIRE.usage(raw) == from_openai_responses(raw)


# --------------------------------------------------------------------------- stream observer


def sse(events: list[dict[str, Any]]) -> list[bytes]:
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def run_observer(events: list[dict[str, Any]]) -> tuple[ResponsesObserver, list[bytes]]:
    observer = ResponsesObserver()
    splitter = SseSplitter()
    relayed = []
    for chunk in sse(events):
        for event in splitter.feed(chunk):
            out = observer(event)
            assert out == event.raw
            relayed.append(out)
    return observer, relayed


USAGE = {
    "input_tokens": 50,
    "input_tokens_details": {"cached_tokens": 10},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 2},
    "total_tokens": 57,
}


def stream_events(end: str = "response.completed") -> list[dict[str, Any]]:
    msg = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    fc = {
        "id": "fc_1",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "c1",
        "name": "ls",
        "arguments": "",
    }
    done_msg = {**msg, "status": "completed", "content": [{"type": "output_text", "text": "Hello", "annotations": []}]}
    done_fc = {**fc, "status": "completed", "arguments": '{"a":1}'}
    rs = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "E"}
    final: dict[str, Any] = {
        "id": "resp_1",
        "status": end.split(".")[1],
        "output": [rs, done_msg, done_fc],
        "usage": USAGE,
    }
    if end == "response.failed":
        final = {**final, "output": [], "error": {"code": "server_error", "message": "boom"}}
    if end == "response.incomplete":
        final["incomplete_details"] = {"reason": "max_output_tokens"}
    return [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": rs},
        {"type": "response.output_item.done", "output_index": 0, "item": rs},
        {"type": "response.output_item.added", "output_index": 1, "item": msg},
        {"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "Hel"},
        {"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "lo"},
        {"type": "response.output_item.done", "output_index": 1, "item": done_msg},
        {"type": "response.output_item.added", "output_index": 2, "item": fc},
        {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": '{"a"'},
        {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": ":1}"},
        {"type": "response.output_item.done", "output_index": 2, "item": done_fc},
        {"type": end, "response": final},
    ]


def test_observer_reassembles_and_relays_unchanged() -> None:
    observer, relayed = run_observer(stream_events())
    assert observer.done and observer.failure() is None
    assert len(relayed) == observer.chunks == 12
    message = observer.message()
    assert message is not None
    assert message["content"] == "Hello"
    assert message["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"a":1}'}}
    ]
    assert [i["type"] for i in message[PRIVATE]["items"]] == ["reasoning", "message", "function_call"]
    assert observer.usage_raw() == USAGE and observer.finish_reason() == "completed"
    # equal to the non-streamed conversion of the same output
    final = stream_events()[-1]["response"]
    assert WIRE.response(final)[0] == message


def test_observer_partial_stream_keeps_deltas() -> None:
    observer, _ = run_observer(stream_events()[:9])
    assert not observer.done
    message = observer.message()
    assert message is not None and message["content"] == "Hello"
    assert message["tool_calls"][0]["function"]["arguments"] == '{"a"'
    assert observer.usage_raw() is None


def test_observer_failed_incomplete_and_error() -> None:
    observer, _ = run_observer(stream_events("response.failed"))
    assert observer.done and observer.failure() == "response failed: boom" and observer.message() is None
    assert observer.finish_reason() == "failed"
    observer, _ = run_observer(stream_events("response.incomplete"))
    assert observer.done and observer.failure() is None
    assert observer.finish_reason() == "incomplete:max_output_tokens"
    observer, _ = run_observer([{"type": "error", "code": "server_error", "message": "overloaded"}])
    assert observer.done and observer.failure() == "error event: overloaded"


# --------------------------------------------------------------------------- summarizer


def test_summary_request_and_text() -> None:
    path, body = WIRE.summary_request(
        "gpt-4o", [{"role": "system", "content": "You compress"}, {"role": "user", "content": "data"}], 800
    )
    assert path == "/responses"
    assert body == {"model": "gpt-4o", "instructions": "You compress", "input": "data", "max_output_tokens": 800}
    parsed = {
        "output": [
            {"type": "reasoning", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "## Goal"}, {"type": "output_text", "text": "\nx"}],
            },
        ],
        "usage": USAGE,
    }
    assert WIRE.summary_text(parsed) == ("## Goal\nx", USAGE)
    assert WIRE.summary_text({"output": []}) == (None, None)


def test_provider_trigger_is_the_compaction_entrys_threshold():
    def body(*entries: Any) -> dict[str, Any]:
        return {"input": "hi", "context_management": list(entries)}

    assert WIRE.provider_trigger(body({"type": "compaction", "compact_threshold": 9000})) == 9000
    assert WIRE.provider_trigger(body({"type": "compaction"})) is None  # no documented default
    assert WIRE.provider_trigger(body({"type": "compaction", "compact_threshold": 0})) is None
    assert WIRE.provider_trigger({"input": "hi"}) is None
