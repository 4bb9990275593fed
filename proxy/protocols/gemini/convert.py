"""Gemini `contents` -> the common model, losslessly for what the proxy does not rewrite (and
back: `encode.py`).

Native -> common (what is hashed, stored and projected):

* `systemInstruction` -> one leading `{"role": "system"}` message with its text (the upstream
  body keeps `systemInstruction` as the client sent it: the prefix is pinned).
* a `model` content -> an assistant message: `content` is its text parts joined (thoughts
  aside; None without text), each `functionCall` part a `tool_calls` entry. The model's calls
  carry no id; a client may number them when it re-sends them (Gemini CLI does), so the id is
  derived from the call itself (`call_id`: name, arguments and place in the turn) and a client's
  id is left out, the same for the stored answer and the turn the client re-sends. Thought parts
  without a signature are left out too: clients drop them from their history (the API needs
  only the signatures back). Adjacent text pieces are merged first (a stream's chunks, a client's consolidated
  history: the same message); when the parts are more than that text and those calls (thoughts,
  `thoughtSignature`, ids), they travel in `_gemini.parts`, so the turn goes back upstream with
  the same parts: thought signatures must come back unmodified (kept in standard base64: the
  field is bytes, and the Python SDK re-sends it URL-safe).
* a `user` content is split into pieces: one `{"role": "tool"}` message per `functionResponse`
  part (its `tool_call_id` the id of the call it answers, paired by name in order with the
  previous model content's calls, as the API pairs them; its content the response's only text
  field, e.g. Gemini CLI's `{"output": "..."}`, else the response's JSON; `_gemini.part` the part
  with `response` nulled and `_gemini.key` that field), then one user message with the other
  parts (text joined; the parts in `_gemini.parts` unless they are one plain text part).
  Pieces of one content carry `_gemini.piece`/`of`.

Example: `[{"role": "user", "parts": [{"text": "ls"}]}, {"role": "model", "parts":
[{"functionCall": {"name": "ls", "args": {}}, "thoughtSignature": "S"}]}, {"role": "user",
"parts": [{"functionResponse": {"name": "ls", "response": {"output": "a b"}}}]}]` is `user "ls"`,
`assistant` with one call `gc_...` (parts kept for the signature), `tool gc_...: "a b"`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from ... import codec
from ...types import Json, Message
from .validate import field, validate_content

PRIVATE = "_gemini"
OMITTED_TEXT = "[Earlier turns of this conversation were omitted by the proxy to fit the context window.]"
_PLAIN = frozenset({"text", "thought"})


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def call_id(name: str, args: Any, k: int) -> str:
    """A call's id when the API gave none: derived from the call, never random (stable hashes)."""
    return "gc_" + hashlib.blake2b(compact([name, args, k]).encode(), digest_size=8).hexdigest()


def _signature(value: Any) -> Any:
    """A thought signature in standard base64: the field is bytes, and clients re-send it in
    either alphabet (the Python SDK answers URL-safe), so the stored answer and the re-sent turn
    are the same message; the bytes, all the API checks, are unchanged."""
    if not isinstance(value, str):
        return value
    try:
        raw = base64.b64decode(value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4), validate=True)
    except ValueError:
        return value
    return base64.b64encode(raw).decode()


def _canonical_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    for name in ("thoughtSignature", "thought_signature"):
        if name in part:
            part = {**part, name: _signature(part[name])}
    return part


def merged(parts: list[Any]) -> list[Any]:
    """Adjacent text pieces of one kind (thought or not) as one part; a signature ends a run."""
    out: list[Any] = []
    for part in map(_canonical_part, parts):
        last = out[-1] if out else None
        if (
            isinstance(part, dict)
            and isinstance(last, dict)
            and isinstance(part.get("text"), str)
            and isinstance(last.get("text"), str)
            and set(last) <= _PLAIN
            and set(part) - {"thoughtSignature", "thought_signature"} <= _PLAIN
            and bool(last.get("thought")) == bool(part.get("thought"))
        ):
            out[-1] = {**last, **part, "text": last["text"] + part["text"]}
        else:
            out.append(part)
    return out


def calls_of(parts: list[Any]) -> list[dict[str, Any]]:
    out = []
    calls = [field(p, "functionCall") for p in parts if isinstance(p, dict) and field(p, "functionCall") is not None]
    for k, call in enumerate(calls):
        name, args = str(call.get("name")), call.get("args") or {}
        ident = call_id(name, args, k)
        out.append({"id": ident, "type": "function", "function": {"name": name, "arguments": compact(args)}})
    return out


