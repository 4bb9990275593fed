"""Anthropic Messages wire (`POST /v1/messages`), mapped losslessly onto the common model.

Native -> common (what is hashed, stored and projected):

* top-level `system` (a string or text blocks) -> one leading `{"role": "system"}` message with
  the same content (the upstream body keeps `system` as the client sent it: the prefix is pinned).
* an assistant message with a string content -> the same message. With blocks: `content` is the
  text blocks' text joined by newlines (None without text), every `tool_use` block becomes a
  `tool_calls` entry (id, name, arguments = compact JSON of `input`), and the native blocks travel
  as received in `_anthropic.content` -- thinking / redacted_thinking with signatures, citations,
  cache_control, server tool blocks -- so the turn goes back upstream exactly.
* a user message with blocks is split into pieces: one `{"role": "tool"}` message per
  `tool_result` block (tool_call_id = tool_use_id; content = the block's content, a string or
  its blocks; `_anthropic.block` = the block with `content` replaced by null, which keeps its
  key order, `is_error` and `cache_control`), then one user message with the remaining blocks
  as its content (omitted when there are none). Each piece of a split message carries
  `_anthropic.piece`/`of` (which piece of how many) and `at` (the block positions in the native
  content). A user message without tool results needs no placing and carries no `_anthropic`
  key, so `[{"type": "text", "text": P, "cache_control": ...}]` and the string `P` are the same
  message to identity (Claude Code sends its newest prompt as the first and re-sends it as the
  second). A user message with a string content stays as it is.
* cache_control markers are taken off the blocks and kept in the message's `_cache_markers` key
  (block path + key position + value), which identity canonicalization ignores: a client that
  moves its breakpoints every turn (Claude Code marks the newest message) does not fork its
  conversation. They are put back, at the same key position, on the blocks that are sent.

Common -> native (the upstream body after a projection rewrote something):

* pieces of one native message that are all present and in order rebuild it exactly (blocks
  back at their positions); a trimmed tool result becomes its tool_result block with the new
  text, keeping every other field; a piece without `_anthropic` (the `<conversation_summary>`
  block, a synthetic `[no result recorded]` result) becomes a plain text / tool_result block;
* consecutive messages of one role merge into one native message (tool results first, as the
  API requires, because the common model puts them right after their assistant turn);
* an assistant turn whose `_anthropic` blocks agree with its common fields goes back as those
  blocks, thinking included; if a policy ever changed its text or calls, the thinking blocks are
  kept and the rest is rebuilt;
* cache_control markers stay on the blocks that are sent; if system + tools + messages would
  carry more than 4, the oldest message markers are dropped first;
* if the projection starts with an assistant turn (history pruned without a summary), a short
  user text block saying so is put first: the API requires a user message first.

Identity: the Anthropic SDK re-sends the content blocks of a response as it received them
(`model_dump(exclude_unset=True)`: exactly the fields the JSON had), and the stream reassembly
here reproduces the SDK's `get_final_message()` (content_block_start's block, text / thinking
appended, signature replaced, tool input parsed from the JSON deltas). So the stored response
and the re-sent turn convert to equal common messages. A client that re-serializes blocks with
extra null fields (a plain `model_dump()`) forks the conversation at that turn.

Usage: `message_start.message.usage` gives the input and cache fields, each `message_delta.usage`
is a cumulative snapshot whose known fields replace the earlier ones (never added), so a
duplicated final event changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .. import identify
from ..errors import BadRequest, NotFound, ProxyError
from ..sse import SseEvent
from ..types import Json, Message
from ..usage import Usage, from_anthropic

PRIVATE = "_anthropic"
MAX_CACHE_CONTROL = 4
OMITTED_TEXT = "[Earlier turns of this conversation were omitted by the proxy to fit the context window.]"
_THINKING = frozenset({"thinking", "redacted_thinking"})

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(exc: ProxyError) -> str:
    known = _ERROR_TYPES.get(exc.status)
    if known is not None:
        return known
    return "invalid_request_error" if exc.status < 500 else "api_error"


def error_bytes(exc: ProxyError) -> bytes:
    return json.dumps({"type": "error", "error": {"type": error_type(exc), "message": exc.message}}).encode()


# --------------------------------------------------------------------------- native -> common


def parse_body(raw: bytes) -> Json:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"There was an error parsing the body of your request as JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object, got " + type(body).__name__ + ".")
    return body


def validate_envelope(body: Json) -> tuple[str, bool]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model: Field required (a non-empty string)", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest("messages: Field required (an array of messages)", param="messages")
    if not messages:
        raise BadRequest("messages: at least one message is required", param="messages")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("stream: Input should be a valid boolean", param="stream")
    system = body.get("system")
    if system is not None and not isinstance(system, str) and not _blocks_ok(system):
        raise BadRequest("system: Input should be a valid string or a list of text blocks", param="system")
    return model, bool(stream)


def _blocks_ok(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in value)


def _validate_native(i: int, message: Any) -> None:
    where = f"messages.{i}"
    if not isinstance(message, dict):
        raise BadRequest(f"{where}: Input should be a valid dictionary", param=where)
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise BadRequest(f"{where}.role: Input should be 'user' or 'assistant'", param=f"{where}.role")
    content = message.get("content")
    if isinstance(content, str):
        return
    if not _blocks_ok(content):
        raise BadRequest(
            f"{where}.content: Input should be a valid string or a list of content blocks with a `type`",
            param=f"{where}.content",
        )
    assert isinstance(content, list)
    for j, block in enumerate(content):
        kind = block["type"]
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise BadRequest(f"{where}.content.{j}.tool_use_id: Field required", param=f"{where}.content.{j}")
        if kind == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)):
            raise BadRequest(f"{where}.content.{j}: tool_use blocks need `id` and `name`", param=f"{where}.content.{j}")


def _arguments(value: Any) -> str:
    return json.dumps(value if value is not None else {}, ensure_ascii=False, separators=(",", ":"))


def _assistant_fields(blocks: list[Any]) -> tuple[str | None, list[dict[str, Any]] | None]:
    texts = [
        b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    calls = [
        {
            "id": b.get("id"),
            "type": "function",
            "function": {"name": b.get("name"), "arguments": _arguments(b.get("input"))},
        }
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    return ("\n".join(texts) if texts else None), (calls or None)


def _extra(message: Json) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in ("role", "content")}


MARKERS = identify.CACHE_MARKERS
"""Where a common message keeps its blocks' cache_control markers: a key identity
canonicalization ignores, so a client that moves its cache breakpoints from turn to turn (Claude
Code marks the newest message) still continues the same conversation instead of forking it."""


def _pop_markers(blocks: list[Any], path: list[Any], found: list[dict[str, Any]]) -> list[Any]:
    """`blocks` without their cache_control keys (copies where one was removed); each marker is
    appended to `found` with its block path and key position, so it can be put back exactly."""
    out = []
    for k, block in enumerate(blocks):
        if isinstance(block, dict):
            block = _pop_marker(block, [*path, k], found)
        out.append(block)
    return out


def _pop_marker(block: dict[str, Any], path: list[Any], found: list[dict[str, Any]]) -> dict[str, Any]:
    if "cache_control" in block:
        keys = list(block)
        found.append({"path": path, "index": keys.index("cache_control"), "cache_control": block["cache_control"]})
        block = {k: v for k, v in block.items() if k != "cache_control"}
    content = block.get("content")
    if block.get("type") == "tool_result" and isinstance(content, list):
        stripped = _pop_markers(content, [*path, "content"], found)
        if any(a is not b for a, b in zip(stripped, content, strict=True)):
            block = {**block, "content": stripped}
    return block


def _put_marker(value: Any, path: list[Any], index: int, marker: Any) -> Any:
    """A copy of `value` with `marker` put back at `path` (None when the block no longer exists)."""
    if not path:
        if not isinstance(value, dict):
            return None
        items = list(value.items())
        items.insert(min(index, len(items)), ("cache_control", marker))
        return dict(items)
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        if not isinstance(value, list) or head >= len(value):
            return None
        inner = _put_marker(value[head], rest, index, marker)
        return None if inner is None else [*value[:head], inner, *value[head + 1 :]]
    if not isinstance(value, dict) or head not in value:
        return None
    inner = _put_marker(value[head], rest, index, marker)
    return None if inner is None else {**value, head: inner}


def _restore(value: Any, markers: list[dict[str, Any]], prefix: list[Any]) -> Any:
    """`value` (blocks or a block) with the markers whose path starts with `prefix` put back."""
    n = len(prefix)
    for marker in markers:
        path = marker.get("path") or []
        if list(path[:n]) != prefix:
            continue
        updated = _put_marker(value, list(path[n:]), marker.get("index", 0), marker.get("cache_control"))
        if updated is not None:
            value = updated
    return value


def assistant_to_common(native: Json) -> Message:
    content = native.get("content")
    extra = _extra(native)
    if not isinstance(content, list):
        out: Message = {"role": "assistant", "content": content}
        if extra:
            out[PRIVATE] = {"extra": extra}
        return out
    text, calls = _assistant_fields(content)
    out = {"role": "assistant", "content": text}
    if calls:
        out["tool_calls"] = calls
    markers: list[dict[str, Any]] = []
    private: dict[str, Any] = {"content": _pop_markers(content, [], markers)}
    if extra:
        private["extra"] = extra
    out[PRIVATE] = private
    if markers:
        out[MARKERS] = markers
    return out


def user_to_common(native: Json) -> list[Message]:
    content = native.get("content")
    extra = _extra(native)
    if not isinstance(content, list):
        out: Message = {"role": "user", "content": content}
        if extra:
            out[PRIVATE] = {"extra": extra}
        return [out]
    results = [(j, b) for j, b in enumerate(content) if b.get("type") == "tool_result"]
    rest = [(j, b) for j, b in enumerate(content) if b.get("type") != "tool_result"]
    n = len(results) + (1 if rest or not results else 0)
    pieces: list[Message] = []
    for piece, (j, block) in enumerate(results):
        markers: list[dict[str, Any]] = []
        block = _pop_marker(block, [], markers)
        stub = {k: (None if k == "content" else v) for k, v in block.items()}
        private: dict[str, Any] = {"piece": piece, "of": n, "at": [j], "block": stub}
        if extra and piece == 0:
            private["extra"] = extra
        message: Message = {
            "role": "tool",
            "tool_call_id": block["tool_use_id"],
            "content": block.get("content"),
            PRIVATE: private,
        }
        if markers:
            message[MARKERS] = markers
        pieces.append(message)
    if rest or not results:
        markers = []
        message = {"role": "user", "content": _pop_markers([b for _, b in rest], [], markers)}
        if results or extra:
            private = {"piece": len(results), "of": n, "at": [j for j, _ in rest]}
            if extra and not results:
                private["extra"] = extra
            message[PRIVATE] = private
        # else: the whole native message, nothing to place: no private key, so the blocks hash as
        # the same content sent as a string would (a lone text block IS that string)
        if markers:
            message[MARKERS] = markers
        pieces.append(message)
    return pieces


def system_to_common(system: Any) -> list[Message]:
    if system is None:
        return []
    return [{"role": "system", "content": system}]


def to_common(body: Json, start: int = 0) -> list[Message]:
    """The request's messages in the common model (validating the native ones from `start`)."""
    out = system_to_common(body.get("system"))
    for i, native in enumerate(body["messages"]):
        if i >= start:
            _validate_native(i, native)
        if native["role"] == "assistant":
            out.append(assistant_to_common(native))
        else:
            out.extend(user_to_common(native))
    return out


