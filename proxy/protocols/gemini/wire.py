"""The Gemini `Wire` (`POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse`, also under `/v1`).

Gemini puts the model and the method in the path: `bind` reads a request's path into a wire
that knows them (`GeminiWire.model`, `.stream`) and the upstream path to call
(`/{version}/models/{model}:{method}`, `?alt=sse` when streaming). The client's key travels in
`x-goog-api-key` or in the `key` query parameter; `bind` moves a query key into the header (and
out of the request's query string, which an access log would print), so it is read,
authenticated, replaced by a route's own key and redacted like every other credential header,
and the query string itself never goes upstream.

Usage (`usageMetadata`): `promptTokenCount` is the whole input, `cachedContentTokenCount` a part
of it, `toolUsePromptTokenCount` the input of server-side tools (added to the input);
`candidatesTokenCount` is the answer and `thoughtsTokenCount` the thinking, both output. The API
leaves zero fields out, so a reported prompt with no cache field read 0 tokens from the cache.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qs, urlencode

from ... import codec
from ...errors import BadRequest, ProxyError
from ...tail_parse import BodyMemo
from ...types import Json, Message, SentBody
from ...usage import Usage
from ..base import BaseWire
from .convert import contents_to_common, model_to_common, system_to_common
from .encode import to_native
from .errors import error_bytes
from .stream import ContentStream, candidate
from .validate import field, parse_body, validate_body

PATH = re.compile(
    r"^/(?P<version>v1beta|v1)/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$"
)
"""A model call's path; `countTokens` and the other methods are not model calls."""
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
    """None fixed: the model is in the path (`serves`, `bind`)."""

    def __init__(
        self, version: str = "v1beta", model: str = "", method: str = "generateContent", sse: bool = True
    ) -> None:
        self.version, self.model, self.method = version, model, method
        self.stream = method == "streamGenerateContent"
        self.sse = sse
        """False: a stream asked for as a JSON array (no `alt=sse`), which the proxy does not relay."""
        self.upstream_path = f"/{version}/models/{model}:{method}" + ("?alt=sse" if self.stream else "")

    def serves(self, path: str) -> bool:
        """Whether `path` is one of this API's (its error shape answers it)."""
        return path == self.path or (path.startswith(("/v1beta/models/", "/v1/models/")) and ":" in path)

    def bind(self, scope: MutableMapping[str, Any]) -> GeminiWire | None:
        """The wire for one model call (ASGI `scope`), None when its path is not one; a `key`
        query parameter becomes the `x-goog-api-key` header unless the request has one."""
        match = PATH.match(scope.get("path", ""))
        if match is None:
            return None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        headers = scope.get("headers") or []
        key = (query.get("key") or [None])[0]
        if key and not any(name.lower() == KEY_HEADER.encode() for name, _ in headers):
            scope["headers"] = [*headers, (KEY_HEADER.encode(), key.encode("latin-1"))]
        if "key" in query:  # nothing that prints the request's URL (an access log) prints the key
            rest = [(name, value) for name, values in query.items() if name != "key" for value in values]
            scope["query_string"] = urlencode(rest).encode("latin-1")
        return GeminiWire(match["version"], match["model"], match["method"], "sse" in query.get("alt", []))

    def parse(self, raw: bytes, memo: BodyMemo | None = None) -> Json:
        return parse_body(raw)

    def envelope(self, body: Json) -> tuple[str, bool]:
        if self.stream and not self.sse:
            raise BadRequest(
                "streamGenerateContent is served as Server-Sent Events only: add ?alt=sse to the request.",
                param="alt",
            )
        validate_body(body)
        return self.model, self.stream

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
        return f"/{self.version}/models", (self.auth_headers(key) if key else {})

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
        return f"/{self.version}/models/{model}:generateContent", body

    def summary_text(self, parsed: Json) -> tuple[str | None, Any]:
        message, _, usage = self.response(parsed)
        content = message.get("content") if message else None
        return (content if isinstance(content, str) and content else None), usage


WIRE = GeminiWire()
