"""The Wire contract: every wire of the registry must pass this one suite.

Add a wire by registering it (`proxy.protocols.WIRES`) and writing its samples module
(`samples_<name>.py`, see `samples.py`): the fixtures of conftest.py run every test here on each
wire, so a wire added to the registry is checked without touching this file. The suite asks what
the proxy relies on from every API: a body it does not change goes out as the client sent it, a
message keeps its identity through the wire's conversions, tool calls pair with their results
(the proxy's own recall detour included), streams are observed the same whole or byte by byte,
usage normalizes with and without cache fields, every error is answered in the API's shape, and a
caller's key never reaches the upstream of a route that spends the operator's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from policies.text import call_arguments, call_name, message_text, tool_call_ids, tool_calls
from proxy import codec, errors, identify, routing
from proxy.auth import Caller
from proxy.config_file import parse_config
from proxy.credentials import redact_query, resolve_keys
from proxy.protocols import CREDENTIAL_HEADERS, WIRES, wire_for_path, wire_for_request
from proxy.protocols.base import Target, Wire
from proxy.recall.watch import may_call, may_write
from proxy.sse import SseEvent, SseSplitter
from proxy.types import Json, Message
from proxy.usage import Usage
from tests.wires.conftest import MAIN, samples_of, wire_id
from tests.wires.samples import CALLER_KEY, RECALL, ROUTE_KEY, TEXT, Samples

PARAMETERS: Json = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TENANT = "t_contract"


def target_of(wire: Wire, samples: Samples, stream: bool) -> Target:
    path, query = samples.paths.get(stream, (wire.path, {}))
    target = wire.target(path, query)
    assert target is not None, f"{wire.name} does not serve its own path {path}"
    return target


def request(wire: Wire, samples: Samples, stream: bool = False) -> tuple[bytes, Json]:
    raw = samples.stream_request if stream else samples.request
    body = wire.parse(raw)
    return raw, body


def events_of(stream: bytes, pieces: int | None = None) -> list[SseEvent]:
    """The stream's events, fed whole (`pieces` None) or `pieces` bytes at a time."""
    splitter = SseSplitter()
    size = pieces or len(stream)
    events = [event for at in range(0, len(stream), size) for event in splitter.feed(stream[at : at + size])]
    assert not splitter.rest()
    return events


def _recall_call(message: Message | None) -> dict[str, Any]:
    assert message is not None
    calls = [call for call in tool_calls(message) if call_name(call) == RECALL]
    assert len(calls) == 1, message
    assert json.loads(call_arguments(calls[0])) == {"query": "port"}
    return dict(calls[0])


# -- registry and paths ---------------------------------------------------------------------------


def test_every_wire_has_samples(any_wire: Wire) -> None:
    assert isinstance(samples_of(any_wire), Samples)


def test_names_and_paths_are_the_wires_own(any_wire: Wire) -> None:
    assert any_wire.name and any_wire.path and any_wire.provider
    for path in any_wire.paths:
        found = wire_for_request(path)
        assert found is not None and found[0] is any_wire and found[1].path == path
        owner = wire_for_path(path)
        assert owner is not None and owner.error_body(errors.BadRequest("x")) == any_wire.error_body(
            errors.BadRequest("x")
        )
    for path in any_wire.count_paths:
        assert wire_for_path(path) is any_wire
        assert wire_for_request(path) is None  # a count is no model call
    others = [wire for wire in WIRES if wire is not any_wire]
    assert not any(set(any_wire.paths) & set(other.paths) for other in others)


@pytest.mark.parametrize("counting", [wire for wire in MAIN if wire.count_paths], ids=wire_id)
def test_a_count_reads_as_the_model_call_it_stands_for(counting: Wire) -> None:
    """On every wire with a counting endpoint: a model call's own body counts as itself; the
    projection asked to the upstream's counting endpoint reads back as that body; the upstream's
    count reads back from the API's answer."""
    samples = samples_of(counting)
    raw, body = request(counting, samples)
    assert counting.count_body(body) == body
    model, _ = counting.envelope(body, target_of(counting, samples, False))
    asked = counting.count_request(raw, model)
    assert counting.count_body(counting.parse(asked)) == body
    assert counting.upstream_count_path_for(model) not in (None, counting.upstream_path_for(model, False))
    assert counting.counted_tokens(json.loads(codec.dumps(counting.count_answer(7)))) == 7