# --------------------------------------------------------------------------- common -> native


@dataclass
class _Fragment:
    role: str  # native role: user | assistant
    content: Any  # a string (only for a lone fragment without pieces) or a list of blocks
    positions: list[int] | None = None
    piece: int | None = None
    of: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _text_blocks(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [_native_part(p) for p in content]
    return [{"type": "text", "text": str(content)}]


def _native_part(part: Any) -> Any:
    """OpenAI content parts a policy might produce, as Anthropic blocks (native ones unchanged)."""
    if isinstance(part, dict) and part.get("type") == "input_text" and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    return part


def _assistant_fragment(message: Message) -> _Fragment:
    private: Any = message.get(PRIVATE)
    if not isinstance(private, dict):
        private = {}
    extra = private.get("extra") or {}
    native = private.get("content")
    calls = message.get("tool_calls") or None
    if isinstance(native, list):
        text, derived_calls = _assistant_fields(native)
        if text == message.get("content") and derived_calls == calls:
            return _Fragment("assistant", _restore(native, _markers(message), []), extra=extra)
        blocks = [b for b in native if isinstance(b, dict) and b.get("type") in _THINKING]
    else:
        if calls is None and isinstance(message.get("content"), str):
            return _Fragment("assistant", message["content"], extra=extra)
        blocks = []
    blocks.extend(_text_blocks(message.get("content")))
    for call in calls or ():
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, json.JSONDecodeError):
            arguments = {}
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": arguments})
    return _Fragment("assistant", blocks, extra=extra)


