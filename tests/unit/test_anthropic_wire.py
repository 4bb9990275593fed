"""The Anthropic Messages wire, pure: conversions, merge rules, cache_control cap, streams, usage."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.summary_prompt import summary_block
from policies.text import with_content
from proxy.errors import BadRequest, ContextLengthExceeded, NotFound, UpstreamTimeout
from proxy.identify import canonical, chain
from proxy.protocols.anthropic import WIRE
from proxy.protocols.anthropic.cache_control import EPHEMERAL, cache_markers, cap_own_markers
from proxy.protocols.anthropic.convert import OMITTED_TEXT, to_common, to_native
from proxy.protocols.anthropic.stream import MessageStream
from proxy.protocols.anthropic.usage import from_anthropic
from proxy.sse import SseSplitter
from tests.support.lanes import examples

CC = {"type": "ephemeral"}

# --------------------------------------------------------------------------- strategies

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
markers = st.one_of(st.none(), st.just(CC), st.just({"type": "ephemeral", "ttl": "1h"}))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), texts),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=6,
)


def _marked(block: dict[str, Any], marker: Any, first: bool) -> dict[str, Any]:
    if marker is None:
        return block
    if first:
        return {"cache_control": marker, **block}
    return {**block, "cache_control": marker}


@st.composite
def text_block(draw: Any) -> dict[str, Any]:
    block = {"type": "text", "text": draw(texts)}
    if draw(st.booleans()):
        block["citations"] = None
    return _marked(block, draw(markers), draw(st.booleans()))


@st.composite
def image_block(draw: Any) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": draw(texts)}}


@st.composite
def assistant_message(draw: Any, ids: Any) -> dict[str, Any]:
    if draw(st.integers(0, 5)) == 0:
        return {"role": "assistant", "content": draw(texts)}
    blocks: list[dict[str, Any]] = []
    if draw(st.booleans()):
        thinking = draw(texts)
        blocks.append({"type": "thinking", "thinking": thinking, "signature": "sig:" + thinking})
    if draw(st.booleans()):
        blocks.append({"type": "redacted_thinking", "data": draw(texts)})
    blocks.extend(draw(st.lists(text_block(), max_size=2)))
    for _ in range(draw(st.integers(0, 3))):
        tool_id = f"toolu_{next(ids)}"
        block = {
            "type": "tool_use",
            "id": tool_id,
            "name": draw(st.sampled_from(["bash", "read"])),
            "input": draw(st.dictionaries(texts, json_values, max_size=3)),
        }
        blocks.append(_marked(block, draw(markers), False))
    if not blocks:
        blocks.append({"type": "text", "text": "x"})
    return {"role": "assistant", "content": blocks}


@st.composite
def user_message(draw: Any, previous: dict[str, Any] | None) -> dict[str, Any]:
    ids = []
    if previous is not None and isinstance(previous["content"], list):
        ids = [b["id"] for b in previous["content"] if b["type"] == "tool_use"]
    if not ids and draw(st.integers(0, 3)) == 0:
        return {"role": "user", "content": draw(texts)}
    blocks: list[dict[str, Any]] = []
    for tool_id in ids:
        if draw(st.integers(0, 6)) == 0:
            continue  # a missing result: still converts losslessly
        content = draw(st.one_of(st.none(), texts, st.lists(st.one_of(text_block(), image_block()), max_size=2)))
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id}
        if content is not None:
            block["content"] = content
        if draw(st.booleans()):
            block["is_error"] = draw(st.booleans())
        blocks.append(_marked(block, draw(markers), draw(st.booleans())))
    rest = draw(st.lists(st.one_of(text_block(), image_block()), max_size=3))
    if rest and blocks and draw(st.integers(0, 4)) == 0:
        blocks.insert(1, rest.pop())  # an unusual order, still rebuilt exactly
    blocks.extend(rest)
    if not blocks:
        blocks.append({"type": "text", "text": "y"})
    return {"role": "user", "content": blocks}


@st.composite
def conversations(draw: Any) -> dict[str, Any]:
    counter = iter(range(10**6))
    messages: list[dict[str, Any]] = []
    previous = None
    for turn in range(draw(st.integers(1, 8))):
        if turn % 2 == 0:
            messages.append(draw(user_message(previous)))
        else:
            previous = draw(assistant_message(counter))
            messages.append(previous)
    body: dict[str, Any] = {"model": "claude-x", "max_tokens": 100, "messages": messages}
    system = draw(st.one_of(st.none(), texts, st.lists(text_block(), min_size=1, max_size=2)))
    if system is not None:
        body["system"] = system
    return body


def without_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_markers(v) for v in value]
    return value


# --------------------------------------------------------------------------- round trips


@settings(max_examples=examples(300), deadline=None)
@given(conversations())
def test_native_common_native_is_identity(body):
    original = copy.deepcopy(body)
    common = to_common(body)
    assert body == original  # the client's objects are never mutated
    native = to_native(common)
    assert json.dumps(native) == json.dumps(body["messages"])  # byte for byte, key order included
    # through JSON (the store) too
    assert to_native(json.loads(json.dumps(common))) == body["messages"]
    encoded, _ = WIRE.encode(body, common, False, None)
    assert json.loads(encoded) == body


@settings(max_examples=examples(150), deadline=None)
@given(conversations())
def test_identity_ignores_moving_cache_breakpoints(body):
    moved = without_markers(body)
    assert chain("t", to_common(body)[1 if "system" in body else 0 :]) == chain(
        "t", to_common(moved)[1 if "system" in moved else 0 :]
    )


@settings(max_examples=examples(150), deadline=None)
@given(conversations())
def test_common_messages_are_protocol_valid(body):
    """Tool results follow their call; every tool_use is a tool call, every result a tool message."""
    common = to_common(body)
    for i, message in enumerate(common):
        if message["role"] == "tool":
            back = i - 1
            while common[back]["role"] == "tool":
                back -= 1
            ids = [c["id"] for c in common[back].get("tool_calls") or []]
            assert common[back]["role"] == "assistant" and message["tool_call_id"] in ids
    uses = [
        b
        for m in body["messages"]
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    results = [
        b
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert [c["id"] for m in common for c in m.get("tool_calls") or []] == [b["id"] for b in uses]
    assert [m["tool_call_id"] for m in common if m["role"] == "tool"] == [b["tool_use_id"] for b in results]


def test_conversion_shapes():
    body = {
        "model": "m",
        "max_tokens": 5,
        "system": [{"type": "text", "text": "sys", "cache_control": CC}],
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s1"},
                    {"type": "text", "text": "let me"},
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}},
                    {"type": "tool_use", "id": "t2", "name": "bash", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a.py", "is_error": True},
                    {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "/"}]},
                    {"type": "text", "text": "go on"},
                ],
            },
        ],
    }
    common = to_common(body)
    assert common[0] == {"role": "system", "content": body["system"]}
    assert common[1] == {"role": "user", "content": "hi"}
    assistant = common[2]
    assert assistant["content"] == "let me"
    assert assistant["tool_calls"] == [
        {"id": "t1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}},
        {"id": "t2", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
    ]
    assert [m["role"] for m in common[3:]] == ["tool", "tool", "user"]
    assert common[3]["tool_call_id"] == "t1" and common[3]["content"] == "a.py"
    assert common[5]["content"] == [{"type": "text", "text": "go on"}]
    # the single-text-part rule of identify makes the native list and the string hash alike
    assert canonical(common[4])["content"] == "/"


def test_trimmed_tool_result_keeps_its_other_fields():
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": "start"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "x" * 900}],
                        "is_error": True,
                        "cache_control": CC,
                    },
                    {"type": "text", "text": "next"},
                ],
            },
        ],
    }
    common = to_common(body)
    common[2] = with_content(common[2], "xxx\n[trimmed]\nxxx")
    native = to_native(common)
    assert native[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": "xxx\n[trimmed]\nxxx",
                "is_error": True,
                "cache_control": CC,
            },
            {"type": "text", "text": "next"},
        ],
    }


def test_merge_rules_summary_synthetic_results_and_first_user():
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "objective"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "tool_use", "id": "a", "name": "bash", "input": {}},
                    {"type": "tool_use", "id": "b", "name": "bash", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "ra"},
                    {"type": "text", "text": "and then"},
                ],
            },
            {"role": "assistant", "content": "done"},
        ],
    }
    objective, assistant, result_a, rest, done = to_common(body)
    summary = summary_block("## Goal\nx", 9)
    synthetic = {"role": "tool", "tool_call_id": "b", "content": "[no result recorded]"}
    native = to_native([objective, summary, assistant, result_a, synthetic, rest, done])
    assert [m["role"] for m in native] == ["user", "assistant", "user", "assistant"]
    assert native[0]["content"] == [{"type": "text", "text": "objective"}, {"type": "text", "text": summary["content"]}]
    assert native[1] == body["messages"][1]  # thinking blocks untouched
    assert native[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": "ra"},
        {"type": "tool_result", "tool_use_id": "b", "content": "[no result recorded]"},
        {"type": "text", "text": "and then"},
    ]
    assert native[3] == {"role": "assistant", "content": "done"}
    # history pruned down to an assistant turn: the API needs a user message first
    native = to_native([assistant, result_a, synthetic, rest])
    assert native[0] == {"role": "user", "content": OMITTED_TEXT} and native[1]["role"] == "assistant"


def test_changed_assistant_turn_keeps_its_thinking():
    native = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "old"}],
    }
    common = to_common({"messages": [native]})[0]
    rebuilt = to_native([{"role": "user", "content": "u"}, with_content(common, "new")])[1]
    assert rebuilt["content"] == [
        {"type": "thinking", "thinking": "t", "signature": "s"},
        {"type": "text", "text": "new"},
    ]


def test_cache_control_cap_drops_the_proxys_own_markers_oldest_first_never_the_clients():
    body = {
        "model": "m",
        "tools": [{"name": "x"}],
        "system": [{"type": "text", "text": "s", "cache_control": CC}],
        "messages": [],
    }
    own = [{"type": "text", "text": f"own {i}", "cache_control": EPHEMERAL} for i in range(3)]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "objective", "cache_control": dict(CC)}]},
        {"role": "user", "content": [own[0]]},  # the summary's
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [own[1]]}]},
        {"role": "user", "content": [own[2], {"type": "text", "text": "newest", "cache_control": dict(CC)}]},
    ]
    original = copy.deepcopy(messages)
    assert cache_markers(body, messages) == 6
    capped = cap_own_markers(body, messages)
    assert messages == original and cache_markers(body, capped) == 4
    kept = [b["text"] for m in capped for b in m["content"] if b.get("type") == "text" and "cache_control" in b]
    assert kept == ["objective", "own 2", "newest"]  # the client's three (system too), and the proxy's newest
    assert "cache_control" not in capped[2]["content"][0]["content"][0]
    assert cap_own_markers(body, messages[:1]) == messages[:1]  # within the 4: as it was
    over = [{"role": "user", "content": [{"type": "text", "text": str(i), "cache_control": CC}]} for i in range(4)]
    assert cap_own_markers(body, over) == over  # the client's own 5: theirs to fix (the API's 400)


def test_encode_forwards_the_client_bytes_when_nothing_changed():
    body = {"model": "m", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    assert WIRE.encode(body, None, True, None) == (None, None)
    encoded, _ = WIRE.encode(body, to_common(body), True, None)
    assert json.loads(encoded) == body


def test_validation_errors():
    for body in ({}, {"model": "m"}, {"model": "m", "messages": []}, {"model": "m", "messages": [], "stream": 1}):
        try:
            WIRE.envelope(body)
        except BadRequest:
            continue
        raise AssertionError(f"accepted {body}")
    for messages in (
        [{"role": "system", "content": "x"}],
        [{"role": "user", "content": 5}],
        [{"role": "user", "content": [{"type": "tool_result"}]}],
        ["x"],
    ):
        try:
            WIRE.messages({"model": "m", "messages": messages})
        except BadRequest:
            continue
        raise AssertionError(f"accepted {messages}")


def test_error_bodies():
    def shape(exc: Exception) -> dict[str, Any]:
        return json.loads(WIRE.error_body(exc))

    assert shape(BadRequest("bad")) == {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    assert shape(NotFound("nope"))["error"]["type"] == "not_found_error"
    assert shape(ContextLengthExceeded("long"))["error"]["type"] == "invalid_request_error"
    assert shape(UpstreamTimeout("slow"))["error"]["type"] == "timeout_error"
    assert WIRE.auth_headers("k") == {"x-api-key": "k"}


# --------------------------------------------------------------------------- streams and usage


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


USAGE_START = {"input_tokens": 10, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 1}
FINAL_DELTA = (
    "message_delta",
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 42},
    },
)
STREAM = [
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "m",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": USAGE_START,
            },
        },
    ),
    ("ping", {"type": "ping"}),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}},
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "think."}},
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG"}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Sure"}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}},
        },
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"cmd": "l'},
        },
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": 's"}'}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 2}),
    FINAL_DELTA,
    FINAL_DELTA,  # duplicated: adds nothing
    ("message_stop", {"type": "message_stop"}),
]
FINAL_CONTENT = [
    {"type": "thinking", "thinking": "Let me think.", "signature": "SIG"},
    {"type": "text", "text": "Sure"},
    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}},
]


def _observe(data: bytes, piece: int = 7) -> tuple[MessageStream, bytes]:
    observer = WIRE.observer({})
    splitter = SseSplitter()
    relayed = b""
    for start in range(0, len(data), piece):
        for event in splitter.feed(data[start : start + piece]):
            relayed += observer(event) or b""
    return observer, relayed


def test_stream_is_relayed_unchanged_and_reassembled():
    data = _sse(STREAM)
    observer, relayed = _observe(data)
    assert relayed == data and observer.done and observer.failure() is None
    assert observer.finish_reason() == "tool_use"
    assert observer.usage_raw() == {**USAGE_START, "output_tokens": 42}
    message = observer.message()
    assert message == WIRE.response({"content": FINAL_CONTENT})[0]  # stream and non-stream agree
    assert message["tool_calls"][0]["function"]["arguments"] == '{"cmd":"ls"}'
    assert message["_anthropic"]["content"] == FINAL_CONTENT


def test_cumulative_message_delta_replaces_and_keeps_unreported_fields():
    later = (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 50, "input_tokens": 12, "cache_read_input_tokens": None},
        },
    )
    observer, _ = _observe(_sse([STREAM[0], FINAL_DELTA, later]))
    assert observer.usage_raw() == {
        "input_tokens": 12,
        "cache_creation_input_tokens": 5,
        "cache_read_input_tokens": 100,
        "output_tokens": 50,
    }
    assert not observer.done


def test_cut_stream_keeps_what_arrived():
    observer, _ = _observe(_sse(STREAM[:13]))
    assert not observer.done
    content = observer.message()["_anthropic"]["content"]
    assert content[0]["signature"] == "SIG" and content[2]["input"] == {}  # '{"cmd": "l' does not parse
    assert observer.usage_raw() == USAGE_START


def test_error_event_is_a_failure():
    observer, _ = _observe(
        _sse([STREAM[0], ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})])
    )
    assert observer.failure() == "overloaded_error: Overloaded"


def test_usage_normalization():
    assert from_anthropic(
        {"input_tokens": 10, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 7}
    ).to_dict() == {
        "input_total": 115,
        "input_uncached": 10,
        "cache_read": 100,
        "cache_write": 5,
        "output": 7,
        "reasoning": None,
    }
    assert from_anthropic({"output_tokens": 3}).to_dict() == {
        "input_total": None,
        "input_uncached": None,
        "cache_read": None,
        "cache_write": None,
        "output": 3,
        "reasoning": None,
    }
    assert from_anthropic({"input_tokens": 4, "output_tokens": 1}).input_total == 4
    assert from_anthropic(None).to_dict() == {k: None for k in from_anthropic(None).to_dict()}


def test_summarizer_request_and_text():
    path, body = WIRE.summary_request(
        "claude-x", [{"role": "system", "content": "rules"}, {"role": "user", "content": "data"}], 512
    )
    assert path == "/v1/messages"
    assert body == {
        "model": "claude-x",
        "max_tokens": 512,
        "temperature": 0,
        "system": "rules",
        "messages": [{"role": "user", "content": "data"}],
    }
    text, usage = WIRE.summary_text(
        {
            "content": [{"type": "thinking", "thinking": "x", "signature": "s"}, {"type": "text", "text": "## Goal"}],
            "usage": {"output_tokens": 2},
        }
    )
    assert text == "## Goal" and usage == {"output_tokens": 2}


def test_the_summary_block_gets_a_cache_breakpoint_of_its_own():
    from policies.summary_prompt import summary_block
    from proxy.protocols.anthropic.cache_control import mark_summary

    text = summary_block("## Goal\nship it", 12)["content"]
    cc = {"type": "ephemeral"}
    as_string = [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]
    marked = mark_summary(as_string)
    assert marked[0]["content"] == [{"type": "text", "text": text, "cache_control": cc}]
    assert as_string[0]["content"] == text  # not mutated
    merged = [{"role": "user", "content": [{"type": "text", "text": "task"}, {"type": "text", "text": text}]}]
    assert mark_summary(merged)[0]["content"] == [
        {"type": "text", "text": "task"},
        {"type": "text", "text": text, "cache_control": cc},
    ]
    own = [
        {
            "role": "user",
            "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        }
    ]
    assert mark_summary(own) == own  # the client's own marker is kept as it is
    plain = [{"role": "user", "content": "hello"}]
    assert mark_summary(plain) is plain


def test_provider_trigger_reads_the_compact_edit_or_the_apis_default():
    def body(*edits: Any) -> dict[str, Any]:
        return {"context_management": {"edits": list(edits)}}

    clearing = {"type": "clear_thinking_20251015", "keep": "all"}
    trigger = {"type": "input_tokens", "value": 60_000}
    assert WIRE.provider_trigger(body(clearing, {"type": "compact_20260112", "trigger": trigger})) == 60_000
    assert WIRE.provider_trigger(body({"type": "compact_20260112"})) == 150_000
    assert WIRE.provider_trigger(body(clearing)) is None  # clearing is no compaction
    assert WIRE.provider_trigger({}) is None
    for odd in ({"type": "tool_uses", "value": 3}, {"type": "input_tokens", "value": True}, "many"):
        assert WIRE.provider_trigger(body({"type": "compact_20260112", "trigger": odd})) is None
