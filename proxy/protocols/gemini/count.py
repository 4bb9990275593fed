"""Gemini's `models.countTokens` (`POST /v1beta/models/{model}:countTokens`, also under `/v1`).

A `CountTokensRequest` is either `{"contents": [...]}` -- the Developer API's form, which the
Python SDK sends -- or `{"generateContentRequest": {"model": "models/...", "contents": [...],
"systemInstruction": ..., "tools": [...], ...}}`, the whole model call; the API reads
`contents` only when there is no `generateContentRequest`. So a counting body stands for the
model call `generateContentRequest` holds, else for itself (Vertex's form puts `systemInstruction`
and `tools` beside `contents`: they count too). The model is the path's.

The proxy asks the upstream to count its projection as a `generateContentRequest` (the only form
that carries a system instruction and the proxy's own tools), and answers `{"totalTokens": N}`.
The real answer may add `promptTokensDetails` (per modality) and `cachedContentTokenCount` (of a
`cachedContent` named in the request); the proxy's count of a projection has neither, so it
leaves them out.

Example: `POST /v1beta/models/gemini-2.5-flash:countTokens` with `{"contents": [60 turns]}` on a
conversation the proxy keeps as a summary and 8 raw turns goes upstream as
`{"generateContentRequest": {"model": "models/gemini-2.5-flash", "contents": [summary, 8 turns]}}`.
"""

from __future__ import annotations

import re
from typing import Any

from ... import codec
from ...errors import BadRequest
from ...types import Json
from .validate import field

COUNT_PATHS = ("/v1beta/models/{model}:countTokens", "/v1/models/{model}:countTokens")
"""The counting endpoint as starlette route paths."""
COUNT_PATH = re.compile(r"^/(?:v1beta|v1)/models/(?P<model>[^/:]+):countTokens$")
UPSTREAM_COUNT_PATH = "/v1beta/models/{model}:countTokens"
WRAPPER = "generateContentRequest"


def count_body(body: Json) -> Json:
    """The `generateContent` body a `CountTokensRequest` stands for (module docstring), without
    a `model` field: the path names the model."""
    inner = field(body, WRAPPER)
    if inner is None:
        return {key: value for key, value in body.items() if key != "model"}
    if not isinstance(inner, dict):
        raise BadRequest(
            "Invalid value at 'generate_content_request': a GenerateContentRequest object is expected",
            param=WRAPPER,
        )
    return {key: value for key, value in inner.items() if key != "model"}


def count_request(encoded: bytes, model: str) -> bytes:
    """An encoded `generateContent` body as the `generateContentRequest` of a count of `model`."""
    body: dict[str, Any] = codec.loads(encoded)
    return codec.dumps({WRAPPER: {**body, "model": f"models/{model}"}})


def total_tokens(answer: Any) -> Any:
    """A `CountTokensResponse`'s `totalTokens`."""
    return answer.get("totalTokens") if isinstance(answer, dict) else None