def _markers(message: Message) -> list[dict[str, Any]]:
    markers = message.get(MARKERS)
    return [m for m in markers if isinstance(m, dict) and "cache_control" in m] if isinstance(markers, list) else []


def _fragment(message: Message) -> _Fragment:
    role = message.get("role")
    if role == "assistant":
        return _assistant_fragment(message)
    private: Any = message.get(PRIVATE)
    if not isinstance(private, dict):
        private = {}
    extra = private.get("extra") or {}
    piece, of, at = private.get("piece"), private.get("of"), private.get("at")
    content = message.get("content")
    if role == "tool":
        stub = private.get("block")
        if isinstance(stub, dict):
            block = {k: (content if k == "content" else v) for k, v in stub.items()}
            if "content" not in stub and content not in (None, ""):
                block["content"] = content
            block = _restore(block, _markers(message), [])
        else:
            block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": content}
        return _Fragment("user", [block], at, piece, of, extra)
    if piece is None:
        if role == "user":
            if isinstance(content, str):
                return _Fragment("user", content, extra=extra)
            return _Fragment("user", _restore(_text_blocks(content), _markers(message), []), extra=extra)
        # a system/developer message after the prefix (no policy makes one): plain user text
        return _Fragment("user", _text_blocks(content))
    return _Fragment("user", _restore(_text_blocks(content), _markers(message), []), at, piece, of, extra)


