"""OpenAI Responses items <-> the common (chat-shaped) messages.

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
  previous one when they come last), which is marked `PROVIDER_STATE`: the client's own
  checkpoint, pinned and never released, so no policy trims, summarizes or prunes it.
* anything else (`item_reference`, computer/shell/custom tool calls and their outputs, MCP
  approvals: items that pair with others in ways the policies cannot see) also rides along, but
  then the request is not rewritable (`rewrite_allowed` is False): it is forwarded as is and
  still recorded. So are requests with `previous_response_id` or `conversation`: the upstream
  owns that state.

Every common message carries `_responses: {"items": [...]}`, the canonical form (`items.py`) of
the native items it stands for, in order.

Encoding back: the exact native items of the current request are looked up by canonical form,
so an unchanged message goes upstream byte-for-byte as the client sent it. A message whose
visible fields a policy changed is rebuilt from its items: a trimmed tool result replaces the
`output` of its `function_call_output` item; changed tool-call arguments or text replace those
of their items. Messages without `_responses` (the summary block, synthetic tool results) become
plain `{"role", "content"}` message items or `function_call_output` items. Every body field other
than `input` is sent unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from policies.pins import PROVIDER_STATE

from ... import identify
from ...types import Json, Message
from .items import PRIVATE, TEXT_PARTS, canonical_item, is_assistant_side, item_key, item_type


def _visible_parts(content: list[Any]) -> list[Any]:
    out = []
    for part in content:
        if isinstance(part, dict) and str(part.get("type")) in TEXT_PARTS and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        else:
            out.append(part)
    return out


def _visible_content(content: Any) -> Any:
    if isinstance(content, list):
        return _visible_parts(content)
    return content


def assistant_message(items: list[Json]) -> Message:
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


def items_to_messages(items: Iterable[Json]) -> list[Message]:
    """Native items -> common messages (see the module docstring); items must be valid objects."""
    out: list[Message] = []
    pending: list[Json] = []  # attached items waiting for the next message
    run: list[Json] = []  # the assistant turn being collected

    def flush_run() -> None:
        nonlocal pending
        if run:
            out.append(assistant_message([*pending, *run]))
            pending = []
            run.clear()

    for item in items:
        if is_assistant_side(item):
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
    for message in out:
        if any(i.get("type") == "compaction" for i in message[PRIVATE]["items"]):
            message[PROVIDER_STATE] = True  # the client's own checkpoint: the policies never touch it
    return out


def _visible(message: Message) -> Message:
    return {k: v for k, v in message.items() if k != PRIVATE and v is not None}


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


def text_of(content: Any) -> str:
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
    text = text_of(text) if text is not None else None
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
                "output": _native_content(role, content) if isinstance(content, list) else text_of(content),
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
            output = _native_content(role, content) if isinstance(content, list) else text_of(content)
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