def test_the_envelope_says_model_and_stream(wire: Wire, samples: Samples) -> None:
    for stream in (False, True):
        _, body = request(wire, samples, stream)
        model, streaming = wire.envelope(body, target_of(wire, samples, stream))
        assert isinstance(model, str) and model
        assert streaming is stream
        assert wire.upstream_path_for(model, stream).startswith("/")


# -- the request ----------------------------------------------------------------------------------


def test_an_unchanged_body_goes_as_the_client_sent_it(wire: Wire, samples: Samples) -> None:
    for stream in (False, True):
        raw, body = request(wire, samples, stream)
        messages = wire.messages(body)
        wire.validate(messages, 0)
        assert wire.rewrite_allowed(body)
        forwarded, _ = wire.encode(body, None, stream, None)
        assert forwarded is None or forwarded == raw  # None: the client's bytes go as they are
        rebuilt, _ = wire.encode(body, messages, stream, None)
        assert rebuilt is not None and json.loads(rebuilt) == json.loads(raw)


def test_identity_survives_reserialization_and_the_answers_way_back(wire: Wire, samples: Samples) -> None:
    raw, body = request(wire, samples)
    messages = wire.messages(body)
    again = wire.messages(wire.parse(json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()))
    assert identify.chain(TENANT, messages) == identify.chain(TENANT, again)
    assert identify.prefix_hash(identify.split_prefix(messages)[0]) == identify.prefix_hash(
        identify.split_prefix(again)[0]
    )
    # the answer, stored as the model gave it, is the turn the client sends back next
    answer = wire.response(json.loads(samples.answer))[0]
    assert answer is not None
    echoed, _ = wire.encode(body, [*messages, answer], False, None)
    assert echoed is not None
    back = wire.messages(wire.parse(echoed))
    assert identify.canonical(back[len(messages)]) == identify.canonical(answer)


def test_tool_calls_pair_with_their_results(wire: Wire, samples: Samples) -> None:
    _, body = request(wire, samples)
    messages = wire.messages(body)
    callers = [m for m in messages if tool_calls(m)]
    results = [m for m in messages if m.get("role") == "tool"]
    assert callers and results
    assert {m.get("tool_call_id") for m in results} <= {i for m in callers for i in tool_call_ids(m)}
    assert [wire.tool_name(tool) for tool in wire.declared_tools(body)] == ["bash"]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_detour_is_written_in_the_wires_own_terms(wire: Wire, samples: Samples, streamed: bool) -> None:
    """The proxy's tool, declared and taken back out; the follow-up of a recall call: the answer's
    turn with that call only, then its result, encoded, parsed back and validated like a client's."""
    _, body = request(wire, samples, streamed)
    assert wire.room_for_tools(body)
    definition = wire.tool_definition(RECALL, "Search the history.", PARAMETERS)
    client_tool = wire.declared_tools(body)[0]
    assert set(client_tool) <= set(definition), "the proxy's tool is declared as the client declares its own"
    offered = wire.with_tools(body, [definition])
    assert [wire.tool_name(tool) for tool in wire.declared_tools(offered)] == ["bash", RECALL]
    assert wire.declared_tools(body) == wire.declared_tools(wire.without_tools(offered, frozenset({RECALL})))
    if streamed:
        observer = wire.observer(body)
        for event in events_of(samples.stream):
            observer(event)
        answer = observer.message()
    else:
        answer = wire.response(json.loads(samples.answer))[0]
    call = _recall_call(answer)
    assert answer is not None
    turn = wire.detour_turn(answer, frozenset({RECALL}))
    result = wire.tool_result(call, "<conversation_history_search>port 8443</conversation_history_search>")
    messages = [*wire.messages(body), turn, result]
    payload, _ = wire.encode(offered, messages, streamed, None)
    assert payload is not None
    sent = wire.parse(payload)
    back = wire.messages(sent)
    wire.validate(back, 0)
    assert RECALL in [wire.tool_name(tool) for tool in wire.declared_tools(sent)]
    answered = back[-1]
    assert answered.get("role") == "tool" and "port 8443" in message_text(answered)
    assert answered.get("tool_call_id") in tool_call_ids(back[-2])
    assert [call_name(c) for c in tool_calls(back[-2])] == [RECALL]


