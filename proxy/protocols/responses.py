"""OpenAI Responses API wire (`POST /v1/responses`): items <-> the common (chat-shaped) messages.

Conversion of a request (`instructions` + `input`) to common messages:

* `instructions` (a string) -> a leading system message marked `_responses: {"instructions": true}`
  (the pinned prefix). On the way back the body's `instructions` are kept as they are.
* `input` as a string -> one user message.
* message items (`{"role", "content"}` with or without `"type": "message"`) of role user, system or
  developer -> one message each; content parts `input_text`/`output_text` become chat `text`
  parts, other parts (`input_image`, `input_file`, ...) stay as they are.
* a run of assistant-side items -> ONE assistant message: assistant message items (their text is
  the content), `function_call` items (-> `tool_calls`, id = `call_id`, so parallel calls form one
  turn), `reasoning` items and server-side tool items (`web_search_call`, `file_search_call`,
  `code_interpreter_call`, `image_generation_call`, `mcp_call`, `mcp_list_tools`). A response's
  `output` is converted by the same rule, so a stored response and the client's re-sent items
  give the same message.
* `function_call_output` -> a tool message (`tool_call_id` = `call_id`, content = output).
* `compaction` items (opaque, from `/responses/compact`) ride along with the next message (the
  previous one when they come last).
* anything else (`item_reference`, computer/shell/custom tool calls and their outputs, MCP
  approvals: items that pair with others in ways the policies cannot see) also rides along, but
  then the request is not rewritable (`rewrite_allowed` is False): it is forwarded as is and
  still recorded. So are requests with `previous_response_id` or `conversation`: the upstream
  owns that state.

Every common message carries `_responses: {"items": [...]}`, the CANONICAL form of the native
items it stands for, in order. Canonical (deterministic, what identity hashes): keys with null
values dropped; `status` dropped everywhere; `id` dropped on message, function_call and
function_call_output items (server-assigned, clients may omit them); message items always get
`"type": "message"` and list content (a string becomes one `input_text`/`output_text` part);
`annotations` and `logprobs` dropped from content parts; `function_call.arguments` in the
canonical JSON form of `identify.canonical_arguments` (pi re-stringifies them). Canonical items
are for matching: what goes upstream is the client's own item. Reasoning items keep their `id` and
`encrypted_content`. A client that drops reasoning items when re-sending a turn continues on a
fork of its conversation (the turn is a different one).

Encoding back: the exact native items of the current request are looked up by canonical form,
so an unchanged message goes upstream byte-for-byte as the client sent it. A message whose
visible fields a policy changed is rebuilt from its items: a trimmed tool result replaces the
`output` of its `function_call_output` item; changed tool-call arguments or text replace those
of their items. Messages without `_responses` (the summary block, synthetic tool results) become
plain `{"role", "content"}` message items or `function_call_output` items. Every body field other
than `input` is sent unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .. import identify
from ..errors import BadRequest, ProxyError, openai_error_bytes
from ..sse import SseEvent
from ..types import Json, Message
from ..usage import Usage, from_openai_responses
from .openai_chat import parse_body

PRIVATE = "_responses"
MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = frozenset({"input_text", "output_text"})
ASSISTANT_SIDE = frozenset(
    {
        "reasoning",
        "function_call",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
    }
)
ATTACHED = frozenset({"compaction"})
"""Opaque items without a pairing: carried with the next message."""
_NO_ID = frozenset({"message", "function_call", "function_call_output"})
_PART_DROP = frozenset({"annotations", "logprobs"})


# --------------------------------------------------------------------------- canonical items


def item_type(item: Json) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def _canonical_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    return {k: v for k, v in part.items() if v is not None and k not in _PART_DROP}


def canonical_item(item: Json) -> Json:
    """The deterministic form of a native item (see the module docstring)."""
    kind = item_type(item)
    out = {k: v for k, v in item.items() if v is not None and k != "status"}
    if kind in _NO_ID:
        out.pop("id", None)
    if kind == "function_call" and isinstance(out.get("arguments"), str):
        out["arguments"] = identify.canonical_arguments(out["arguments"])
    if kind == "message":
        out["type"] = "message"
        content = out.get("content")
        if isinstance(content, str):
            text_type = "output_text" if out.get("role") == "assistant" else "input_text"
            content = [{"type": text_type, "text": content}]
        if isinstance(content, list):
            out["content"] = [_canonical_part(p) for p in content]
    return out


def item_key(item: Json) -> str:
    return json.dumps(canonical_item(item), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- items -> messages


def _visible_parts(content: list[Any]) -> list[Any]:
    out = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in TEXT_PARTS and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        else:
            out.append(part)
    return out


def _visible_content(content: Any) -> Any:
    if isinstance(content, list):
        return _visible_parts(content)
    return content


def _assistant_message(items: list[Json]) -> Message:
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[Json] = []
    for item in items:
        kind = item_type(item)
        if kind == "message":
            content = item.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                for part in content:
                    if not isinstance(part, dict):
                        continue
                    if isinstance(part.get("text"), str):
                        texts.append(part["text"])
                    elif isinstance(part.get("refusal"), str):
                        refusals.append(part["refusal"])
        elif kind == "function_call":
            arguments = item.get("arguments")
            calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {
                        "name": item.get("name"),
                        "arguments": arguments if isinstance(arguments, str) else "",
                    },
                }
            )
    message: Message = {"role": "assistant", "content": "".join(texts) or None}
    if refusals:
        message["refusal"] = "".join(refusals)
    if calls:
        message["tool_calls"] = calls
    message[PRIVATE] = {"items": [canonical_item(i) for i in items]}
    return message


def _single_message(item: Json, attached: list[Json]) -> Message:
    """A user/system/developer message item or a function_call_output, with attached items first."""
    kind = item_type(item)
    if kind == "function_call_output":
        message: Message = {
            "role": "tool",
            "tool_call_id": item.get("call_id"),
            "content": _visible_content(item.get("output")),
        }
    else:
        message = {"role": item.get("role"), "content": _visible_content(item.get("content"))}
    message[PRIVATE] = {"items": [canonical_item(i) for i in (*attached, item)]}
    return message


def _is_assistant_side(item: Json) -> bool:
    kind = item_type(item)
    if kind == "message":
        return item.get("role") == "assistant"
    return kind in ASSISTANT_SIDE


def is_mappable(item: Json) -> bool:
    """Whether the policies can treat the item safely (else the request is not rewritable)."""
    kind = item_type(item)
    return kind in ("message", "function_call_output") or kind in ASSISTANT_SIDE or kind in ATTACHED


def items_to_messages(items: Iterable[Json]) -> list[Message]:
    """Native items -> common messages (see the module docstring); items must be valid objects."""
    out: list[Message] = []
    pending: list[Json] = []  # attached items waiting for the next message
    run: list[Json] = []  # the assistant turn being collected

    def flush_run() -> None:
        nonlocal pending
        if run:
            out.append(_assistant_message([*pending, *run]))
            pending = []
            run.clear()

    for item in items:
        if _is_assistant_side(item):
            run.append(item)
            continue
        kind = item_type(item)
        if kind == "message" or kind == "function_call_output":
            flush_run()
            out.append(_single_message(item, pending))
            pending = []
        else:  # compaction and unmappable items ride along with the next message
            flush_run()
            pending.append(item)
    flush_run()
    if pending:
        if out:
            out[-1][PRIVATE]["items"].extend(canonical_item(i) for i in pending)
        else:
            out.append({"role": "user", "content": None, PRIVATE: {"items": [canonical_item(i) for i in pending]}})
    return out


def _visible(message: Message) -> Message:
    return {k: v for k, v in message.items() if k != PRIVATE and v is not None}


# --------------------------------------------------------------------------- messages -> items


def _native_content(role: Any, content: Any) -> Any:
    """Chat content back to Responses content (text parts -> input_text/output_text)."""
    if not isinstance(content, list):
        return content
    text_type = "output_text" if role == "assistant" else "input_text"
    out = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            out.append({"type": text_type, "text": part["text"]})
        else:
            out.append(part)
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _rebuild_assistant(message: Message, natives: list[Json]) -> list[Json]:
    arguments = {}
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            function = call.get("function") or {}
            arguments[call.get("id")] = function.get("arguments")
    text = message.get("content")
    text = _text_of(text) if text is not None else None
    out: list[Json] = []
    text_done = False
    for native in natives:
        kind = item_type(native)
        if kind == "function_call":
            new = arguments.get(native.get("call_id"), native.get("arguments"))
            out.append(native if new == native.get("arguments") else {**native, "arguments": new})
        elif kind == "message" and native.get("role") == "assistant":
            if text_done or not text:
                continue
            text_done = True
            out.append({**native, "content": [{"type": "output_text", "text": text, "annotations": []}]})
        else:
            out.append(native)
    known = {n.get("call_id") for n in natives if item_type(n) == "function_call"}
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict) and call.get("id") not in known:
            function = call.get("function") or {}
            out.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments") or "",
                }
            )
    if text and not text_done:
        out.append({"role": "assistant", "content": text})
    return out


def _plain_items(message: Message) -> list[Json]:
    """A message without native items (the summary block, a synthetic tool result)."""
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": _native_content(role, content) if isinstance(content, list) else _text_of(content),
            }
        ]
    if role == "assistant":
        return _rebuild_assistant(message, [])
    return [{"role": role, "content": _native_content(role, content) if content is not None else ""}]


def message_to_items(message: Message, exact: ExactItems | None = None) -> list[Json]:
    """Native items for a common message; `exact` gives the client's own items back."""
    private = message.get(PRIVATE)
    if not isinstance(private, dict) or not isinstance(private.get("items"), list):
        return _plain_items(message)
    canon: list[Json] = private["items"]
    natives = [exact.get(i) if exact is not None else i for i in canon]
    if not canon or identify.canonical(_visible(message)) == identify.canonical(_visible(items_to_messages(canon)[0])):
        return natives  # nothing visible changed: the client's own items, its spelling
    role = message.get("role")
    if role == "assistant":
        return _rebuild_assistant(message, natives)
    out = []
    content = message.get("content")
    replaced = False
    for native in natives:
        kind = item_type(native)
        if not replaced and role == "tool" and kind == "function_call_output":
            output = _native_content(role, content) if isinstance(content, list) else _text_of(content)
            out.append({**native, "output": output, "call_id": message.get("tool_call_id", native.get("call_id"))})
            replaced = True
        elif not replaced and kind == "message":
            out.append({**native, "content": _native_content(role, content) if content is not None else ""})
            replaced = True
        else:
            out.append(native)
    return out


