"""create_app(config): the ASGI application and its lifespan (store, upstream session)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Route

from . import admin, retention
from .catalog import ModelCatalog
from .chat import endpoint
from .compaction import Compactor
from .config import Config
from .endpoints import count_tokens as anthropic_count_tokens
from .errors import BadRequest, NotFound, ProxyError, StoreUnavailable, openai_error_bytes
from .http import RawResponse, json_response, require_token
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .projection import Projector
from .protocols import WIRES, wire_for_path
from .services import Services, resolve_secrets
from .store import StoreError, make_store
from .summarizer import Summarizer
from .upstream.http import upstream_request_headers
from .upstream.litellm import RoutedUpstream, uses_litellm

log = logging.getLogger("ctxproxy")


def _error_response(request: Request, exc: ProxyError) -> RawResponse:
    """In the error shape of the API the client called (OpenAI's by default)."""
    wire = wire_for_path(request.url.path)
    body = wire.error_body(exc) if wire is not None else openai_error_bytes(exc)
    return RawResponse(body, exc.status, [("content-type", "application/json")])


async def _proxy_error(request: Request, exc: Exception) -> RawResponse:
    assert isinstance(exc, ProxyError)
    return _error_response(request, exc)


async def _store_error(request: Request, exc: Exception) -> RawResponse:
    log.error("store failure on %s: %s", request.url.path, exc)
    return _error_response(request, StoreUnavailable("The proxy's store is unavailable; retry shortly."))


async def _http_error(request: Request, exc: Exception) -> RawResponse:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _error_response(request, NotFound(f"Unknown path {request.url.path}."))
    if exc.status_code == 405:
        not_allowed = BadRequest(f"Method {request.method} is not allowed on {request.url.path}.")
        not_allowed.status = 405
        return _error_response(request, not_allowed)
    error = ProxyError(str(exc.detail))
    error.status = exc.status_code
    return _error_response(request, error)


async def _unexpected(request: Request, exc: Exception) -> RawResponse:
    log.exception("unexpected error on %s", request.url.path)
    return _error_response(
        request, ProxyError("The proxy failed unexpectedly; the error was logged. Retry the request.")
    )


async def healthz(request: Request) -> RawResponse:
    state: Services = request.app.state.ctx
    try:
        await state.store.ping()
    except Exception:
        return json_response({"status": "store unavailable"}, 503)
    return json_response({"status": "ok"})


async def metrics(request: Request) -> RawResponse:
    """Prometheus text format. Open unless `metrics_token_env` is configured: then a bearer token
    is required (and while that variable is unset the path answers 404, like the admin API)."""
    state: Services = request.app.state.ctx
    if state.config.metrics_token_env:
        name = f"${state.config.metrics_token_env}"
        require_token(request, state.metrics_token, "/metrics", name, "invalid_metrics_token")
    return RawResponse(state.metrics.render(), 200, [("content-type", METRICS_CONTENT_TYPE)])


async def list_models(request: Request) -> RawResponse:
    """The models of the first OpenAI-compatible route's upstream, as the client would list them
    directly; with only litellm routes, their models."""
    state: Services = request.app.state.ctx
    route = next((r for r in state.config.routes if not r.upstream.model), None)
    if route is None:
        data = [
            {"id": r.upstream.model, "object": "model", "created": 0, "owned_by": "litellm"}
            for r in state.config.routes
        ]
        return json_response({"object": "list", "data": data})
    key = state.upstream_key(route)
    headers = upstream_request_headers(
        request.headers, {"Authorization": f"Bearer {key}"} if key else None, frozenset()
    )
    upstream = await state.upstream.send(route, "GET", "/models", None, headers)
    try:
        body = await upstream.read()
    finally:
        upstream.close()
    return RawResponse(body, upstream.status, upstream.headers)


def create_app(config: Config, env: dict[str, str] | None = None) -> Starlette:
    env = dict(os.environ) if env is None else env
    upstream_keys = resolve_secrets(config, env)
    admin_token = env.get(config.admin_token_env) if config.admin_token_env else None
    metrics_token = env.get(config.metrics_token_env) if config.metrics_token_env else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = make_store(config.store)
        await store.open()
        upstream = RoutedUpstream()  # raw HTTP, or litellm for routes that name a provider model
        await upstream.start()
        if uses_litellm(config.routes) or any(p.summarizer.model for p in config.policies.values()):
            upstream.litellm.warm_up()  # import litellm now, not in the first call's way
        projector = Projector(ModelCatalog())
        summarizer = Summarizer(upstream, env)
        compactor = Compactor(store, summarizer, projector)
        compactor.lease_ttl = config.compaction_lease_seconds
        state = Services(config, store, upstream, upstream_keys, admin_token or None, projector, compactor)
        state.salt = await store.tenant_salt()
        state.metrics_token = metrics_token or None
        compactor.metrics = state.metrics
        app.state.ctx = state
        purger = None
        if retention.enabled(config.retention):
            purger = asyncio.create_task(retention.run_forever(store, config.retention), name="retention")
        try:
            yield
        finally:
            if purger is not None:
                purger.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await purger
            await compactor.drain(timeout=10.0)
            await upstream.close()
            await store.close()

    routes = [
        *(Route(path, endpoint(wire), methods=["POST"]) for wire in WIRES for path in wire.paths),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/messages/count_tokens", anthropic_count_tokens, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *admin.routes,
    ]
    # starlette types handlers as returning its Response; ours return plain ASGI responses
    handlers: dict[Any, Any] = {
        ProxyError: _proxy_error,
        StoreError: _store_error,
        HTTPException: _http_error,
        Exception: _unexpected,
    }
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