# -- answers --------------------------------------------------------------------------------------


def test_a_whole_answer_is_read(wire: Wire, samples: Samples) -> None:
    message, finish, usage = wire.response(json.loads(samples.answer))
    assert message is not None and TEXT in message_text(message)
    _recall_call(message)
    assert finish
    assert wire.usage(usage) == samples.usage_cached_expected


@pytest.mark.parametrize("pieces", [None, 1, 7], ids=["whole", "bytewise", "7-bytes"])
def test_a_stream_is_relayed_and_observed_however_it_arrives(wire: Wire, samples: Samples, pieces: int | None) -> None:
    _, body = request(wire, samples, stream=True)
    assert wire.is_stream("text/event-stream; charset=utf-8")
    observer = wire.observer(body)
    relayed = b"".join(observer(event) or b"" for event in events_of(samples.stream, pieces))
    assert relayed == samples.stream  # the client asked for everything the stream holds
    assert observer.done and observer.failure() is None and observer.chunks > 0
    message = observer.message()
    assert message is not None and message_text(message) == TEXT
    _recall_call(message)
    assert observer.finish_reason()
    assert wire.usage(observer.usage_raw()) == samples.usage_cached_expected


def test_the_markers_see_the_text_and_the_call(wire: Wire, samples: Samples) -> None:
    """The events after which the stream's message first has text, and first has a call, carry
    the wire's markers: the recall watch reassembles the message only after such events."""
    _, body = request(wire, samples, stream=True)
    observer = wire.observer(body)
    wrote = called = False
    for event in events_of(samples.stream):
        observer(event)
        message = observer.message() or {}
        if not wrote and message.get("content"):
            wrote = True
            assert may_write(wire, event) or may_call(wire, event), event.raw
        if not called and tool_calls(message):
            called = True
            assert may_call(wire, event), event.raw
    assert wrote and called


def test_a_follow_up_stream_continues_the_clients(wire: Wire, samples: Samples) -> None:
    """A recall call after text that went out (`recall.watch`): the events before the call were
    relayed, the rest is held and dropped, and a follow-up's stream continues the same client
    stream: one message, what the client saw and then the answer, properly ended, with the final
    call's usage."""
    _, body = request(wire, samples, stream=True)
    events = events_of(samples.stream)
    first = wire.observer(body)
    head: list[SseEvent] = []
    for event in events:
        first(event)
        if tool_calls(first.message() or {}):
            break  # held from here on, and dropped
        head.append(event)
    said = message_text(wire.observer(body).message() or {}) if not head else _said(wire, body, head)
    assert said, "the text went out before the call"
    go = wire.continuation([event.raw for event in head] if wire.splices_relayed else [])
    client = wire.observer(body)
    for event in head:
        client(event)
    for event in events:
        out = go(event)
        for spliced in events_of(out) if out else []:
            client(spliced)
    assert client.done
    message = client.message()
    assert message is not None
    text = message_text(message)
    assert text.startswith(said) and text.endswith(TEXT) and len(text) >= len(said) + len(TEXT), text
    _recall_call(message)
    assert wire.usage(client.usage_raw()) == samples.usage_cached_expected


def _said(wire: Wire, body: Json, events: list[SseEvent]) -> str:
    observer = wire.observer(body)
    for event in events:
        observer(event)
    return message_text(observer.message() or {})


def test_usage_with_and_without_cache_fields(any_wire: Wire) -> None:
    samples = samples_of(any_wire)
    assert any_wire.usage(samples.usage_cached) == samples.usage_cached_expected
    assert any_wire.usage(samples.usage_plain) == samples.usage_plain_expected
    assert any_wire.usage(None) == Usage()
    assert any_wire.usage({"unrelated": True}).input_total is None