def request_messages(body: Json) -> list[Message]:
    """The request in the common model: instructions first, then the converted input."""
    messages: list[Message] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions, PRIVATE: {"instructions": True}})
    data = body.get("input")
    if isinstance(data, str):
        messages.extend(items_to_messages([{"role": "user", "content": data}]))
    elif isinstance(data, list):
        messages.extend(items_to_messages(data))
    return messages


# --------------------------------------------------------------------------- validation


def _bad(message: str, param: str, code: str = "invalid_value") -> BadRequest:
    return BadRequest(message, param=param, code=code)


def validate_input(data: Any) -> None:
    if data is None or isinstance(data, str):
        return
    if not isinstance(data, list):
        raise _bad(
            f"Invalid type for 'input': expected a string or an array of input items, got {type(data).__name__}.",
            "input",
            "invalid_type",
        )
    for i, item in enumerate(data):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"Invalid type for '{where}': expected an object.", where, "invalid_type")
        kind = item_type(item)
        if kind == "None":
            raise _bad(f"Missing required parameter: '{where}.type'.", f"{where}.type", "missing_required_parameter")
        if kind == "message":
            role = item.get("role")
            if role not in MESSAGE_ROLES:
                raise _bad(
                    f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and 'user'.",
                    f"{where}.role",
                )
            content = item.get("content")
            if not isinstance(content, str | list) or (
                isinstance(content, list) and not all(isinstance(p, dict) for p in content)
            ):
                raise _bad(
                    f"Invalid type for '{where}.content': expected a string or an array of content parts.",
                    f"{where}.content",
                    "invalid_type",
                )
        elif kind in ("function_call", "function_call_output"):
            if not isinstance(item.get("call_id"), str):
                raise _bad(
                    f"Missing required parameter: '{where}.call_id'.", f"{where}.call_id", "missing_required_parameter"
                )
            if kind == "function_call" and not isinstance(item.get("name"), str):
                raise _bad(
                    f"Missing required parameter: '{where}.name'.", f"{where}.name", "missing_required_parameter"
                )
            if kind == "function_call" and not isinstance(item.get("arguments"), str):
                raise _bad(
                    f"Invalid type for '{where}.arguments': expected a string.", f"{where}.arguments", "invalid_type"
                )
            if kind == "function_call_output" and not isinstance(item.get("output"), str | list):
                raise _bad(
                    f"Invalid type for '{where}.output': expected a string or an array.",
                    f"{where}.output",
                    "invalid_type",
                )


