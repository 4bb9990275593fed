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

The Wire is the only place that knows its API: routing, authentication, recall, the inspector,
the ledger and tracing consult these hooks and never branch on a wire's name (nothing outside
this package names a wire: `tests/test_structure.py`). Adding an API is writing
`proxy/protocols/<api>/`, one line in `proxy/protocols/__init__.py` (`WIRES`) and its samples
for the wire contract suite (`tests/wires/samples_<name>.py`), which every registered wire
passes. The hooks, by concern:

* paths -- `name` (recorded in `CallRecord.wire`), `path` (what `routes[].match.path` is matched
  against, whatever path the request came on), `paths` (its fixed model paths), `target(path,
  query)` (whether a request path is the wire's, and the model and stream flag the path or query
  carry: Gemini's `/v1beta/models/{model}:streamGenerateContent`), `owns(path)` (the paths whose
  errors take the wire's shape), `upstream_path` and `upstream_path_for(model, stream)` (where
  the call goes on the route's `base_url`);
* counting -- `count_paths`, `count_target`, `count_body`, `upstream_count_path_for(model)`,
  `count_request`, `counted_tokens`, `count_answer` (`counting.py`: the API's token-counting
  endpoint);
* the request -- `parse`, `envelope(body, target)` (the model and stream flag, from the body or
  the `Target`), `messages`, `validate`, `rewrite_allowed`, `provider_managed`, `encode`,
  `with_cache_point`, `with_cache_key`, `provider_trigger` (the input tokens at which the
  provider compacts the request itself), `unstreamed` (the request asking for a whole answer);
* credentials -- `credential_headers` and `credential_query` (where a caller's key travels:
  read, stripped before upstream on a route that spends the operator's key, redacted),
  `client_key(headers, query)`, `auth_headers(key)` (how a key is sent upstream), `probe`;
* answers -- `observer` (stream observation), `is_stream`, `fails_in_stream`,
  `opening_failure`, `response`, `usage` (the API's usage normalized to `Usage`), `provider`
  (the GenAI provider tracing names), `error_body` (every `ProxyError` in the API's shape),
  `client_hint` (who calls it, with which base URL: `serve`'s banner);
* the proxy's own tools (recall, memory) -- `declared_tools`, `tool_name`, `room_for_tools`
  (whether the request leaves room for a tool of the proxy's own), `tool_definition`,
  `with_tools`, `without_tools`, `detour_turn` (the assistant turn of a detour, with only the
  proxy's calls), `tool_result`, `call_markers` / `text_markers` (bytes of the stream events
  that may start a call or carry text), `continuation` and `splices_relayed` (how a follow-up's
  stream continues a client stream already relayed);
* the provider's own work -- `summary_request`, `summary_text`, `summary_headers`,
  `native_compaction`, `native_compacted`, `purpose`;
* a hop that speaks only chat completions (a litellm route) -- `chat_request`, `chat_answer`,
  `chat_stream`, `chat_error` (`ChatRendering`, in `chat_hop.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from policies.text import call_name, tool_calls

from .. import codec
from ..errors import ProxyError, sse_error_event
from ..sse import SseEvent
from ..tail_parse import BodyMemo
from ..types import Json, Message, SentBody
from ..usage import Usage
from .chat_hop import ChatDefaults, ChatRendering
from .counting import CountDefaults, Counting
from .target import Target as Target  # re-exported: the wires and the pipeline import it from here

Continue = Callable[[SseEvent], bytes | None]
"""One event of a follow-up's stream -> the bytes that continue the client's stream (None: dropped)."""
NO_QUERY: Mapping[str, str] = {}


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


class Wire(ChatRendering, Counting, Protocol):
    name: str
    """The wire's identifier: recorded with every call (`CallRecord.wire`), in metrics and logs."""
    path: str
    """The client-facing path, matched against `routes[].match.path`."""
    provider: str
    """The GenAI provider its calls are traced as (`gen_ai.provider.name`)."""
    client_hint: str
    """Who calls the API and the base URL they take, `{url}` the proxy's (`serve`'s banner); "":
    said by another wire already."""
    credential_headers: tuple[str, ...]
    """The headers (lower case) a caller's key may travel in, in the order they are read
    (`authorization` as a bearer token)."""
    credential_query: tuple[str, ...]
    """The query parameters a caller's key may travel in (Gemini's `key`)."""
    call_markers: tuple[bytes, ...]
    """Bytes of the stream events that can start a tool call: only after one is a stream's message
    reassembled to look for a call (after every delta would make a long stream quadratic)."""
    text_markers: tuple[bytes, ...]
    """Bytes of the stream events that can carry text."""
    splices_relayed: bool
    """Whether `continuation` reads the events already relayed (else they are not kept)."""

    def target(self, path: str, query: Mapping[str, str]) -> Target | None:
        """The request path's `Target` when `path` is one of the wire's model paths, else None."""

    def owns(self, path: str) -> bool:
        """Whether `path` belongs to the API (its model paths, its counting paths, the paths
        below them): an error there is answered in the API's shape."""

    def upstream_path_for(self, model: str, stream: bool) -> str:
        """Where a call of `model` goes, appended to the route's `base_url` (`upstream_path`
        unless the API puts the model or the stream in the path)."""

    def client_key(self, headers: Mapping[str, str], query: Mapping[str, str] = NO_QUERY) -> str | None:
        """The caller's own key, from `credential_headers` then `credential_query`; None without one."""

    def declared_tools(self, body: Json) -> list[Any]:
        """The tools the request declares, in the API's shape."""

    def tool_name(self, tool: Any) -> str | None:
        """A declared tool's name (None: not a named function tool)."""

    def room_for_tools(self, body: Json) -> bool:
        """Whether the proxy may add tools of its own: the request's tool choice leaves the model
        free to call them, and a detour can append a turn (no assistant prefill to continue)."""

    def answers_in_text(self, body: Json) -> bool:
        """Whether the request's tool choice lets the model answer with text alone (none that
        forces a tool call): a shared summary repeats the request and needs a text answer."""

    def tool_definition(self, name: str, description: str, parameters: Json) -> Json:
        """A function tool of the proxy's own, as the API declares tools."""

    def with_tools(self, body: Json, definitions: Sequence[Json]) -> Json:
        """`body` with `definitions` (`tool_definition`s) after its own tools (a copy)."""

    def without_tools(self, body: Json, names: frozenset[str]) -> Json:
        """`body` without the tools named `names`; with no tool left, without what needs tools."""

    def detour_turn(self, message: Message, names: frozenset[str]) -> Message:
        """The assistant turn that called the proxy's tools (`names`), common model, with those
        calls only and whatever the API requires around them (signatures, reasoning items)."""

    def tool_result(self, call: Mapping[str, Any], text: str) -> Message:
        """The result of one of the proxy's tool calls, common model."""

    def continuation(self, relayed: Sequence[bytes]) -> Continue:
        """How a follow-up's events continue a client stream that already got `relayed`."""

    paths: tuple[str, ...]
    """Every path the wire is served on (aliases of `path`)."""
    upstream_path: str
    """Appended to the route's `base_url`."""

    def parse(self, raw: bytes, memo: BodyMemo | None = None) -> Json:
        """The body as a dict; with `memo`, only its new tail when it extends a recent body."""

    def envelope(self, body: Json, target: Target | None = None) -> tuple[str, bool]:
        """The model and whether a stream was asked for (from the body, or from `target` where
        the API carries them in the path); BadRequest for a malformed body."""

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


class BaseWire(ChatDefaults, CountDefaults):
    """Defaults of the `Wire` members a wire may leave alone: fixed paths, a model and stream
    flag in the body, and OpenAI's conventions (bearer keys, function tools, `tool_choice`)."""

    name: str
    path: str
    paths: tuple[str, ...]
    upstream_path: str
    fails_in_stream = False
    purpose = "main"
    provider = "openai"
    client_hint = ""
    credential_headers: tuple[str, ...] = ("authorization", "x-api-key", "api-key")
    """OpenAI's bearer token, Anthropic's `x-api-key`, Azure's `api-key`: every wire accepts
    all three, as clients of one API often send another's."""
    credential_query: tuple[str, ...] = ()
    call_markers: tuple[bytes, ...] = ()
    text_markers: tuple[bytes, ...] = ()
    splices_relayed = False

    def target(self, path: str, query: Mapping[str, str]) -> Target | None:
        """One of the fixed `paths`; the model and stream flag are in the body."""
        return Target(path) if path in self.paths else None

    def owns(self, path: str) -> bool:
        """The wire's paths and counting paths, and the paths below them (Anthropic's
        `/v1/messages/count_tokens` is below `/v1/messages`)."""
        return any(path == p or path.startswith(p + "/") for p in (*self.paths, *self.count_paths))

    def upstream_path_for(self, model: str, stream: bool) -> str:
        return self.upstream_path

    def client_key(self, headers: Mapping[str, str], query: Mapping[str, str] = NO_QUERY) -> str | None:
        for name in self.credential_headers:
            value = bearer_token(headers) if name == "authorization" else headers.get(name)
            if value:
                return value
        for name in self.credential_query:
            if query.get(name):
                return query[name]
        return None

    def declared_tools(self, body: Json) -> list[Any]:
        tools = body.get("tools")
        return tools if isinstance(tools, list) else []

    def tool_name(self, tool: Any) -> str | None:
        """Chat nests the name under `function`; Anthropic's and the Responses API's are flat."""
        if not isinstance(tool, Mapping):
            return None
        function = tool.get("function")
        named = function if isinstance(function, Mapping) else tool
        name = named.get("name")
        return name if isinstance(name, str) else None

    def room_for_tools(self, body: Json) -> bool:
        """A `tool_choice` that leaves the model free to call the proxy's tools (`OPEN_CHOICES`)."""
        return body.get("tool_choice") in OPEN_CHOICES

    def answers_in_text(self, body: Json) -> bool:
        """No tool choice, `auto` or `none` (OpenAI's strings, Anthropic's `{"type": ...}`), or an
        `allowed_tools` list in `auto` mode; not `required`, Anthropic's `any`, a named tool."""
        choice = body.get("tool_choice")
        if not isinstance(choice, Mapping):
            return choice in (None, "auto", "none")
        listed = choice.get("allowed_tools")  # Chat Completions nests the list, Responses does not
        mode = listed.get("mode") if isinstance(listed, Mapping) else choice.get("mode")
        return choice.get("type") in ("auto", "none") or (choice.get("type") == "allowed_tools" and mode == "auto")

    def tool_definition(self, name: str, description: str, parameters: Json) -> Json:
        """A chat-completions function tool."""
        return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}

    def with_tools(self, body: Json, definitions: Sequence[Json]) -> Json:
        return {**body, "tools": [*(body.get("tools") or []), *definitions]}

    def without_tools(self, body: Json, names: frozenset[str]) -> Json:
        """Without `tools`, `tool_choice` and `parallel_tool_calls` once no tool is left."""
        tools = [tool for tool in body.get("tools") or [] if self.tool_name(tool) not in names]
        out = {key: value for key, value in body.items() if key not in TOOL_FIELDS}
        if tools:
            out["tools"] = tools
            for key in TOOL_FIELDS[1:]:
                if key in body:
                    out[key] = body[key]
        return out

    def detour_turn(self, message: Message, names: frozenset[str]) -> Message:
        """The text and the calls of `names` from `tool_calls`."""
        calls = [call for call in tool_calls(message) if call_name(call) in names]
        return {"role": "assistant", "content": message.get("content"), "tool_calls": calls}

    def tool_result(self, call: Mapping[str, Any], text: str) -> Message:
        """A `role: tool` message answering the call's id; every wire's encoder renders it."""
        return {"role": "tool", "tool_call_id": str(call.get("id", "")), "content": text}

    def continuation(self, relayed: Sequence[bytes]) -> Continue:
        """Independent deltas (chat chunks): the follow-up's events go through as they are."""
        return _unchanged

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


OPEN_CHOICES: tuple[Any, ...] = (None, "auto", "required", {"type": "auto"}, {"type": "any"})
"""`tool_choice` values that leave the model free to call the proxy's tools. Not: `none` (OpenAI's
string, Anthropic's `{"type": "none"}`), a forced tool (`{"type": "function", ...}`, Anthropic
`{"type": "tool", ...}`) or an allowed list the proxy's tool is not on."""
TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")


def _unchanged(event: SseEvent) -> bytes | None:
    return event.raw


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer ...` header, or None."""
    auth = headers.get("authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return None


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
