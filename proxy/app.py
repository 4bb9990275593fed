"""create_app(config): the ASGI application and its lifespan (store, upstream session)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Route

from . import admin, endpoints, retention, ui
from .catalog import ModelCatalog
from .chat import endpoint
from .compaction import Compactor
from .config import Config
from .errors import BadRequest, NotFound, ProxyError, StoreError, StoreUnavailable
from .http import RawResponse, error_response
from .keys import resolve_keys
from .metrics import Metrics
from .projection import Projector
from .protocols import WIRES, wire_for_path
from .record import Recorder
from .services import Services, history_cache
from .store import make_store
from .summarizer import Summarizer
from .upstream import RoutedUpstream, uses_litellm

log = logging.getLogger("ctxproxy")


def _error_response(request: Request, exc: ProxyError) -> RawResponse:
    """The error in the client API's shape, with the conversation header once the request's
    conversation is known (`chat.handle` sets it right after identifying)."""
    response = error_response(exc, wire_for_path(request.url.path))
    services = getattr(request.app.state, "ctx", None)
    if services is not None:  # a message quoting a client's value never quotes an operator secret
        response.body = services.keys.redact(response.body)
    conversation = getattr(request.state, "conversation_header", None)
    if conversation is not None:
        response.headers.append(conversation)
    return response


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


def create_app(config: Config, env: dict[str, str] | None = None) -> Starlette:
    keys = resolve_keys(config, env)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = make_store(config.store)
        await store.open()
        upstream = RoutedUpstream()  # raw HTTP, or litellm for routes that name a provider model
        await upstream.start()
        if uses_litellm(config.routes) or any(p.summarizer.model for p in config.policies.values()):
            upstream.litellm.warm_up()  # import litellm now, not in the first call's way
        catalog = ModelCatalog()
        projector = Projector(catalog, config.caches)
        metrics = Metrics()
        recorder = Recorder(store, metrics, catalog, config.routes)
        compactor = Compactor(store, Summarizer(upstream, keys), projector, recorder)
        compactor.lease_ttl = config.compaction_lease_seconds
        salt = await store.tenant_salt()
        services = Services(
            config, keys, store, upstream, projector, compactor, recorder, metrics, history_cache(config.caches), salt
        )
        app.state.ctx = services
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
        Route("/v1/models", endpoints.list_models, methods=["GET"]),
        Route("/v1/messages/count_tokens", endpoints.count_tokens, methods=["POST"]),
        Route("/", endpoints.root, methods=["GET", "HEAD"]),
        Route("/healthz", endpoints.healthz, methods=["GET"]),
        Route("/metrics", endpoints.metrics, methods=["GET"]),
        *admin.routes,
        *ui.routes,  # the inspector, /ui/ (proxy/ui/)
    ]
    # starlette types handlers as returning its Response; ours return plain ASGI responses
    handlers: dict[Any, Any] = {
        ProxyError: _proxy_error,
        StoreError: _store_error,
        HTTPException: _http_error,
        Exception: _unexpected,
    }
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