def validate_envelope(body: Json) -> tuple[str, bool]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("Invalid type for 'stream': expected a boolean.", param="stream", code="invalid_type")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest(
            "Invalid type for 'instructions': expected a string.", param="instructions", code="invalid_type"
        )
    validate_input(body.get("input"))
    return model, bool(stream)


# --------------------------------------------------------------------------- responses


def output_message(output: Any) -> Message | None:
    """A response's `output` items as one common assistant message (None when empty)."""
    if not isinstance(output, list):
        return None
    items = [i for i in output if isinstance(i, dict)]
    if not items:
        return None
    messages = items_to_messages(items)
    if len(messages) == 1:
        return messages[0]
    # Unusual output (e.g. an item that is not assistant-side): keep it all in one turn.
    return _assistant_message(items)


def finish_of(response: Json) -> str | None:
    status = response.get("status")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return f"incomplete:{reason}" if reason else "incomplete"
    return status if isinstance(status, str) else None


def output_text(response: Json) -> str | None:
    if isinstance(response.get("output_text"), str):
        return str(response["output_text"])
    texts = []
    for item in response.get("output") or ():
        if isinstance(item, dict) and item_type(item) == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return "".join(texts) if texts else None


class ResponsesObserver:
    """Relays every event unchanged; reassembles the output items, usage and how it ended."""

    def __init__(self) -> None:
        self.done = False
        self._chunks = 0
        self._items: dict[int, Json] = {}
        self._final: list[Json] | None = None
        self._usage: Any = None
        self._finish: str | None = None
        self._failure: str | None = None

    @property
    def chunks(self) -> int:
        return self._chunks

    def __call__(self, event: SseEvent) -> bytes | None:
        if event.data is None:
            return event.raw
        self._chunks += 1
        try:
            data = json.loads(event.data)
        except json.JSONDecodeError:
            return event.raw
        if isinstance(data, dict):
            self._feed(event.event or str(data.get("type")), data)
        return event.raw

    def _feed(self, kind: str, data: Json) -> None:
        index = data.get("output_index")
        if kind in ("response.output_item.added", "response.output_item.done") and isinstance(data.get("item"), dict):
            if isinstance(index, int):
                self._items[index] = dict(data["item"])
        elif kind in ("response.output_text.delta", "response.refusal.delta") and isinstance(index, int):
            item = self._items.setdefault(index, {"type": "message", "role": "assistant", "content": []})
            parts = item.setdefault("content", [])
            c = data["content_index"] if isinstance(data.get("content_index"), int) else 0
            key, part_type = ("text", "output_text") if kind.endswith("output_text.delta") else ("refusal", "refusal")
            while len(parts) <= c:
                parts.append({"type": part_type, key: ""})
            if isinstance(parts[c], dict) and isinstance(data.get("delta"), str):
                parts[c] = {**parts[c], key: str(parts[c].get(key) or "") + data["delta"]}
        elif kind == "response.function_call_arguments.delta" and isinstance(index, int):
            item = self._items.setdefault(index, {"type": "function_call", "arguments": ""})
            if isinstance(data.get("delta"), str):
                item["arguments"] = str(item.get("arguments") or "") + data["delta"]
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = data.get("response")
            if isinstance(response, dict):
                if isinstance(response.get("output"), list):
                    self._final = [i for i in response["output"] if isinstance(i, dict)]
                if isinstance(response.get("usage"), dict):
                    self._usage = response["usage"]
                self._finish = finish_of(response) or kind.split(".", 1)[1]
                if kind == "response.failed":
                    error = response.get("error")
                    detail = error.get("message") if isinstance(error, dict) else None
                    self._failure = f"response failed: {detail or 'no detail'}"
            self.done = True
        elif kind == "error":
            detail = data.get("message")
            if detail is None and isinstance(data.get("error"), dict):
                detail = data["error"].get("message")
            self._failure = f"error event: {detail or 'no detail'}"
            self._finish = "error"
            self.done = True

    def failure(self) -> str | None:
        """Why the stream ended without an answer (`response.failed`, an `error` event)."""
        return self._failure

    def message(self) -> Message | None:
        if self._failure is not None:
            return None
        items = self._final if self._final is not None else [self._items[k] for k in sorted(self._items)]
        return output_message(items)

    def finish_reason(self) -> str | None:
        return self._finish

    def usage_raw(self) -> Any:
        return self._usage

    def error_event(self, exc: ProxyError) -> bytes:
        """What the relay sends when the stream breaks after it started: the Responses error event."""
        data = {"type": "error", "code": exc.code, "message": exc.message, "param": exc.param}
        return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


