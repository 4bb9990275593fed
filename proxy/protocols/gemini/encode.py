"""The common model -> Gemini `contents` (the upstream body after a projection rewrote something).

* An unchanged assistant message goes back as its parts (`convert.py` keeps them). A changed one
  is rebuilt from its text and calls, each call keeping its original part (signature included)
  when it is still there, and getting back the id the client gave its response. When the call
  that carried the turn's signature is gone (a recall detour keeps only the proxy's own calls),
  the first call left carries `skip_thought_signature_validator`, the value Gemini documents for
  a call without a signature of its own: Gemini 3 refuses a turn's first call without one.
* Tool results go back as `functionResponse` parts (a trimmed one with the new text in its
  field), all results of one call turn in one user content, as the API requires; a piece of a
  user content joins the results it came with.
* A projection that starts with the model's turn gets a short user text first.
"""

from __future__ import annotations

from typing import Any

from ...types import Json, Message
from .convert import OMITTED_TEXT, PRIVATE, calls_of, compact, loads_args, plain_parts, text_of
from .validate import field

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The value Gemini documents for a call that must carry a signature and has none of its own."""


def _private(message: Message) -> dict[str, Any]:
    private = message.get(PRIVATE)
    return private if isinstance(private, dict) else {}


def _plain_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _model_parts(message: Message, ids: dict[str, str]) -> list[Any]:
    """The parts of an assistant message: its own when unchanged, else rebuilt keeping each
    call's original part; each call with the id the client gave its response (`ids`)."""
    parts = own = _private(message).get("parts")
    calls = list(message.get("tool_calls") or [])
    text = _plain_text(message.get("content")) or None
    if not (isinstance(parts, list) and text_of(parts) == text and _same_calls(calls_of(parts), calls)):
        originals = {
            (field(p, "functionCall").get("name"), compact(field(p, "functionCall").get("args") or {})): p
            for p in parts or []
            if isinstance(p, dict) and field(p, "functionCall") is not None
        }
        parts = [
            originals.get((p["functionCall"]["name"], compact(p["functionCall"]["args"])), p)
            if "functionCall" in p
            else p
            for p in plain_parts(text, calls)
        ]
    out, k = [], 0
    signed = any(isinstance(p, dict) and field(p, "thoughtSignature") is not None for p in own or [])
    if signed and not any(isinstance(p, dict) and field(p, "thoughtSignature") is not None for p in parts):
        first = next((j for j, p in enumerate(parts) if isinstance(p, dict) and field(p, "functionCall")), None)
        if first is not None:
            parts = [*parts[:first], {**parts[first], "thoughtSignature": SKIP_SIGNATURE}, *parts[first + 1 :]]
    for part in parts:
        call = field(part, "functionCall") if isinstance(part, dict) else None
        if isinstance(call, dict):
            given = ids.get(str(calls[k].get("id"))) if k < len(calls) else None
            k += 1
            if given is not None:
                name = "functionCall" if "functionCall" in part else "function_call"
                part = {**part, name: {"id": given, **call}}
        out.append(part)
    return out


def _same_calls(mine: list[dict[str, Any]], calls: list[dict[str, Any]]) -> bool:
    def key(c: dict[str, Any]) -> tuple[Any, ...]:
        function = c.get("function") or {}
        return c.get("id"), function.get("name"), loads_args(function.get("arguments"))

    return [key(c) for c in mine] == [key(c) for c in calls]


def _client_ids(messages: list[Message]) -> dict[str, str]:
    """Common call id -> the id the client gave that call's function response (Gemini CLI
    numbers its calls and sends the number back on the call and on its response)."""
    out: dict[str, str] = {}
    for message in messages:
        stub = _private(message).get("part") if message.get("role") == "tool" else None
        response = field(stub, "functionResponse") if isinstance(stub, dict) else None
        if isinstance(response, dict) and isinstance(response.get("id"), str):
            out[str(message.get("tool_call_id"))] = response["id"]
    return out


def _response_part(message: Message, names: dict[str, str]) -> Json:
    private = _private(message)
    text = _plain_text(message.get("content"))
    key = private.get("key")
    if isinstance(key, str):
        response: Any = {key: text}
    else:
        response = loads_args(text) if text.startswith("{") else {}
        response = response if response else {"output": text}
    stub = private.get("part")
    if isinstance(stub, dict):
        native = field(stub, "functionResponse") or {}
        name = "functionResponse" if "functionResponse" in stub else "function_response"
        return {**stub, name: {**native, "response": response}}
    ident = str(message.get("tool_call_id"))
    return {"functionResponse": {"name": names.get(ident, ident), "response": response}}


def to_native(messages: list[Message], prefix: int) -> list[Json]:
    """The native contents for common `messages` without the first `prefix` (`systemInstruction`)."""
    out: list[Json] = []
    names: dict[str, str] = {}
    ids = _client_ids(messages)
    open_results: Json | None = None  # the user content the next tool result (or piece) joins
    for message in messages[prefix:]:
        role = message.get("role")
        private = _private(message)
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                names[str(call.get("id"))] = str(call.get("function", {}).get("name"))
            out.append({"role": "model", "parts": _model_parts(message, ids)})
            open_results = None
        elif role == "tool":
            part = _response_part(message, names)
            if open_results is None:
                open_results = {"role": "user", "parts": []}
                out.append(open_results)
            open_results["parts"].append(part)
        else:
            own = private.get("parts")
            text = _plain_text(message.get("content"))
            parts = own if isinstance(own, list) and text_of(own) == (text or None) else [{"text": text or " "}]
            if open_results is not None and isinstance(private.get("piece"), int) and private["piece"] > 0:
                open_results["parts"].extend(parts)
            else:
                out.append({"role": "user", "parts": list(parts)})
            open_results = None
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "parts": [{"text": OMITTED_TEXT}]})
    return out
