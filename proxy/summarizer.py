"""The one LLM call of a compaction: summarize a chunk of history.

Two paths. With no `summarizer.model` in the policy, the route's own upstream is called with the
request's model over the proxy's raw HTTP hop (same key rules as the request itself). With a
`summarizer.model`, the call goes through litellm, so any provider works (`anthropic/...`,
`gemini/...`, or `openai/NAME` plus `base_url` for any OpenAI-compatible server); litellm is
imported on first use only, in a worker thread, with the bundled price map (no download).

Either way the result is a `SummaryResult` carrying the text and the usage, which the caller
records as a call with purpose `summary` (it goes to the ledger, never to the context baseline).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from .config import Policy, Route
from .errors import ProxyError, UpstreamError, UpstreamTimeout
from .protocols.base import Wire
from .types import Message
from .upstream.http import UpstreamClient
from .upstream.litellm import load_litellm, usage_from_litellm
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


class Summarizer:
    def __init__(self, upstream: UpstreamClient, env: dict[str, str]) -> None:
        self.upstream = upstream
        self.env = env

    async def summarize(
        self,
        wire: Wire,
        route: Route,
        policy: Policy,
        model: str,
        messages: list[Message],
        client_auth: dict[str, str],
    ) -> SummaryResult:
        settings = policy.summarizer
        started = time.monotonic()
        if settings.model:
            result = await self._via_litellm(policy, messages)
        else:
            result = await self._via_route(wire, route, policy, model, messages, client_auth)
        result.latency_ms = round((time.monotonic() - started) * 1000, 3)
        return result

    async def _via_route(
        self,
        wire: Wire,
        route: Route,
        policy: Policy,
        model: str,
        messages: list[Message],
        client_auth: dict[str, str],
    ) -> SummaryResult:
        """In the route's own API (the summary prompt converted to the wire's format)."""
        path, body = wire.summary_request(model, messages, policy.summarizer.max_tokens)
        headers = {"Content-Type": "application/json", **client_auth}
        try:
            async with asyncio.timeout(policy.summarizer.timeout):
                response = await self.upstream.send(route, "POST", path, json.dumps(body).encode(), headers)
                try:
                    data = await response.read()
                finally:
                    response.close()
        except TimeoutError:
            return SummaryResult(None, model, error=f"summarizer timed out after {policy.summarizer.timeout:g} s")
        except (UpstreamError, UpstreamTimeout, ProxyError) as exc:
            return SummaryResult(None, model, error=exc.message)
        try:
            parsed = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError):
            parsed = None
        if response.status != 200 or not isinstance(parsed, dict):
            return SummaryResult(
                None,
                model,
                upstream_status=response.status,
                error=f"summarizer answered {response.status}: {data[:500].decode(errors='replace')}",
            )
        text, usage_raw = wire.summary_text(parsed)
        return SummaryResult(
            text,
            model,
            usage_raw,
            wire.usage(usage_raw),
            response.status,
            None if text else "summarizer returned no text",
        )

    async def _via_litellm(self, policy: Policy, messages: list[Message]) -> SummaryResult:
        settings = policy.summarizer
        model = settings.model or ""
        litellm = await load_litellm()
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": settings.max_tokens,
            "temperature": 0,
            "timeout": settings.timeout,
        }
        if settings.base_url:
            kwargs["api_base"] = settings.base_url
        if settings.api_key_env:
            kwargs["api_key"] = self.env.get(settings.api_key_env)
        try:
            async with asyncio.timeout(settings.timeout):
                response = await litellm.acompletion(**kwargs)
        except TimeoutError:
            return SummaryResult(None, model, error=f"summarizer timed out after {settings.timeout:g} s")
        except Exception as exc:  # litellm raises its own tree; translate here, at the boundary
            status = getattr(exc, "status_code", None)
            detail = str(exc)[:300]
            if kwargs.get("api_key"):
                detail = detail.replace(kwargs["api_key"], "***")
            return SummaryResult(
                None,
                model,
                upstream_status=status if isinstance(status, int) else None,
                error=f"summarizer call failed: {type(exc).__name__}: {detail}",
            )
        data = response.model_dump() if hasattr(response, "model_dump") else dict(response)
        usage_raw = data.get("usage")
        text = None
        choices = data.get("choices") or []
        if choices:
            text = (choices[0].get("message") or {}).get("content")
        return SummaryResult(
            text if isinstance(text, str) else None,
            model,
            usage_raw,
            usage_from_litellm(usage_raw),
            200,
            None if text else "summarizer returned no text",
        )