# --------------------------------------------------------------------------- the wire


class ExactItems:
    """The client's own items of this request by canonical form, handed out in request order: the
    outgoing messages are a subsequence of the request's (plus inserted ones), so among equal
    items the first one after the last item used is the one at the same position."""

    def __init__(self, body: Json) -> None:
        self._by_key: dict[str, list[tuple[int, Json]]] = {}
        self._cursor = -1
        data = body.get("input")
        items = [{"role": "user", "content": data}] if isinstance(data, str) else data
        if isinstance(items, list):
            for position, item in enumerate(items):
                if isinstance(item, dict):
                    self._by_key.setdefault(item_key(item), []).append((position, item))

    def get(self, canon: Json) -> Json:
        candidates = self._by_key.get(item_key(canon))
        if not candidates:
            return canon
        for position, item in candidates:
            if position > self._cursor:
                self._cursor = position
                return item
        return candidates[0][1]


class ResponsesWire:
    name = "openai_responses"
    path = "/v1/responses"
    paths: tuple[str, ...] = ("/v1/responses", "/responses")
    upstream_path = "/responses"

    def parse(self, raw: bytes) -> Json:
        return parse_body(raw)

    def envelope(self, body: Json) -> tuple[str, bool]:
        return validate_envelope(body)

    def messages(self, body: Json) -> list[Message]:
        return request_messages(body)

    def rewrite_allowed(self, body: Json) -> bool:
        """False when the upstream owns the state or the input holds items the policies cannot
        treat safely: such requests are forwarded untouched (and still recorded)."""
        if body.get("previous_response_id") is not None or body.get("conversation") is not None:
            return False
        data = body.get("input")
        if isinstance(data, str):
            return True
        if not isinstance(data, list) or not data:
            return False
        return all(isinstance(i, dict) and is_mappable(i) for i in data)

    def validate(self, messages: list[Message], start: int, stop: int | None = None) -> None:
        """Items were validated (and converted) by `envelope`/`messages`."""

    def encode(
        self, body: Json, messages: list[Message] | None, stream: bool, known: dict[int, tuple[Message, str]] | None
    ) -> tuple[bytes | None, dict[int, tuple[Message, str]]]:
        if messages is None:
            return None, {}  # usage arrives with response.completed: nothing to ask for
        exact = ExactItems(body)
        items: list[Json] = []
        for message in messages:
            private = message.get(PRIVATE)
            if isinstance(private, dict) and private.get("instructions"):
                continue  # `instructions` stay in the body as the client sent them
            items.extend(message_to_items(message, exact))
        data: Any = items
        if isinstance(body.get("input"), str) and items == [{"role": "user", "content": body["input"]}]:
            data = body["input"]
        out = {key: (data if key == "input" else value) for key, value in body.items()}
        out.setdefault("input", data)
        return json.dumps(out).encode(), {}

    def observer(self, body: Json) -> ResponsesObserver:
        return ResponsesObserver()

    def is_stream(self, content_type: str) -> bool:
        return "text/event-stream" in content_type

    def response(self, parsed: Json) -> tuple[Message | None, str | None, Any]:
        message = output_message(parsed.get("output")) if parsed.get("status") != "failed" else None
        return message, finish_of(parsed), parsed.get("usage")

    def usage(self, raw: Any) -> Usage:
        return from_openai_responses(raw)

    def error_body(self, exc: ProxyError) -> bytes:
        return openai_error_bytes(exc)

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def summary_request(self, model: str, messages: list[Message], max_tokens: int) -> tuple[str, Json]:
        system = [_text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer")]
        rest = [m for m in messages if m.get("role") not in ("system", "developer")]
        data: Any
        if len(rest) == 1 and rest[0].get("role") == "user":
            data = _text_of(rest[0].get("content"))
        else:
            data = [{"role": m.get("role"), "content": _text_of(m.get("content"))} for m in rest]
        body: Json = {
            "model": model,
            "instructions": "\n\n".join(system),
            "input": data,
            "max_output_tokens": max_tokens,
        }
        return self.upstream_path, body

    def summary_text(self, parsed: Json) -> tuple[str | None, Any]:
        return output_text(parsed), parsed.get("usage")


WIRE = ResponsesWire()
