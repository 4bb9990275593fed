"""Gemini through a hop that speaks only chat completions (a litellm route).

The request: the upstream body's `systemInstruction` and `contents` as common-model messages
(chat-shaped already: `convert.py`), without the private `_gemini` keys a chat API would refuse;
`tools[].functionDeclarations` as function tools (an OpenAPI `parameters` schema with its type
names lower-cased into JSON Schema, or `parametersJsonSchema` as it is); `toolConfig`'s calling
mode as `tool_choice`; the sampling fields of `generationConfig` by their chat names. A streamed
call asks for its usage (`stream_options.include_usage`): the ledger needs it.

The answer: one `GenerateContentResponse` -- candidate 0's text and its calls as `functionCall`
parts (arguments parsed back into `args`), the finish reason in Gemini's words, the usage as
`usageMetadata` (`candidatesTokenCount` without the reasoning, which is `thoughtsTokenCount`, as
Gemini counts them). A stream is rendered as Gemini streams: a `data:` chunk per piece of text,
and one last chunk with the calls (whole, as Gemini sends each call; else an empty text part),
the finish reason and the usage once the chat stream has ended (its usage comes after its finish
reason). Errors take
Gemini's `{"error": {"code", "message", "status"}}` with the provider's status.
"""

from __future__ import annotations

from typing import Any

from ... import codec
from ...errors import BadRequest
from ...types import Json, Message
from .convert import contents_to_common, loads_args, system_to_common
from .errors import status_name
from .validate import field

FINISH = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}
"""Chat completions' finish reasons in Gemini's words (a call ends its turn with `STOP`)."""

EMPTY_TEXT: Json = {"text": ""}
"""The part of a chunk (or an answer) that has nothing else, as Gemini sends it: the SDKs keep a
chat turn only when every chunk has a content with parts."""

_SAMPLING = {
    "temperature": "temperature",
    "topP": "top_p",
    "maxOutputTokens": "max_tokens",
    "stopSequences": "stop",
    "candidateCount": "n",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
}
"""`generationConfig` fields -> their chat-completions names."""


def _dict(value: Any) -> Json:
    return value if isinstance(value, dict) else {}


def _first(choices: Any) -> Json | None:
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        first: Json = choices[0]
        return first
    return None


def _public(message: Message) -> Message:
    """A common message without its private keys; a user or tool turn always has text content."""
    out = {key: value for key, value in message.items() if not key.startswith("_")}
    if out.get("role") != "assistant" and not isinstance(out.get("content"), str):
        out["content"] = "" if out.get("content") is None else codec.dumps_str(out["content"])
    return out


def json_schema(schema: Any) -> Any:
    """An OpenAPI schema of Gemini's (`"type": "OBJECT"`) as JSON Schema (`"object"`)."""
    if isinstance(schema, dict):
        return {
            key: value.lower() if key == "type" and isinstance(value, str) else json_schema(value)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [json_schema(value) for value in schema]
    return schema


def _tools(body: Json) -> list[Json]:
    out: list[Json] = []
    for tool in body.get("tools") or []:
        declarations = field(tool, "functionDeclarations") if isinstance(tool, dict) else None
        for declaration in declarations or []:
            if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str):
                continue
            parameters = field(declaration, "parametersJsonSchema")
            if parameters is None:
                parameters = json_schema(declaration.get("parameters"))
            function: Json = {"name": declaration["name"], "parameters": parameters or {"type": "object"}}
            if isinstance(declaration.get("description"), str):
                function["description"] = declaration["description"]
            out.append({"type": "function", "function": function})
    return out


def _tool_choice(body: Json) -> Any:
    config = field(body, "toolConfig")
    calling = field(config, "functionCallingConfig") if isinstance(config, dict) else None
    if not isinstance(calling, dict):
        return None
    mode = calling.get("mode")
    if mode == "NONE":
        return "none"
    if mode == "ANY":
        allowed = field(calling, "allowedFunctionNames") or []
        if len(allowed) == 1:
            return {"type": "function", "function": {"name": allowed[0]}}
        return "required"
    return "auto" if mode in ("AUTO", "VALIDATED") else None


_CARRIED = frozenset(
    {
        "text",
        "thought",
        "thoughtSignature",
        "thought_signature",
        "functionCall",
        "function_call",
        "functionResponse",
        "function_response",
    }
)
"""The part fields a chat-completions request carries (a thought's signature stays behind)."""


def _refuse_uncarried(body: Json) -> None:
    """A part chat completions cannot carry (`inlineData`, `fileData`, `executableCode`, ...) is
    refused, not silently dropped."""
    for content in body["contents"]:
        for part in content.get("parts") or []:
            extra = sorted(key for key in part if key not in _CARRIED) if isinstance(part, dict) else []
            if extra:
                raise BadRequest(
                    f"This model is served through chat completions (a litellm route), which carry text, "
                    f"function calls and function responses only: `{extra[0]}` parts are not supported.",
                    param="contents",
                )


