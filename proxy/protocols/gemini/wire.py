"""The Gemini `Wire` (`POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse`, also under `/v1`).

Gemini puts the model and the method in the path: `target` reads them (`Target.model`,
`.stream`), and a call goes upstream to `/v1beta/models/{model}:{method}` (`?alt=sse` when
streaming; v1beta serves everything v1 does). The client's key travels in `x-goog-api-key` or in
the `key` query parameter (`credential_headers`, `credential_query`): it is read, authenticated,
replaced by a route's own key and redacted like every other credential, and the query string
itself never goes upstream.

Usage (`usageMetadata`): `promptTokenCount` is the whole input, `cachedContentTokenCount` a part
of it, `toolUsePromptTokenCount` the input of server-side tools (added to the input);
`candidatesTokenCount` is the answer and `thoughtsTokenCount` the thinking, both output. The API
leaves zero fields out, so a reported prompt with no cache field read 0 tokens from the cache.

`:countTokens` counts what the proxy would send for the body (`count.py`, `proxy.count`).

On a litellm route the calls go as chat completions and their answers come back in Gemini's
shape (`chat.py`, the `chat_*` hooks).

The proxy's own tools (recall, memory) are a `Tool` of one `functionDeclarations` entry each,
their schema as JSON Schema (`parametersJsonSchema`, as Gemini CLI declares its tools).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ... import codec
from ...errors import BadRequest, NotFound, ProxyError
from ...tail_parse import BodyMemo
from ...types import Json, Message, SentBody
from ...usage import Usage
from ..base import BaseWire, Target
from ..chat_hop import ChatStream
from .chat import ChatToGemini, chat_answer, chat_error, chat_request
from .convert import contents_to_common, model_to_common, system_to_common
from .count import COUNT_PATH, COUNT_PATHS, UPSTREAM_COUNT_PATH, count_body, count_request, total_tokens
from .encode import to_native
from .errors import error_bytes
from .stream import ContentStream, candidate
from .validate import field, parse_body, validate_body

PATH = re.compile(
    r"^/(?P<version>v1beta|v1)/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$"
)
"""A model call's path; `countTokens` (`COUNT_PATH`) and the other methods are not model calls."""
KEY_HEADER = "x-goog-api-key"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_of(raw: Any) -> Usage:
    if not isinstance(raw, dict) or _int(raw.get("promptTokenCount")) is None:
        return Usage()
    prompt = (_int(raw.get("promptTokenCount")) or 0) + (_int(raw.get("toolUsePromptTokenCount")) or 0)
    cached = _int(raw.get("cachedContentTokenCount")) or 0
    answer = _int(raw.get("candidatesTokenCount")) or 0
    thoughts = _int(raw.get("thoughtsTokenCount")) or 0
    return Usage(
        input_total=prompt,
        input_uncached=prompt - cached,
        cache_read=cached,
        cache_write=None,
        output=answer + thoughts,
        reasoning=thoughts,
    )