def _segments(run: list[_Fragment]) -> list[list[_Fragment]]:
    """Fragments grouped by the native message they came from (consecutive pieces)."""
    out: list[list[_Fragment]] = []
    for frag in run:
        last = out[-1][-1] if out else None
        if (
            frag.piece is not None
            and frag.piece > 0
            and last is not None
            and last.piece is not None
            and last.of == frag.of
            and frag.piece > last.piece
        ):
            out[-1].append(frag)
        else:
            out.append([frag])
    return out


def _segment_blocks(segment: list[_Fragment]) -> list[Any]:
    if len(segment) == 1 and isinstance(segment[0].content, str):
        return _text_blocks(segment[0].content)
    placed: list[tuple[int, int, Any]] = []
    for order, frag in enumerate(segment):
        blocks = frag.content if isinstance(frag.content, list) else _text_blocks(frag.content)
        positions = frag.positions if frag.positions is not None and len(frag.positions) == len(blocks) else None
        for k, block in enumerate(blocks):
            placed.append((positions[k] if positions is not None else order, k, block))
    if all(frag.positions is not None for frag in segment):
        placed.sort(key=lambda entry: (entry[0], entry[1]))
    return [block for _, _, block in placed]


def _native_run(run: list[_Fragment]) -> Json:
    role = run[0].role
    segments = _segments(run)
    if len(segments) == 1:
        segment = segments[0]
        extra = segment[0].extra
        if len(segment) == 1 and isinstance(segment[0].content, str):
            return {"role": role, "content": segment[0].content, **extra}
        return {"role": role, "content": _segment_blocks(segment), **extra}
    content: list[Any] = []
    for segment in segments:
        content.extend(_segment_blocks(segment))
    if role == "user":  # tool results first, as the API requires; otherwise order kept
        content = [b for b in content if _is_result(b)] + [b for b in content if not _is_result(b)]
    return {"role": role, "content": content}