# -- errors ---------------------------------------------------------------------------------------


def _error_classes() -> list[type[errors.ProxyError]]:
    found: list[type[errors.ProxyError]] = []
    pending: list[type[errors.ProxyError]] = [errors.ProxyError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return sorted({c for c in found if c.__module__.startswith("proxy.")}, key=lambda c: c.__name__)


ERROR_CLASSES = _error_classes()


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_is_answered_in_the_apis_shape(any_wire: Wire, cls: type[errors.ProxyError]) -> None:
    samples = samples_of(any_wire)
    message = f'{cls.__name__}: the "quoted" reason'
    exc = cls(message, retry_after=60) if issubclass(cls, errors.RateLimited) else cls(message, param="model")
    assert samples.error_message(json.loads(any_wire.error_body(exc))) == exc.message
    event = any_wire.observer(any_wire.parse(samples.stream_request)).error_event(exc)
    assert event.endswith(b"\n\n") and samples.stream_error_message(event) == exc.message


# -- credentials ----------------------------------------------------------------------------------


def _presented(name: str) -> dict[str, str]:
    return {name: ("Bearer " if name == "authorization" else "") + CALLER_KEY}


ROUTES = parse_config(
    {
        "routes": [
            {
                "name": "paid",
                "match": {"model": "paid-*"},
                "upstream": {"base_url": "http://up/v1", "api_key_env": "K"},
            },
            {"name": "own", "upstream": {"base_url": "http://up/v1"}},
        ],
        "open_access": True,
    },
    env={},
)
KEYS = resolve_keys(ROUTES, {"K": ROUTE_KEY})
PAID, OWN = ROUTES.routes


def test_the_wire_reads_the_callers_key_where_its_api_sends_it(any_wire: Wire) -> None:
    for name in any_wire.credential_headers:
        assert any_wire.client_key(_presented(name)) == CALLER_KEY
    for name in any_wire.credential_query:
        assert any_wire.client_key({}, {name: CALLER_KEY}) == CALLER_KEY
    assert set(any_wire.credential_headers) <= CREDENTIAL_HEADERS
    assert any_wire.client_key({}) is None


def _ways_to_send_a_key(wire: Wire) -> list[tuple[dict[str, str], dict[str, str]]]:
    """The caller's key in every header any wire reads, and in every query parameter of `wire`."""
    return [(_presented(name), {}) for name in sorted(CREDENTIAL_HEADERS)] + [
        ({}, {name: CALLER_KEY}) for name in wire.credential_query
    ]


def test_a_callers_key_never_reaches_an_operator_key_route(any_wire: Wire) -> None:
    stranger, client = Caller(TENANT, None), Caller("team", "alice")
    for headers, query in _ways_to_send_a_key(any_wire):
        sent = {"content-type": "application/json", **headers}
        for caller in (stranger, client):
            out = routing.upstream_headers(KEYS, any_wire, PAID, sent, frozenset(), caller, query)
            assert CALLER_KEY not in json.dumps(out), (headers, query, out)
            assert ROUTE_KEY in json.dumps(out) and out["content-type"] == "application/json"
            summary = routing.summary_auth(KEYS, any_wire, PAID, sent, caller, query)
            assert CALLER_KEY not in json.dumps(summary) and ROUTE_KEY in json.dumps(summary)
        # a configured client's key is never forwarded, even where the caller's own would be
        out = routing.upstream_headers(KEYS, any_wire, OWN, sent, frozenset(), client, query)
        assert CALLER_KEY not in json.dumps(out) and ROUTE_KEY not in json.dumps(out)
        assert routing.summary_auth(KEYS, any_wire, OWN, sent, client, query) == {}


def test_a_callers_own_key_is_forwarded_where_the_route_has_none(any_wire: Wire) -> None:
    stranger = Caller(TENANT, None)
    ways = [(_presented(name), {}) for name in any_wire.credential_headers] + [
        ({}, {name: CALLER_KEY}) for name in any_wire.credential_query
    ]
    for headers, query in ways:
        out = routing.upstream_headers(KEYS, any_wire, OWN, headers, frozenset(), stranger, query)
        assert any_wire.client_key({k.lower(): v for k, v in out.items()}) == CALLER_KEY, (headers, query, out)
        summary = routing.summary_auth(KEYS, any_wire, OWN, headers, stranger, query)
        assert any_wire.client_key({k.lower(): v for k, v in summary.items()}) == CALLER_KEY


def test_a_key_in_the_query_never_reaches_a_log(any_wire: Wire) -> None:
    for name in any_wire.credential_query:
        logged = redact_query(f"{any_wire.path}?alt=sse&{name}={CALLER_KEY}")
        assert CALLER_KEY not in logged and logged.startswith(any_wire.path + "?alt=sse&")


CHAT_USAGE: Json = {
    "prompt_tokens": 100,
    "completion_tokens": 12,
    "total_tokens": 112,
    "prompt_tokens_details": {"cached_tokens": 40},
    "completion_tokens_details": {"reasoning_tokens": 2},
}
CHAT_CALL: Json = {"id": "call_1", "type": "function", "function": {"name": RECALL, "arguments": '{"query":"port"}'}}


def _chat_chunks() -> list[Json]:
    """A chat-completions stream of `TEXT` and a call of `RECALL`, as litellm yields it."""
    base: Json = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}
    first, second = CHAT_CALL["function"]["arguments"][:5], CHAT_CALL["function"]["arguments"][5:]
    opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": RECALL, "arguments": first}}
    return [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": TEXT[:4]}}]},
        {**base, "choices": [{"index": 0, "delta": {"content": TEXT[4:]}}]},
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [opening]}}]},
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": second}}]}}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {**base, "choices": [], "usage": CHAT_USAGE},
    ]


