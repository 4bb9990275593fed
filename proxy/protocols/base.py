"""What the pipeline needs from a client API ("wire"): how its requests map onto the common
message model (OpenAI chat-completions messages), how to build the upstream body back from a
projection, and how to read its responses, streams, usage and errors.

The common model is what gets hashed, stored as events and projected by `policies/`. A wire
whose native format differs (Anthropic Messages, OpenAI Responses) converts losslessly: what
cannot be expressed in chat-completions terms travels in private `_`-prefixed keys of the
common messages, so that an unchanged message converts back to its exact native form.

`Wire` and `StreamObserver` declare every member the pipeline calls; `BaseWire` and
`BaseObserver` hold the defaults of the members most wires do not need to change, and the three
wires inherit them. So the orchestrator calls `wire.rewrite_allowed(body)` and
`observer.failure()` directly instead of probing for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .. import codec
from ..errors import ProxyError, sse_error_event
from ..sse import SseEvent
from ..tail_parse import BodyMemo
from ..types import Json, Message, SentBody
from ..usage import Usage


class StreamObserver(Protocol):
    done: bool
    """The stream's proper end (e.g. `[DONE]`, `message_stop`) was relayed to the client."""

    def __call__(self, event: SseEvent) -> bytes | None:
        """The bytes to relay for this event (None drops it); reassembles on the side."""

    @property
    def chunks(self) -> int: ...
    def message(self) -> Message | None: ...
    def finish_reason(self) -> str | None: ...
    def usage_raw(self) -> Any: ...
    def failure(self) -> str | None:
        """Why a stream that ended properly carries no answer (Responses `response.failed`, an
        `error` event): the call is recorded as `error` with that text."""

    def error_event(self, exc: ProxyError) -> bytes:
        """What the relay sends when the stream breaks after it started, in the API's own
        stream vocabulary."""


class BaseObserver:
    """Defaults of the `StreamObserver` members a wire's observer may leave alone."""

    done: bool = False

    def failure(self) -> str | None:
        """No failure beyond what the relay itself saw."""
        return None

    def error_event(self, exc: ProxyError) -> bytes:
        """An OpenAI-shaped `data:` error event."""
        return sse_error_event(exc)


@dataclass(frozen=True)
class NativeRequest:
    """One call asking the provider to compact messages itself (`summarizer.mode: native`)."""

    path: str
    """Appended to the route's `base_url`."""
    body: Json
    headers: dict[str, str]
    minimum_tokens: int = 0
    """The provider compacts only a prompt of at least this many tokens (Anthropic: 50,000)."""


@dataclass(frozen=True)
class Compacted:
    """The provider's answer to a `NativeRequest`: opaque `messages` to send back verbatim in
    place of what they compacted (the Responses API's compaction item), or a readable `text`
    summary (Anthropic's compaction block); `error` when it compacted nothing."""

    messages: tuple[Message, ...]
    text: str | None
    usage_raw: Any
    error: str | None = None


class Wire(Protocol):
    name: str
    path: str
    """The client-facing path, matched against `routes[].match.path`."""
    paths: tuple[str, ...]
    """Every path the wire is served on (aliases of `path`)."""
    upstream_path: str
    """Appended to the route's `base_url`."""
    count_paths: tuple[str, ...]
    """Where the API counts a request's input tokens without running it (Anthropic's
    `count_tokens`, the Responses API's `input_tokens`); empty when it has no such endpoint."""
    upstream_count_path: str | None
    """The upstream's counting path (appended to the route's `base_url`), None without one."""

    def count_answer(self, tokens: int) -> Json:
        """The counting endpoint's answer for `tokens` input tokens, in the API's shape."""

    def parse(self, raw: bytes, memo: BodyMemo | None = None) -> Json:
        """The body as a dict; with `memo`, only its new tail when it extends a recent body."""

    def envelope(self, body: Json) -> tuple[str, bool]:
        """The model and whether a stream was asked for; BadRequest for a malformed body."""

    def messages(self, body: Json, memo: BodyMemo | None = None) -> list[Message]:
        """The request's messages in the common model (system/developer first); with the `memo`
        the body was parsed with, a wire may reuse what it converted for the body it extends."""

    def rewrite_allowed(self, body: Json) -> bool:
        """False: forward the request without projecting it (it is still recorded), e.g. when
        the upstream owns the conversation state (Responses `previous_response_id`)."""

    def provider_managed(self, body: Json) -> bool:
        """Whether the request asks the provider to compact its context (its `context_management`
        names a compaction; context editing alone, such as clearing old thinking, does not): the
        policy's `provider_context` decides whether ctxproxy still projects it."""

    def provider_trigger(self, body: Json) -> int | None:
        """The input tokens, in the provider's count, at which the provider compacts this request
        (its `context_management`); None when it does not or the threshold is not stated. Under
        `provider_context: combine` ctxproxy projects below it, so its own trim and summary act
        first and the provider's compaction is left for what ctxproxy cannot bring under it."""

    def validate(self, messages: list[Message], start: int, stop: int | None = None) -> None:
        """Validate messages[start:stop]; the rest equals an earlier accepted request."""

    def with_cache_point(
        self, body: Json, messages: list[Message], point: int | None, previous: int | None = None
    ) -> list[Message]:
        """`messages` with a prompt-cache breakpoint at `Projection.cache_point` (and at its
        `previous_point`, when the cache would not find it from the new one) where the wire's
        caching needs one (Anthropic, when the client caches); otherwise `messages` itself."""

    def with_cache_key(self, body: Json, raw: bytes, key: str) -> tuple[Json, bytes]:
        """(`body`, `raw`: its bytes) with `key` as their prompt-cache routing key where the API
        takes one and the client set none (`proxy/cache_key.py`); otherwise both themselves."""

    def encode(
        self, body: Json, messages: list[Message] | None, stream: bool, known: SentBody | None
    ) -> tuple[bytes | None, SentBody | None]:
        """The upstream body with `messages` (None: the client's own) -- or None when the raw
        client bytes can be forwarded -- and per-message encodings to remember."""

    def observer(self, body: Json) -> StreamObserver: ...
    def is_stream(self, content_type: str) -> bool: ...
    def unstreamed(self, body: Json) -> Json:
        """`body` asking for a whole answer instead of a stream (a shadow call, `proxy/shadow/`)."""

    fails_in_stream: bool
    """Whether the API may refuse a request inside a 200 stream, before its answer (then the
    stream's opening is read first: `opening_failure`)."""
    purpose: str
    """What its calls are recorded as: `main`, or `client_compaction` (the client's own compaction)."""

    def opening_failure(self, event: SseEvent) -> bytes | bool | None:
        """One event of a stream's opening: None while it only opens the stream, False once the
        answer has begun (or cannot fail inside the stream any more), the failure's JSON when the
        stream fails before any of the answer (the Responses API reports an overflow so)."""

    def response(self, parsed: Json) -> tuple[Message | None, str | None, Any]:
        """From a non-streamed answer: the assistant message (common model), finish reason, raw usage."""

    def usage(self, raw: Any) -> Usage: ...
    def error_body(self, exc: ProxyError) -> bytes: ...
    def auth_headers(self, key: str) -> dict[str, str]:
        """How the route's own upstream key is sent."""

    def probe(self, key: str | None) -> tuple[str, dict[str, str]]:
        """A request that costs nothing and needs the key (`ctxproxy doctor`): the GET path
        appended to the route's `base_url` (the model list) and its headers, with `key` if given."""

    def summary_request(self, model: str, messages: list[Message], max_tokens: int) -> tuple[str, Json]:
        """Path and native body of a summarizer call on the route's upstream."""

    def summary_text(self, parsed: Json) -> tuple[str | None, Any]: ...

    summary_headers: dict[str, str]
    """Headers every summarizer call on the route's upstream needs besides its key."""

    def native_compaction(self, model: str, messages: list[Message], max_tokens: int) -> NativeRequest | None:
        """The provider's own compaction of `messages` (common model, no system prefix) as one
        call; None when the API has none."""

    def native_compacted(self, parsed: Json) -> Compacted:
        """What a `native_compaction` call's 200 answer holds."""


