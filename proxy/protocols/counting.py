"""How a wire serves its API's token-counting endpoint (`proxy.count`).

An API may count a request's input tokens without running it: Anthropic's
`/v1/messages/count_tokens`, the Responses API's `/v1/responses/input_tokens`, Gemini's
`/v1beta/models/{model}:countTokens`. The proxy answers them for what it would send (the
projection), so the wire says where the endpoint is (`count_paths`, `count_target`), what
model call a counting body stands for (`count_body`), how the projected call's body is asked
to the upstream's own endpoint (`upstream_count_path_for`, `count_request`), how that
endpoint's answer says the count (`counted_tokens`) and how the client is answered
(`count_answer`). `CountDefaults` holds the defaults every `BaseWire` inherits: a counting body
that is the model call's own body, fixed paths, and Anthropic's `input_tokens`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..types import Json
from .target import Target


class Counting(Protocol):
    """The `Wire` members the counting endpoint calls."""

    count_paths: tuple[str, ...]
    """Where the API counts a request's input tokens without running it, as starlette route
    paths (`{model}` a path parameter); empty when it has no such endpoint."""
    upstream_count_path: str | None
    """The upstream's counting path (appended to the route's `base_url`), None without one."""

    def count_target(self, path: str, query: Mapping[str, str]) -> Target:
        """What a counting path (one of `count_paths`) says, as `target` for a model path."""

    def upstream_count_path_for(self, model: str) -> str | None:
        """Where the upstream counts a request of `model` (`upstream_count_path`), None without one."""

    def count_body(self, body: Json) -> Json:
        """The model call's body a parsed counting body stands for (BadRequest when it is not one)."""

    def count_request(self, encoded: bytes, model: str) -> bytes:
        """A model call's encoded body as the upstream's counting endpoint takes it."""

    def counted_tokens(self, answer: Any) -> Any:
        """The count in the upstream's counting answer (parsed JSON); checked by the caller."""

    def count_answer(self, tokens: int) -> Json:
        """The counting endpoint's answer for `tokens` input tokens, in the API's shape."""


class CountDefaults:
    """The counting members of `BaseWire`: fixed paths whose body is a model call's body."""

    count_paths: tuple[str, ...] = ()
    upstream_count_path: str | None = None

    def count_target(self, path: str, query: Mapping[str, str]) -> Target:
        return Target(path)

    def upstream_count_path_for(self, model: str) -> str | None:
        return self.upstream_count_path

    def count_body(self, body: Json) -> Json:
        return body

    def count_request(self, encoded: bytes, model: str) -> bytes:
        return encoded

    def counted_tokens(self, answer: Any) -> Any:
        """Anthropic's and the Responses API's `input_tokens`."""
        return answer.get("input_tokens") if isinstance(answer, dict) else None

    def count_answer(self, tokens: int) -> Json:
        """Anthropic's shape (`{"input_tokens": N}`); the Responses API adds its `object`."""
        return {"input_tokens": tokens}