def _says_text_then_recall(message: Message | None) -> None:
    assert message is not None and message_text(message) == TEXT
    (call,) = tool_calls(message)
    assert call_name(call) == RECALL and json.loads(call_arguments(call)) == {"query": "port"}


def test_a_chat_only_hop_renders_the_call_and_its_answer(wire: Wire, samples: Samples) -> None:
    """A wire served through chat completions (a litellm route) renders its request as chat
    messages without private keys, and a chat answer, whole or streamed (byte by byte), back so
    that its own `response`, `observer` and `usage` read the same message and tokens; a wire that
    cannot be served so says None, and the hop refuses the call."""
    _, body = request(wire, samples)
    _, stream_body = request(wire, samples, stream=True)
    chat, streamed = wire.chat_request(body, False), wire.chat_request(stream_body, True)
    if not samples.chat_hop:
        assert chat is None and streamed is None
        return
    assert chat is not None and streamed is not None
    roles = [message["role"] for message in chat["messages"]]
    assert roles[0] == "system" and set(roles) <= {"system", "developer", "user", "assistant", "tool"}
    assert not any(key.startswith("_") for message in chat["messages"] for key in message)
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}
    assert not chat.get("stream")

    answer: Json = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": TEXT, "tool_calls": [CHAT_CALL]},
            }
        ],
        "usage": CHAT_USAGE,
    }
    expected = Usage(100, 60, 40, None, 12, 2)
    message, finish, raw = wire.response(json.loads(json.dumps(wire.chat_answer(answer))))
    _says_text_then_recall(message)
    assert finish is not None and wire.usage(raw) == expected

    render = wire.chat_stream()
    data = b"".join(render.chunk(chunk) for chunk in _chat_chunks()) + render.end()
    observer = wire.observer(stream_body)
    for event in events_of(data, pieces=7):
        observer(event)
    assert observer.done and observer.failure() is None
    _says_text_then_recall(observer.message())
    assert observer.finish_reason() is not None and wire.usage(observer.usage_raw()) == expected
    error = json.loads(wire.chat_error(429, {"error": {"message": "slow down", "type": "rate_limit_error"}}))
    assert samples.error_message(error) == "slow down"