class GeminiWire(BaseWire):
    name = "gemini"
    path = "/v1beta/models"
    """What `routes[].match.path` names for every Gemini model call."""
    paths: tuple[str, ...] = ()
    """None fixed: the model is in the path (`target`)."""
    upstream_path = "/v1beta/models"
    count_paths: tuple[str, ...] = COUNT_PATHS
    upstream_count_path: str | None = UPSTREAM_COUNT_PATH
    """`{model}` is the model's (`upstream_count_path_for`)."""
    provider = "gcp.gemini"
    client_hint = "Google GenAI SDKs and Gemini CLI (GOOGLE_GEMINI_BASE_URL) {url}"
    credential_headers: tuple[str, ...] = (KEY_HEADER, "authorization", "x-api-key", "api-key")
    credential_query: tuple[str, ...] = ("key",)
    call_markers: tuple[bytes, ...] = (b'"functionCall"',)
    text_markers: tuple[bytes, ...] = (b'"text"',)

    def target(self, path: str, query: Mapping[str, str]) -> Target | None:
        """A model call's path: its model, and whether it streams (`streamGenerateContent`,
        served as Server-Sent Events only: `alt=sse`)."""
        match = PATH.match(path)
        if match is None:
            return None
        stream = match["method"] == "streamGenerateContent"
        return GeminiTarget(path, match["model"], stream, sse=query.get("alt") == "sse")

    def owns(self, path: str) -> bool:
        return path == self.path or (path.startswith(("/v1beta/models/", "/v1/models/")) and ":" in path)

    def upstream_path_for(self, model: str, stream: bool) -> str:
        return f"/v1beta/models/{model}:" + ("streamGenerateContent?alt=sse" if stream else "generateContent")

    def count_target(self, path: str, query: Mapping[str, str]) -> Target:
        match = COUNT_PATH.match(path)
        if match is None:
            raise NotFound(f"Unknown path {path}: a count is POST /v1beta/models/{{model}}:countTokens.")
        return GeminiTarget(path, match["model"], False)

    def upstream_count_path_for(self, model: str) -> str:
        return UPSTREAM_COUNT_PATH.format(model=model)

    def count_body(self, body: Json) -> Json:
        return count_body(body)

    def count_request(self, encoded: bytes, model: str) -> bytes:
        return count_request(encoded, model)

    def counted_tokens(self, answer: Any) -> Any:
        return total_tokens(answer)

    def count_answer(self, tokens: int) -> Json:
        """`{"totalTokens": N}`: the count of a projection has no per-modality details."""
        return {"totalTokens": tokens}

    def parse(self, raw: bytes, memo: BodyMemo | None = None) -> Json:
        return parse_body(raw)

    def envelope(self, body: Json, target: Target | None = None) -> tuple[str, bool]:
        if not isinstance(target, GeminiTarget) or not target.model:
            raise BadRequest("A Gemini model call names its model in the path: /v1beta/models/{model}:generateContent.")
        if target.stream and not target.sse:
            raise BadRequest(
                "streamGenerateContent is served as Server-Sent Events only: add ?alt=sse to the request.",
                param="alt",
            )
        validate_body(body)
        return target.model, bool(target.stream)

    def messages(self, body: Json, memo: BodyMemo | None = None) -> list[Message]:
        return system_to_common(field(body, "systemInstruction")) + contents_to_common(body["contents"])

    def encode(
        self, body: Json, messages: list[Message] | None, stream: bool, known: SentBody | None
    ) -> tuple[bytes | None, SentBody | None]:
        if messages is None:
            return None, None  # usage is in every chunk: the client's bytes go as they are
        prefix = 0 if field(body, "systemInstruction") is None else 1
        return codec.dumps({**body, "contents": to_native(messages, prefix)}), None

    def observer(self, body: Json) -> ContentStream:
        return ContentStream()

    def response(self, parsed: Json) -> tuple[Message | None, str | None, Any]:
        first = candidate(parsed)
        content = first.get("content") if first is not None else None
        message = model_to_common(content) if isinstance(content, dict) else None
        finish = first.get("finishReason") if first is not None else None
        return message, finish, parsed.get("usageMetadata")

    def usage(self, raw: Any) -> Usage:
        return usage_of(raw)

    def error_body(self, exc: ProxyError) -> bytes:
        return error_bytes(exc)

    def auth_headers(self, key: str) -> dict[str, str]:
        return {KEY_HEADER: key}

    def probe(self, key: str | None) -> tuple[str, dict[str, str]]:
        """The model list (GET /v1beta/models)."""
        return "/v1beta/models", (self.auth_headers(key) if key else {})

    def tool_name(self, tool: Any) -> str | None:
        """A `Tool` of one function declaration is that function (the proxy's own are)."""
        declarations = tool.get("functionDeclarations") if isinstance(tool, Mapping) else None
        if isinstance(declarations, list) and len(declarations) == 1 and isinstance(declarations[0], Mapping):
            name = declarations[0].get("name")
            return name if isinstance(name, str) else None
        return None

    def answers_in_text(self, body: Json) -> bool:
        """`toolConfig.functionCallingConfig`: any mode but `ANY` (which forces a function call)."""
        config = body.get("toolConfig")
        calling = config.get("functionCallingConfig") if isinstance(config, Mapping) else None
        return not isinstance(calling, Mapping) or calling.get("mode") != "ANY"

    def room_for_tools(self, body: Json) -> bool:
        """`toolConfig.functionCallingConfig`: no mode, `AUTO` or `VALIDATED`, or `ANY` with no
        list of allowed functions, leaves the model free to call the proxy's tools."""
        config = body.get("toolConfig")
        calling = config.get("functionCallingConfig") if isinstance(config, Mapping) else None
        if not isinstance(calling, Mapping):
            return True
        mode = calling.get("mode")
        return mode in (None, "AUTO", "VALIDATED", "MODE_UNSPECIFIED") or (
            mode == "ANY" and not calling.get("allowedFunctionNames")
        )

    def tool_definition(self, name: str, description: str, parameters: Json) -> Json:
        return {
            "functionDeclarations": [{"name": name, "description": description, "parametersJsonSchema": parameters}]
        }

    def without_tools(self, body: Json, names: frozenset[str]) -> Json:
        """Without the proxy's tools, and without `toolConfig` once no tool is left."""
        tools = [tool for tool in body.get("tools") or [] if self.tool_name(tool) not in names]
        out = {key: value for key, value in body.items() if key not in ("tools", "toolConfig")}
        if tools:
            out["tools"] = tools
            if "toolConfig" in body:
                out["toolConfig"] = body["toolConfig"]
        return out

    def detour_turn(self, message: Message, names: frozenset[str]) -> Message:
        """The text and the calls of `names`, with the message's private parts (its thought
        signatures, which the API wants back unmodified)."""
        turn = super().detour_turn(message, names)
        return {**turn, **{key: value for key, value in message.items() if key.startswith("_")}}

    def chat_request(self, body: Json, stream: bool) -> Json | None:
        """Served on a litellm route as chat completions (`chat.py`)."""
        return chat_request(body, stream)

    def chat_answer(self, answer: Json) -> Json:
        return chat_answer(answer)

    def chat_stream(self) -> ChatStream:
        return ChatToGemini()

    def chat_error(self, status: int, error: Json) -> bytes:
        return chat_error(status, error)

    def summary_request(self, model: str, messages: list[Message], max_tokens: int) -> tuple[str, Json]:
        system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") in ("system", "developer"))
        contents = [
            {
                "role": "model" if m.get("role") == "assistant" else "user",
                "parts": [{"text": str(m.get("content") or " ")}],
            }
            for m in messages
            if m.get("role") not in ("system", "developer")
        ]
        body: Json = {"contents": contents, "generationConfig": {"maxOutputTokens": max_tokens, "temperature": 0}}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        return self.upstream_path_for(model, False), body

    def summary_text(self, parsed: Json) -> tuple[str | None, Any]:
        message, _, usage = self.response(parsed)
        content = message.get("content") if message else None
        return (content if isinstance(content, str) and content else None), usage


@dataclass(frozen=True)
class GeminiTarget(Target):
    """A Gemini path's reading; `sse`: the stream was asked for as Server-Sent Events (`alt=sse`),
    the only form the proxy relays."""

    sse: bool = False


WIRE = GeminiWire()