def text_of(parts: list[Any]) -> str | None:
    texts = [
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
    ]
    return "".join(texts) or None


def plain_parts(text: str | None, calls: list[dict[str, Any]]) -> list[Any]:
    parts: list[Any] = [{"text": text}] if text else []
    for call in calls:
        function = call["function"]
        parts.append({"functionCall": {"name": function["name"], "args": loads_args(function.get("arguments"))}})
    return parts


def loads_args(arguments: Any) -> Any:
    try:
        value = codec.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except codec.JsonRejected:
        value = {}
    return value if isinstance(value, dict) else {}


def _model_part(part: Any) -> Any:
    """A model part as the common model keeps it: a call without the id a client adds to it."""
    call = field(part, "functionCall") if isinstance(part, dict) else None
    if not isinstance(call, dict) or "id" not in call:
        return part
    name = "functionCall" if "functionCall" in part else "function_call"
    return {**part, name: {k: v for k, v in call.items() if k != "id"}}


def _unsigned_thought(part: Any) -> bool:
    return isinstance(part, dict) and bool(part.get("thought")) and field(part, "thoughtSignature") is None


def model_to_common(content: Json) -> Message:
    given = list(content.get("parts") or [])
    kept = [p for p in given if not _unsigned_thought(p)] or given  # a turn of thoughts alone keeps them
    parts = merged([_model_part(p) for p in kept])
    text, calls = text_of(parts), calls_of(parts)
    out: Message = {"role": "assistant", "content": text}
    if calls:
        out["tool_calls"] = calls
    if parts != plain_parts(text, calls):
        out[PRIVATE] = {"parts": parts}
    return out


def _answered(calls: list[dict[str, Any]], name: str, used: set[str]) -> str:
    """The id of the call a function response answers: the first call of that name not yet
    answered, as the API pairs them (a client's own ids are not the model's: `_model_part`)."""
    for call in calls:
        if call["function"]["name"] == name and call["id"] not in used:
            return str(call["id"])
    return call_id(name, {}, len(used))


def _response_text(response: Any) -> tuple[str, str | None]:
    """The tool result's text and the one field it came from (None: the response's JSON)."""
    if isinstance(response, dict) and len(response) == 1:
        ((key, value),) = response.items()
        if isinstance(value, str):
            return value, key
    return compact(response if response is not None else {}), None


def user_to_common(content: Json, calls: list[dict[str, Any]]) -> list[Message]:
    parts = list(content.get("parts") or [])
    responses = [p for p in parts if field(p, "functionResponse") is not None]
    rest = [p for p in parts if field(p, "functionResponse") is None]
    n = len(responses) + (1 if rest or not responses else 0)
    out: list[Message] = []
    used: set[str] = set()
    for k, part in enumerate(responses):
        response = field(part, "functionResponse")
        ident = _answered(calls, str(response.get("name")), used)
        used.add(ident)
        text, key = _response_text(response.get("response"))
        key_name = "functionResponse" if "functionResponse" in part else "function_response"
        stub = {**part, key_name: {**response, "response": None}}
        private: dict[str, Any] = {"part": stub, "key": key}
        if n > 1:
            private.update(piece=k, of=n)
        out.append({"role": "tool", "tool_call_id": ident, "content": text, PRIVATE: private})
    if rest or not responses:
        texts = [p["text"] for p in rest if isinstance(p.get("text"), str)]
        message: Message = {"role": "user", "content": "".join(texts)}
        own: dict[str, Any] = {}
        if rest != [{"text": message["content"]}]:
            own["parts"] = rest
        if n > 1:
            own.update(piece=len(responses), of=n)
        if own:
            message[PRIVATE] = own
        out.append(message)
    return out


def system_to_common(system: Any) -> list[Message]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    parts = system.get("parts") or []
    return [{"role": "system", "content": "".join(p["text"] for p in parts if isinstance(p.get("text"), str))}]


def contents_to_common(contents: list[Any]) -> list[Message]:
    """The native contents validated and in the common model."""
    out: list[Message] = []
    calls: list[dict[str, Any]] = []
    for i, content in enumerate(contents):
        validate_content(i, content)
        if content.get("role") == "model":
            message = model_to_common(content)
            calls = list(message.get("tool_calls") or [])
            out.append(message)
        else:
            out.extend(user_to_common(content, calls))
            calls = []
    return out
