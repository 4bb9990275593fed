"""The one LLM call of a compaction: summarize a chunk of history.

Both go through the app's hop (`proxy.upstream`). With no `summarizer.model` in the policy, the
route's own upstream is called with the request's model in the route's own API (same key rules as
the request itself). With a `summarizer.model`, the call is an OpenAI chat request on a litellm
route of its own, so any provider works (`anthropic/...`, `gemini/...`, or `openai/NAME` plus
`base_url` for any OpenAI-compatible server), with the key named by `summarizer.api_key_env`.

Either way the result is a `SummaryResult` carrying the text and the usage, which the caller
records as a call with purpose `summary` (it goes to the ledger, never to the context baseline).

`compact` is the same call made the provider's way (`summarizer.mode: native`): the wire's own
compaction request (`Wire.native_compaction`) on the route's upstream, whose answer is opaque
messages to send back verbatim or the provider's readable summary (`Wire.native_compacted`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from policies.text import message_text

from .config import Route, Timeouts, Upstream
from .credentials import Keys
from .errors import ProxyError
from .policy_settings import Policy
from .policy_settings import Summarizer as SummarizerSettings
from .protocols import DEFAULT, caller_key
from .protocols.base import Compacted, NativeRequest, Wire
from .types import Message
from .upstream.base import Hop
from .upstream.classify import Rejection, classify
from .upstream.litellm import usage_from_litellm
from .usage import Usage


@dataclass
class SummaryResult:
    text: str | None
    model: str
    usage_raw: Any = None
    usage: Usage = field(default_factory=Usage)
    upstream_status: int | None = None
    error: str | None = None
    latency_ms: float = 0.0
    rejection: Rejection | None = None
    """the upstream's error answer, classified (a context overflow says by how much)"""
    native: tuple[Message, ...] = ()
    """a native compaction's opaque messages (`text` is then None or the provider's own summary)"""


class Summarizer:
    def __init__(self, upstream: Hop, keys: Keys) -> None:
        self.upstream = upstream
        self.keys = keys

    async def summarize(
        self,
        wire: Wire,
        route: Route,
        policy: Policy,
        model: str,
        messages: list[Message],
        client_auth: dict[str, str],
        max_tokens: int | None = None,
    ) -> SummaryResult:
        """One summarizer call; `max_tokens`: the reply's size, within the summarizer's output
        reserve (default `summarizer.max_tokens`)."""
        settings = policy.summarizer
        started = time.monotonic()
        if settings.model:
            # Any provider through litellm: an OpenAI chat request on a route of its own.
            key = self.keys.get(settings.api_key_env)
            route = _litellm_route(route, settings)
            model, wire, client_auth = settings.model, DEFAULT, DEFAULT.auth_headers(key) if key else {}
        else:
            client_auth = {**wire.summary_headers, **client_auth}
        path, body = wire.summary_request(model, messages, max_tokens or settings.max_tokens)
        result = await self._call(wire, route, policy, model, path, _json(body), client_auth, _summary_of(wire))
        result.latency_ms = round((time.monotonic() - started) * 1000, 3)
        return result

    async def compact(
        self, wire: Wire, route: Route, policy: Policy, model: str, request: NativeRequest, client_auth: dict[str, str]
    ) -> SummaryResult:
        """One native compaction call (`request`, from `Wire.native_compaction`) on the route's upstream."""
        started = time.monotonic()

        def read(parsed: dict[str, Any]) -> Compacted:
            answer = wire.native_compacted(parsed)
            return replace(answer, error=f"native compaction: {answer.error}") if answer.error else answer

        auth = {**request.headers, **client_auth}
        result = await self._call(wire, route, policy, model, request.path, _json(request.body), auth, read)
        result.latency_ms = round((time.monotonic() - started) * 1000, 3)
        return result

    async def shared(
        self, wire: Wire, route: Route, policy: Policy, model: str, request: tuple[str, bytes, dict[str, str]]
    ) -> SummaryResult:
        """One summary asked of the conversation's own request (`proxy.shared_summary`): `request`
        is its path, bytes and headers; the answer must be text, not a tool call."""
        started = time.monotonic()
        path, payload, headers = request

        def read(parsed: dict[str, Any]) -> Compacted:
            message, _, usage_raw = wire.response(parsed)
            if message is not None and message.get("tool_calls"):
                return Compacted((), None, usage_raw, "the model answered with a tool call, not a summary")
            text = message_text(message) if message is not None else ""
            return Compacted((), text.strip() or None, usage_raw)

        result = await self._call(wire, route, policy, model, path, payload, headers, read)
        result.latency_ms = round((time.monotonic() - started) * 1000, 3)
        return result

    async def _call(
        self,
        wire: Wire,
        route: Route,
        policy: Policy,
        model: str,
        path: str,
        payload: bytes,
        auth: dict[str, str],
        read: Callable[[dict[str, Any]], Compacted],
    ) -> SummaryResult:
        """POST `payload`; a 200 answer's content is what `read` finds in it (a summary's text, or
        a native compaction's messages or text)."""
        headers = {"Content-Type": "application/json", **auth}
        try:
            async with asyncio.timeout(policy.summarizer.timeout):
                response = await self.upstream.send(route, "POST", path, payload, headers)
                try:
                    data = await response.read()
                finally:
                    response.close()
        except TimeoutError:
            return SummaryResult(None, model, error=f"summarizer timed out after {policy.summarizer.timeout:g} s")
        except ProxyError as exc:
            return SummaryResult(None, model, error=exc.message)
        try:
            parsed = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError):
            parsed = None
        if response.status != 200 or not isinstance(parsed, dict):
            caller = caller_key({k.lower(): v for k, v in auth.items()})
            data = self.keys.redact(data, caller)  # an upstream that echoes the key it was sent
            return SummaryResult(
                None,
                model,
                upstream_status=response.status,
                error=f"summarizer answered {response.status}: {data[:500].decode(errors='replace')}",
                rejection=classify(response.status, data) if response.status >= 400 else None,
            )
        answer = read(parsed)
        usage = usage_from_litellm(answer.usage_raw) if route.upstream.model else wire.usage(answer.usage_raw)
        done = answer.text or answer.messages
        return SummaryResult(
            answer.text,
            model,
            answer.usage_raw,
            usage,
            response.status,
            answer.error or (None if done else "summarizer returned no text"),
            native=answer.messages,
        )


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def _summary_of(wire: Wire) -> Callable[[dict[str, Any]], Compacted]:
    """A summary call's answer read by `wire` (`Wire.summary_text`)."""
    return lambda parsed: Compacted((), *wire.summary_text(parsed))


def _litellm_route(route: Route, settings: SummarizerSettings) -> Route:
    """The summarizer's own litellm route: its model, `base_url` and key, under the request's
    route name (records and metrics stay with the route); the whole call within its timeout."""
    timeout = settings.timeout
    upstream = Upstream(
        model=settings.model,
        base_url=settings.base_url,
        api_key_env=settings.api_key_env,
        timeouts=Timeouts(connect=timeout, first_byte=timeout, idle=timeout, total=timeout),
    )
    return Route(name=route.name, upstream=upstream)
