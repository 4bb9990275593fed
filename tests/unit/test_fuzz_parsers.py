"""Fuzzed parsers (issue 12): whatever a client or an upstream sends, the only exceptions that
leave the wires, the stream observers, the usage normalizers and the config loader are the
proxy's own error tree (each maps to an error in the API's shape); never a TypeError, KeyError,
RecursionError or ValueError that would surface as a 500.

Bodies are generated from each wire's own vocabulary (roles, block and item types, field names)
so that the fuzz reaches deep into validation and conversion, not only the first type check.
Streams are fed whole and byte by byte: both must give the same client bytes, message and usage.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.config_file import parse_config
from proxy.errors import ConfigError, ProxyError
from proxy.protocols import ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from proxy.protocols.anthropic.usage import from_anthropic
from proxy.protocols.base import Wire
from proxy.protocols.gemini.wire import usage_of
from proxy.protocols.openai_chat.usage import from_openai_chat
from proxy.protocols.responses.usage import from_openai_responses
from proxy.sse import SseSplitter
from tests.support.lanes import examples

WIRES = [OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC, GEMINI]
TARGETS = {
    GEMINI.name: GEMINI.target("/v1beta/models/gemini-x:streamGenerateContent", {"alt": "sse"}),
}
"""Where a wire takes the model from its path: one such path (the others read the body)."""
FUZZ = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])

WORDS = [
    "role", "content", "type", "text", "name", "id", "tool_calls", "tool_call_id", "function", "arguments",
    "input", "output", "call_id", "tool_use_id", "source", "data", "media_type", "cache_control", "thinking",
    "signature", "summary", "encrypted_content", "image_url", "url", "delta", "index", "choices", "usage",
    "message", "finish_reason", "stop_reason", "content_block", "response", "item", "item_id", "output_index",
    "prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "cached_tokens",
    "cache_read_input_tokens", "cache_creation_input_tokens", "prompt_tokens_details", "input_tokens_details",
    "contents", "parts", "functionCall", "functionResponse", "function_call", "args", "thoughtSignature",
    "thought", "systemInstruction", "candidates", "usageMetadata", "promptTokenCount", "cachedContentTokenCount",
    "candidatesTokenCount", "thoughtsTokenCount", "finishReason",
]  # fmt: skip
VALUES = [
    "user", "assistant", "system", "developer", "tool", "function", "text", "image", "image_url", "tool_use",
    "tool_result", "thinking", "redacted_thinking", "document", "message", "function_call",
    "function_call_output", "reasoning", "input_text", "output_text", "input_image", "message_start",
    "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop",
    "text_delta", "input_json_delta", "thinking_delta", "signature_delta", "response.created",
    "response.output_item.added", "response.output_text.delta", "response.function_call_arguments.delta",
    "response.output_item.done", "response.completed", "response.failed", "error", "stop", "tool_calls",
    "model", "STOP",
]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(VALUES)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(WORDS), inner, max_size=5),
    max_leaves=30,
)
messages = st.lists(st.dictionaries(st.sampled_from(WORDS), values, max_size=5), max_size=5)


def _body(wire: Wire, msgs: Any, extra: dict[str, Any], stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "gpt-4o", "stream": stream, **extra}
    if wire is ANTHROPIC:
        body.update({"messages": msgs, "max_tokens": 100})
    elif wire is OPENAI_RESPONSES:
        body["input"] = msgs
    elif wire.name == "gemini":
        body["contents"] = msgs
    else:
        body["messages"] = msgs
    return body


def through_wire(wire: Wire, raw: bytes) -> None:
    """The request path of a wire up to the upstream body; only ProxyError may come out."""
    try:
        body = wire.parse(raw)
        _, stream = wire.envelope(body, TARGETS.get(wire.name))
        msgs = wire.messages(body)
        wire.validate(msgs, 0)
        wire.encode(body, msgs, stream, None)
        wire.rewrite_allowed(body)
    except ProxyError:
        pass


@FUZZ
@given(
    wire=st.sampled_from(WIRES),
    msgs=messages | values,
    extra=st.dictionaries(
        st.sampled_from(["tools", "tool_choice", "system", "instructions", "stream_options", "systemInstruction"]),
        values,
    ),
    stream=st.booleans(),
)
def test_request_bodies(wire: Wire, msgs: Any, extra: dict[str, Any], stream: bool) -> None:
    through_wire(wire, json.dumps(_body(wire, msgs, extra, stream)).encode())


@FUZZ
@given(wire=st.sampled_from(WIRES), raw=st.binary(max_size=200))
def test_request_bytes(wire: Wire, raw: bytes) -> None:
    through_wire(wire, raw)


def test_hostile_nesting_and_numbers() -> None:
    """The cases that answered 500 before: 100,000 levels of nesting, a 5,000-digit integer."""
    for wire in WIRES:
        through_wire(wire, b'{"model": "gpt-4o", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
        for field in ("max_tokens", "max_output_tokens", "temperature"):
            body = _body(wire, [{"role": "user", "content": "hi"}], {}, False)
            raw = json.dumps(body)[:-1] + f', "{field}": {"9" * 5000}}}'
            through_wire(wire, raw.encode())


@FUZZ
@given(
    wire=st.sampled_from(WIRES),
    parsed=st.dictionaries(st.sampled_from(WORDS), values),
)
def test_upstream_answers(wire: Wire, parsed: Any) -> None:
    """A non-streamed upstream answer (a JSON object: the callers check that) of any shape: read
    or refused, never a crash."""
    try:
        wire.response(parsed)
        wire.summary_text(parsed)
        wire.usage(parsed.get("usage"))
        wire.usage(parsed.get("usageMetadata"))
    except ProxyError:
        pass


def _events(wire: Wire) -> st.SearchStrategy[list[Any]]:
    event = st.dictionaries(st.sampled_from(WORDS), values, max_size=5) | values
    return st.lists(event, max_size=8)


def _stream(wire: Wire, payloads: list[Any]) -> bytes:
    out = []
    for p in payloads:
        kind = p.get("type") if isinstance(p, dict) and isinstance(p.get("type"), str) else None
        head = f"event: {kind}\n" if kind and wire is not OPENAI_CHAT else ""
        out.append(f"{head}data: {json.dumps(p)}\n\n")
    if wire is OPENAI_CHAT:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def observe(wire: Wire, data: bytes, pieces: list[bytes]) -> tuple[list[bytes | None], Any, Any, Any] | str:
    observer = wire.observer(_body(wire, [{"role": "user", "content": "hi"}], {}, True))
    splitter = SseSplitter()
    sent: list[bytes | None] = []
    try:
        for piece in pieces:
            for event in splitter.feed(piece):
                sent.append(observer(event))
        return sent, observer.message(), observer.finish_reason(), wire.usage(observer.usage_raw())
    except ProxyError as exc:
        return f"{type(exc).__name__}: {exc}"


@FUZZ
@given(data=st.data(), wire=st.sampled_from(WIRES))
def test_upstream_streams_whole_and_byte_by_byte(data: st.DataObject, wire: Wire) -> None:
    raw = _stream(wire, data.draw(_events(wire)))
    whole = observe(wire, raw, [raw])
    bytewise = observe(wire, raw, [raw[i : i + 1] for i in range(len(raw))])
    assert whole == bytewise


@FUZZ
@given(raw=values)
def test_usage_normalizers(raw: Any) -> None:
    for normalize in (from_openai_chat, from_openai_responses, from_anthropic, usage_of):
        usage = normalize(raw)
        assert all(v is None or isinstance(v, int) for v in usage.to_dict().values())


config_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "routes",
                    "policies",
                    "store",
                    "match",
                    "model",
                    "path",
                    "upstream",
                    "base_url",
                    "policy",
                    "name",
                    "context_window",
                    "summarizer",
                    "recall",
                    "limits",
                    "server",
                    "admin_token_env",
                    "api_key_env",
                    "timeouts",
                    "retention",
                    "enabled",
                    "tool_results",
                ]  # fmt: skip
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@FUZZ
@given(data=config_values)
def test_config_loader(data: Any) -> None:
    try:
        parse_config(data, env={})
    except ConfigError:
        pass