def _is_result(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


def to_native(messages: list[Message]) -> list[Json]:
    """The native messages for common `messages` (leading system messages are not included)."""
    start = 0
    while start < len(messages) and messages[start].get("role") in ("system", "developer"):
        start += 1
    out: list[Json] = []
    run: list[_Fragment] = []
    for message in messages[start:]:
        frag = _fragment(message)
        if run and run[-1].role != frag.role:
            out.append(_native_run(run))
            run = []
        run.append(frag)
    if run:
        out.append(_native_run(run))
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": OMITTED_TEXT})
    return out


# --------------------------------------------------------------------------- cache_control cap


def _count_markers(value: Any) -> int:
    if isinstance(value, dict):
        own = 1 if value.get("cache_control") is not None else 0
        content = value.get("content")
        return own + (_count_markers(content) if isinstance(content, list) else 0)
    if isinstance(value, list):
        return sum(_count_markers(v) for v in value)
    return 0


def cache_markers(body: Json, messages: list[Json]) -> int:
    """cache_control markers of tools + system + messages (nested tool_result blocks too)."""
    total = _count_markers(body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, list):
        total += _count_markers(system)
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            total += _count_markers(content)
    return total


def _strip_markers(blocks: list[Any], excess: list[int]) -> list[Any]:
    """Copies of `blocks` without their first `excess[0]` markers (the input is not mutated)."""
    out = []
    for block in blocks:
        if excess[0] <= 0 or not isinstance(block, dict):
            out.append(block)
            continue
        new = block
        if block.get("cache_control") is not None:
            new = {k: v for k, v in block.items() if k != "cache_control"}
            excess[0] -= 1
        if isinstance(new.get("content"), list) and excess[0] > 0:
            new = {**new, "content": _strip_markers(new["content"], excess)}
        out.append(new)
    return out


def cap_cache_control(body: Json, messages: list[Json], limit: int = MAX_CACHE_CONTROL) -> tuple[Json, list[Json]]:
    """(body, messages) with at most `limit` markers: the oldest message markers go first, then
    the system's, then the tools'."""
    excess = [cache_markers(body, messages) - limit]
    if excess[0] <= 0:
        return body, messages
    capped = []
    for message in messages:
        content = message.get("content")
        if excess[0] > 0 and isinstance(content, list):
            message = {**message, "content": _strip_markers(content, excess)}
        capped.append(message)
    for key in ("system", "tools"):
        if excess[0] > 0 and isinstance(body.get(key), list):
            body = {**body, key: _strip_markers(body[key], excess)}
    return body, capped


# --------------------------------------------------------------------------- streams


class MessageStream:
    """Relays every event unchanged and reassembles the message like the SDK's final message."""

    def __init__(self) -> None:
        self.done = False
        self._chunks = 0
        self._started = False
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] | None = None
        self._stop_reason: str | None = None
        self.error: Any = None

    @property
    def chunks(self) -> int:
        return self._chunks

    def __call__(self, event: SseEvent) -> bytes | None:
        if event.data is not None:
            try:
                data = json.loads(event.data)
            except json.JSONDecodeError:
                data = None
            if isinstance(data, dict):
                self._chunks += 1
                self.feed(data)
        return event.raw

    def feed(self, data: Json) -> None:
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message") or {}
            self._started = True
            usage = message.get("usage")
            if isinstance(usage, dict):
                self._usage = dict(usage)
        elif kind == "content_block_start":
            index, block = data.get("index"), data.get("content_block")
            if isinstance(index, int) and isinstance(block, dict):
                self._blocks[index] = dict(block)
        elif kind == "content_block_delta":
            self._delta(data.get("index"), data.get("delta") or {})
        elif kind == "content_block_stop":
            self._finish_input(data.get("index"))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if "stop_reason" in delta:
                self._stop_reason = delta.get("stop_reason")
            usage = data.get("usage")
            if isinstance(usage, dict):
                merged = dict(self._usage or {})
                merged.update({k: v for k, v in usage.items() if v is not None})  # snapshots replace
                self._usage = merged
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.error = data.get("error")

    def _delta(self, index: Any, delta: Json) -> None:
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None:
            return
        kind = delta.get("type")
        if kind == "text_delta" and block.get("type") == "text":
            block["text"] = (block.get("text") or "") + str(delta.get("text", ""))
        elif kind == "thinking_delta" and block.get("type") == "thinking":
            block["thinking"] = (block.get("thinking") or "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta" and block.get("type") == "thinking":
            block["signature"] = delta.get("signature")
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "citations_delta" and block.get("type") == "text":
            block["citations"] = [*(block.get("citations") or []), delta.get("citation")]

    def _finish_input(self, index: Any) -> None:
        parts = self._json.pop(index, None) if isinstance(index, int) else None
        if not parts or "".join(parts) == "":
            return
        try:
            self._blocks[index]["input"] = json.loads("".join(parts))
        except (json.JSONDecodeError, KeyError):
            return

    def native(self) -> Json | None:
        if not self._started and not self._blocks:
            return None
        for index in list(self._json):
            self._finish_input(index)  # a stream cut inside a tool_use block
        return {"role": "assistant", "content": [self._blocks[i] for i in sorted(self._blocks)]}

    def message(self) -> Message | None:
        native = self.native()
        return assistant_to_common(native) if native is not None else None

    def finish_reason(self) -> str | None:
        return self._stop_reason

    def failure(self) -> str | None:
        """An `error` event (e.g. overloaded mid-stream) and no `message_stop`: the call failed."""
        if self.error is None or self.done:
            return None
        if isinstance(self.error, dict):
            return f"{self.error.get('type', 'error')}: {self.error.get('message', '')}"
        return str(self.error)

    def usage_raw(self) -> Any:
        return self._usage

    def error_event(self, exc: ProxyError) -> bytes:
        """What the relay sends when the stream breaks after it started: Anthropic's error event."""
        return b"event: error\ndata: " + error_bytes(exc) + b"\n\n"


# --------------------------------------------------------------------------- the wire


class AnthropicWire:
    name = "anthropic"
    path = "/v1/messages"
    paths: tuple[str, ...] = ("/v1/messages",)
    upstream_path = "/v1/messages"

    def parse(self, raw: bytes) -> Json:
        return parse_body(raw)

    def envelope(self, body: Json) -> tuple[str, bool]:
        return validate_envelope(body)

    def messages(self, body: Json) -> list[Message]:
        return to_common(body)

    def validate(self, messages: list[Message], start: int, stop: int | None = None) -> None:
        """The native messages were validated while converting (`messages`)."""

    def encode(
        self, body: Json, messages: list[Message] | None, stream: bool, known: dict[int, tuple[Message, str]] | None
    ) -> tuple[bytes | None, dict[int, tuple[Message, str]]]:
        if messages is None:
            return None, {}  # usage is always in Anthropic streams: the client's bytes go as they are
        native = to_native(messages)
        if cache_markers(body, native) > MAX_CACHE_CONTROL >= cache_markers(body, body["messages"]):
            body, native = cap_cache_control(body, native)  # the rewrite, not the client, went over
        return json.dumps({**body, "messages": native}).encode(), {}

    def observer(self, body: Json) -> MessageStream:
        return MessageStream()

    def is_stream(self, content_type: str) -> bool:
        return "text/event-stream" in content_type

    def response(self, parsed: Json) -> tuple[Message | None, str | None, Any]:
        content = parsed.get("content")
        message = assistant_to_common({"role": "assistant", "content": content}) if isinstance(content, list) else None
        return message, parsed.get("stop_reason"), parsed.get("usage")

    def usage(self, raw: Any) -> Usage:
        return from_anthropic(raw)

    def error_body(self, exc: ProxyError) -> bytes:
        return error_bytes(exc)

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def summary_request(self, model: str, messages: list[Message], max_tokens: int) -> tuple[str, Json]:
        system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") in ("system", "developer"))
        rest = [m for m in messages if m.get("role") not in ("system", "developer")]
        body: Json = {"model": model, "max_tokens": max_tokens, "temperature": 0}
        if system:
            body["system"] = system
        body["messages"] = [
            {"role": "user" if m.get("role") != "assistant" else "assistant", "content": str(m.get("content") or "")}
            for m in rest
        ]
        return self.upstream_path, body

    def summary_text(self, parsed: Json) -> tuple[str | None, Any]:
        content = parsed.get("content")
        texts = [b.get("text") for b in content or () if isinstance(b, dict) and b.get("type") == "text"]
        text = "".join(t for t in texts if isinstance(t, str))
        return (text or None), parsed.get("usage")


WIRE = AnthropicWire()


async def count_tokens(request: Any) -> Any:
    """`POST /v1/messages/count_tokens`: relayed to the upstream of the route serving the body's
    model, unchanged and unrecorded; errors in Anthropic's shape."""
    from ..http import RawResponse, read_body
    from ..upstream.base import upstream_request_headers

    try:
        state = request.app.state.ctx
        config = state.config
        raw = await read_body(request, config.limits)
        body = parse_body(raw)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise BadRequest("model: Field required (a non-empty string)", param="model")
        route = config.route_for(WIRE.path, model)
        if route is None:
            raise NotFound(f"No route serves model {model!r} on {WIRE.path}.", param="model")
        key = state.upstream_key(route)
        headers = upstream_request_headers(
            request.headers, WIRE.auth_headers(key) if key else None, frozenset({config.conversation_header.lower()})
        )
        upstream = await state.upstream.send(route, "POST", WIRE.upstream_path + "/count_tokens", raw, headers)
        try:
            data = await upstream.read()
        finally:
            upstream.close()
        return RawResponse(data, upstream.status, upstream.headers)
    except ProxyError as exc:
        return RawResponse(error_bytes(exc), exc.status, [("content-type", "application/json")])