def chat_request(body: Json, stream: bool) -> Json:
    """A Gemini upstream body (validated on arrival) as a chat-completions request; BadRequest
    for a part chat completions cannot carry."""
    _refuse_uncarried(body)
    common = system_to_common(field(body, "systemInstruction")) + contents_to_common(body["contents"])
    request: Json = {"messages": [_public(message) for message in common]}
    tools = _tools(body)
    if tools:
        request["tools"] = tools
        choice = _tool_choice(body)
        if choice is not None:
            request["tool_choice"] = choice
    config = field(body, "generationConfig")
    if isinstance(config, dict):
        for name, chat_name in _SAMPLING.items():
            value = field(config, name)
            if value is not None:
                request[chat_name] = value
        if field(config, "responseMimeType") == "application/json":
            request["response_format"] = {"type": "json_object"}
    if stream:
        request["stream"] = True
        request["stream_options"] = {"include_usage": True}
    return request


def usage_metadata(usage: Any) -> Json | None:
    """Chat completions' usage as Gemini's `usageMetadata`: the same tokens, Gemini's fields."""
    if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
        return None
    prompt = usage["prompt_tokens"]
    completion = usage.get("completion_tokens") or 0
    details = usage.get("prompt_tokens_details")
    cached = (details.get("cached_tokens") if isinstance(details, dict) else None) or 0
    output_details = usage.get("completion_tokens_details")
    reasoning = (output_details.get("reasoning_tokens") if isinstance(output_details, dict) else None) or 0
    out: Json = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion - reasoning,
        "totalTokenCount": usage.get("total_tokens") or prompt + completion,
    }
    if cached:
        out["cachedContentTokenCount"] = cached
    if reasoning:
        out["thoughtsTokenCount"] = reasoning
    return out


def _call_part(name: Any, arguments: Any) -> Json:
    return {"functionCall": {"name": str(name or ""), "args": loads_args(arguments)}}


def _response(candidate: Json, usage: Json | None, model: Any, ident: Any) -> Json:
    out: Json = {"candidates": [candidate]}
    if usage is not None:
        out["usageMetadata"] = usage
    if isinstance(model, str):
        out["modelVersion"] = model
    if isinstance(ident, str):
        out["responseId"] = ident
    return out


def chat_answer(answer: Json) -> Json:
    """A whole `chat.completion` as a `GenerateContentResponse`."""
    choice = _first(answer.get("choices")) or {}
    message = _dict(choice.get("message"))
    parts: list[Json] = []
    if isinstance(message.get("content"), str) and message["content"]:
        parts.append({"text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(_call_part(function.get("name"), function.get("arguments")))
    candidate: Json = {
        "content": {"role": "model", "parts": parts or [EMPTY_TEXT]},
        "finishReason": FINISH.get(str(choice.get("finish_reason")), "OTHER")
        if choice.get("finish_reason")
        else "STOP",
        "index": 0,
    }
    return _response(candidate, usage_metadata(answer.get("usage")), answer.get("model"), answer.get("id"))


class ChatToGemini:
    """Renders one chat-completions stream as Gemini's (`Wire.chat_stream`)."""

    def __init__(self) -> None:
        self._calls: dict[int, list[str]] = {}
        """index -> [name, arguments so far]"""
        self._finish: str | None = None
        self._usage: Json | None = None
        self._model: Any = None
        self._id: Any = None

    def chunk(self, data: Json) -> bytes:
        self._model = data.get("model", self._model)
        self._id = data.get("id", self._id)
        if data.get("usage") is not None:
            self._usage = usage_metadata(data["usage"])
        choice = _first(data.get("choices"))
        if choice is None:
            return b""
        if choice.get("finish_reason"):
            self._finish = FINISH.get(str(choice["finish_reason"]), "OTHER")
        delta = _dict(choice.get("delta"))
        for call in delta.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            index = call["index"] if isinstance(call.get("index"), int) else len(self._calls)
            held = self._calls.setdefault(index, ["", ""])
            function = _dict(call.get("function"))
            held[0] += str(function.get("name") or "")
            held[1] += str(function.get("arguments") or "")
        text = delta.get("content")
        if not isinstance(text, str) or not text:
            return b""
        candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
        return self._event(_response(candidate, None, self._model, self._id))

    def end(self) -> bytes:
        """The last chunk: the calls whole, the finish reason and the usage."""
        if self._finish is None and not self._calls and self._usage is None:
            return b""
        parts = [_call_part(name, arguments) for _, (name, arguments) in sorted(self._calls.items())]
        content = {"role": "model", "parts": parts or [EMPTY_TEXT]}
        candidate: Json = {"content": content, "finishReason": self._finish or "STOP", "index": 0}
        return self._event(_response(candidate, self._usage, self._model, self._id))

    @staticmethod
    def _event(data: Json) -> bytes:
        return b"data: " + codec.dumps(data) + b"\n\n"


def chat_error(status: int, error: Json) -> bytes:
    """An OpenAI-shaped error (litellm's rendering of the provider's) in Gemini's shape."""
    inner = error.get("error")
    message = inner.get("message") if isinstance(inner, dict) else None
    return codec.dumps({"error": {"code": status, "message": str(message or error), "status": status_name(status)}})