class BaseWire:
    """Defaults of the `Wire` members a wire may leave alone."""

    fails_in_stream = False
    purpose = "main"
    count_paths: tuple[str, ...] = ()
    upstream_count_path: str | None = None

    def count_answer(self, tokens: int) -> Json:
        """Anthropic's shape (`{"input_tokens": N}`); the Responses API adds its `object`."""
        return {"input_tokens": tokens}

    def rewrite_allowed(self, body: Json) -> bool:
        """Every request may be projected."""
        return True

    summary_headers: dict[str, str] = {}

    def provider_managed(self, body: Json) -> bool:
        """The Chat Completions API has no compaction of its own."""
        return False

    def provider_trigger(self, body: Json) -> int | None:
        return None

    def native_compaction(self, model: str, messages: list[Message], max_tokens: int) -> NativeRequest | None:
        """The Chat Completions API has no compaction of its own."""
        return None

    def native_compacted(self, parsed: Json) -> Compacted:
        return Compacted((), None, parsed.get("usage"), "the API has no compaction of its own")

    def validate(self, messages: list[Message], start: int, stop: int | None = None) -> None:
        """Nothing left to check: the native messages were validated while converting (`messages`)."""

    def is_stream(self, content_type: str) -> bool:
        return "text/event-stream" in content_type

    def unstreamed(self, body: Json) -> Json:
        """The three APIs stream on `stream: true` (OpenAI's with `stream_options`) and answer
        whole without it."""
        return {key: value for key, value in body.items() if key not in ("stream", "stream_options")}

    def probe(self, key: str | None) -> tuple[str, dict[str, str]]:
        """OpenAI's model list (the route's `base_url` ends in `/v1`), with the key as a bearer token."""
        return "/models", ({"Authorization": f"Bearer {key}"} if key else {})

    def opening_failure(self, event: SseEvent) -> bytes | bool | None:
        """These APIs answer a request they refuse with an error status, not inside a stream."""
        return False

    def with_cache_point(
        self, body: Json, messages: list[Message], point: int | None, previous: int | None = None
    ) -> list[Message]:
        """Automatic prefix caching (OpenAI) needs no breakpoint."""
        return messages

    def with_cache_key(self, body: Json, raw: bytes, key: str) -> tuple[Json, bytes]:
        """The API has no routing key (Anthropic caches by its breakpoints)."""
        return body, raw


def with_prompt_cache_key(body: Json, raw: bytes, key: str) -> tuple[Json, bytes]:
    """(`body`, `raw`) with OpenAI's `prompt_cache_key` (chat completions and Responses alike)
    unless the client's body has the field, whatever its value: a client's own key is never
    replaced. The key goes first into the client's bytes, which stay theirs otherwise, so a
    request that is not rewritten still goes as sent, plus the key, without being encoded."""
    if "prompt_cache_key" in body:
        return body, raw
    at = raw.index(b"{") + 1  # a body is a JSON object with its model and input: never empty
    field = codec.dumps({"prompt_cache_key": key})[1:-1] + b","
    return {**body, "prompt_cache_key": key}, b"".join((raw[:at], field, memoryview(raw)[at:]))  # one copy
