"""The hop to non-OpenAI providers through litellm, behind the same interface as the raw hop.

A route whose upstream names a litellm `model` (`anthropic/claude-haiku-4-5`, `gemini/...`,
`openai/NAME` + `base_url` for any OpenAI-compatible server) is served by `RoutedUpstream.send`:
the OpenAI chat body the pipeline built is handed to `litellm.acompletion` with the route's model,
key and `api_base`, and the answer comes back as an `UpstreamResponse` carrying OpenAI bytes --
one `chat.completion` JSON object, or `data: {chunk}` SSE events ending in `data: [DONE]` -- so
the pipeline's relay and record path does not know which hop served it. A call of another client
API names its `Wire`: the wire renders its upstream body as chat completions
(`Wire.chat_request`) and litellm's answer, stream and errors back in its own shape
(`chat_answer`, `chat_stream`, `chat_error`), so the hop knows no API but chat completions.
Provider errors become OpenAI-shaped error bodies (then in the wire's shape) with the provider's
status; transport failures and deadlines raise the same `UpstreamError` / `UpstreamTimeout` as
the raw hop.

SSRF (litellm's CVE-2024-6587): only an allow-list of OpenAI sampling fields is taken from the
request body; the provider, host, key, retries, callbacks and every other litellm knob come from
the operator's config alone.

litellm is imported lazily (the import takes seconds) with its bundled price map (no network at
import), in a worker thread started at start-up when a route uses it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from .. import codec
from ..config import Route
from ..errors import UpstreamError, UpstreamTimeout
from ..protocols import DEFAULT, Wire, caller_key
from ..protocols.chat_hop import ChatStream
from ..usage import Usage
from .base import UpstreamResponse, within_deadlines

# OpenAI chat-completions request fields passed to litellm; everything else in the body is dropped.
ALLOWED_FIELDS = frozenset(
    {
        "messages",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "n",
        "stop",
        "max_tokens",
        "max_completion_tokens",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "seed",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "reasoning_effort",
        "modalities",
        "audio",
        "prediction",
        "service_tier",
        "web_search_options",
        "functions",
        "function_call",
        "thinking",
        "verbosity",
    }
)
_LITELLM_EXTRAS = frozenset({"provider_specific_fields", "citations", "moderation", "obfuscation", "thinking_blocks"})
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def missing_keys(model: str) -> list[str]:
    """The environment variables litellm would read `model`'s provider key from, when none of
    them is set (empty: the key is there, or the provider needs none)."""
    found = _import().validate_environment(model=model)
    return [str(name) for name in found.get("missing_keys") or []]


def _import() -> Any:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # the bundled map: no download at import
    module = importlib.import_module("litellm")
    setattr(module, "suppress_debug_info", True)  # noqa: B010 -- not declared by the module
    setattr(module, "telemetry", False)  # noqa: B010
    # The OpenAI-compatible providers' HTTP client: litellm's default follows redirects, so an
    # upstream answering 307 would make the proxy connect wherever it points (SSRF, and the key
    # along with it). Redirects are relayed to the client as the raw HTTP hop does.
    httpx = importlib.import_module("httpx")  # litellm's own HTTP library, loaded with it
    setattr(module, "aclient_session", httpx.AsyncClient(follow_redirects=False))  # noqa: B010
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).setLevel(logging.WARNING)  # not a line per call at INFO
    return module


class LitellmModule:
    """The litellm module, imported once in a worker thread (concurrent callers share the import);
    one per app, so nothing about it lives at module level."""

    def __init__(self) -> None:
        self._module: Any = None
        self._loading: asyncio.Future[Any] | None = None

    async def load(self) -> Any:
        if self._module is not None:
            return self._module
        if self._loading is None:
            self._loading = asyncio.ensure_future(asyncio.to_thread(_import))
        self._module = await asyncio.shield(self._loading)
        return self._module


def uses_litellm(routes: list[Route]) -> bool:
    return any(route.upstream.model for route in routes)


def usage_from_litellm(raw: Any, wire: Wire = DEFAULT) -> Usage:
    """litellm reports every provider in OpenAI's shape (`prompt_tokens` = the whole input,
    `cached_tokens` a part of it) and adds the cache writes that OpenAI's shape has no field for
    (`prompt_tokens_details.cache_creation_tokens`, Anthropic's `cache_creation_input_tokens`),
    which are inside `prompt_tokens` as well: they come out of the uncached input here. `raw` is
    in the shape of `wire`, which rendered litellm's usage in its own API (`Wire.chat_answer`)."""
    usage = wire.usage(raw)
    if not isinstance(raw, dict):
        return usage
    details = raw.get("prompt_tokens_details")
    write = details.get("cache_creation_tokens") if isinstance(details, dict) else None
    if write is None:
        write = raw.get("cache_creation_input_tokens")
    if not isinstance(write, int) or isinstance(write, bool):
        return usage
    total = usage.input_total
    uncached = None
    if total is not None:
        uncached = total - (usage.cache_read or 0) - write
    return Usage(usage.input_total, uncached, usage.cache_read, write, usage.output, usage.reasoning)


def _clean(value: Any) -> Any:
    """litellm's objects as OpenAI sends them: without litellm's extra keys and unset fields."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None and k not in _LITELLM_EXTRAS and k != "cost"}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _completion_json(response: Any) -> dict[str, Any]:
    data = response.model_dump() if hasattr(response, "model_dump") else dict(response)
    out: dict[str, Any] = _clean(data)
    for choice in out.get("choices") or ():
        message = choice.get("message")
        if isinstance(message, dict):
            message.setdefault("content", None)  # OpenAI keeps "content": null next to tool calls
        choice.setdefault("logprobs", None)
        choice.setdefault("finish_reason", None)
    return out


def _chunk_json(chunk: Any) -> dict[str, Any]:
    data = chunk.model_dump() if hasattr(chunk, "model_dump") else dict(chunk)
    out: dict[str, Any] = _clean(data)
    for choice in out.get("choices") or ():
        choice.setdefault("delta", {})
        choice.setdefault("finish_reason", None)
    return out


def _scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def _provider_error(exc: Exception, secret: str | None) -> tuple[int, dict[str, Any]]:
    """The provider's status and an OpenAI-shaped error body from a litellm exception."""
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int) or not 400 <= status <= 599:
        status = 502
    message = str(getattr(exc, "message", None) or exc)
    error: dict[str, Any] = {
        "message": message,
        "type": _ERROR_TYPES.get(status, "api_error"),
        "param": None,
        "code": None,
    }
    body = getattr(exc, "body", None)
    detail: Any = body if isinstance(body, dict) else None
    if detail is None and "{" in message:
        # Providers' own error JSON is embedded in litellm's message: "AnthropicException - {...}".
        raw = message[message.index("{") : message.rindex("}") + 1]
        try:
            detail = codec.loads(raw)
        except ValueError:
            detail = None
    if isinstance(detail, dict):
        inner: Any = detail.get("error")
        if not isinstance(inner, dict):
            inner = detail
        if isinstance(inner.get("message"), str):
            error["message"] = inner["message"]
            error["type"] = inner.get("type") if isinstance(inner.get("type"), str) else error["type"]
            error["param"] = inner.get("param") if isinstance(inner.get("param"), str) else None
            error["code"] = inner.get("code") if isinstance(inner.get("code"), str | int) else None
    else:
        for prefix in ("litellm.", type(exc).__name__ + ": "):
            while error["message"].startswith(prefix):
                error["message"] = error["message"].split(": ", 1)[-1]
    if type(exc).__name__ == "ContextWindowExceededError":
        error["code"] = error["code"] or "context_length_exceeded"
    error["message"] = _scrub(error["message"], secret)
    return status, {"error": error}


_CONNECT_ERRORS = frozenset(
    {
        "APIConnectionError",
        "ConnectError",
        "ClientConnectorError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "ServerDisconnectedError",
        "RemoteProtocolError",
        "ClientOSError",
        "gaierror",
    }
)


def _transport_failure(exc: BaseException) -> str | None:
    """ "timeout" / "connect" when the provider was never heard from (litellm reports a refused
    connection as a 500 of the provider; the cause chain tells the truth), else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name = type(current).__name__
        if "Timeout" in name or isinstance(current, TimeoutError):
            return "timeout"
        if name in _CONNECT_ERRORS:
            return "connect"
        current = current.__cause__ or current.__context__
    return None


def _where(route: Route) -> str:
    return f"provider {route.upstream.model} (route {route.name!r})"


def _api_key(headers: Mapping[str, str]) -> str | None:
    return caller_key({name.lower(): value for name, value in headers.items()})


class LitellmResponse(UpstreamResponse):
    """An `UpstreamResponse` whose body is produced by litellm: whole JSON, or a chunk stream."""

    def __init__(
        self,
        route: Route,
        status: int,
        started: float,
        body: bytes | None = None,
        stream: Any = None,
        request_id: str | None = None,
        secret: str | None = None,
        closing: set[asyncio.Task[Any]] | None = None,
        render: ChatStream | None = None,
    ) -> None:
        content_type = "text/event-stream; charset=utf-8" if stream is not None else "application/json"
        super().__init__(status, [("content-type", content_type)], content_type, request_id, started)
        self._route = route
        self._closing = closing
        self._body = body
        self._stream = stream
        self._secret = secret
        self._render = render or DEFAULT.chat_stream()

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        if self._body is not None:
            return self._body[:limit]
        return b"".join([piece async for piece in self.pieces()])[:limit]

    async def pieces(self) -> AsyncIterator[bytes]:
        if self._body is not None:
            yield self._body
            return
        iterator = self._stream.__aiter__()
        while True:
            try:
                chunk = await within_deadlines(self._route, self.started, iterator.__anext__, _where(self._route))
            except StopAsyncIteration:
                break
            except UpstreamTimeout:
                raise
            except Exception as exc:  # litellm's error tree, translated at this boundary
                if _transport_failure(exc) == "timeout":
                    raise UpstreamTimeout(_where(self._route) + " timed out mid-stream") from None
                status, body = _provider_error(exc, self._secret)
                raise UpstreamError(
                    _where(self._route) + f" broke off the stream ({status}): {body['error']['message']}"
                ) from None
            rendered = self._render.chunk(_chunk_json(chunk))
            if rendered:
                yield rendered
        yield self._render.end()

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and hasattr(stream, "aclose"):
            try:
                task = asyncio.get_running_loop().create_task(stream.aclose())
            except RuntimeError:
                return
            if self._closing is not None:  # the loop keeps only weak references to tasks
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)


class LitellmHop:
    """`send` with the raw hop's signature; the request is a chat-completions body, or the body of
    a `Wire` that renders itself as one."""

    def __init__(self) -> None:
        self.module = LitellmModule()
        self._warmup: asyncio.Future[Any] | None = None
        self._closing: set[asyncio.Task[Any]] = set()
        """Stream closes in flight."""

    def warm_up(self) -> None:
        """Start the import now, in a worker thread, not in the first request's way."""
        self._warmup = asyncio.ensure_future(self.module.load())

    async def send(
        self,
        route: Route,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        wire: Wire | None = None,
        stream: bool = False,
    ) -> UpstreamResponse:
        """`wire`: the client API of the call, whose body (its own shape, asking for a `stream`
        or not) it renders as chat completions; None: `body` is a chat-completions body for `path`."""
        started = time.monotonic()
        if wire is None and (method != "POST" or not path.endswith("/chat/completions")):
            raise UpstreamError(
                f"{_where(route)} serves only POST /v1/chat/completions through litellm, not {method} {path}"
            )
        speaking = wire or DEFAULT
        if body is None:
            raise UpstreamError(f"{_where(route)}: a call through litellm needs a request body")
        try:
            native = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise UpstreamError(f"{_where(route)}: the request body is not JSON") from None
        request = speaking.chat_request(native, stream) if isinstance(native, dict) else None
        if request is None:
            raise UpstreamError(f"{_where(route)}: the {speaking.name} API cannot be served through litellm")
        key = _api_key(headers)  # None: litellm's own provider default (its env var)
        litellm = await self.module.load()
        stream = bool(request.get("stream"))
        timeouts = route.upstream.timeouts
        kwargs: dict[str, Any] = {k: v for k, v in request.items() if k in ALLOWED_FIELDS}
        kwargs.update(
            model=route.upstream.model,
            api_key=key,
            api_base=route.upstream.base_url,
            stream=stream,
            timeout=timeouts.total,
            max_retries=0,
            num_retries=0,
            drop_params=True,
        )
        within = min(timeouts.connect + timeouts.first_byte, timeouts.total) if stream else timeouts.total
        try:
            async with asyncio.timeout(within):
                response = await litellm.acompletion(**kwargs)
        except TimeoutError:
            raise UpstreamTimeout(_where(route) + f" did not answer within {within:g} s") from None
        except Exception as exc:  # litellm's error tree, translated at this boundary
            failure = _transport_failure(exc)
            if failure == "timeout":
                raise UpstreamTimeout(_where(route) + " timed out") from None
            if failure == "connect":
                raise UpstreamError(_where(route) + " refused or could not be reached") from None
            status, error_body = _provider_error(exc, key)
            return LitellmResponse(route, status, started, body=speaking.chat_error(status, error_body))
        if stream:
            render = speaking.chat_stream()
            return LitellmResponse(
                route, 200, started, stream=response, secret=key, closing=self._closing, render=render
            )
        data = _completion_json(response)
        answer = json.dumps(speaking.chat_answer(data)).encode()
        return LitellmResponse(route, 200, started, body=answer, request_id=data.get("id"))
