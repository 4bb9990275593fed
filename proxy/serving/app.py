"""create_app(config): the ASGI application and its lifespan (store, upstream session).

The model endpoints (the APIs' paths: `Wire.target`) are dispatched by `ProxyApp` on the
scope's path and method before starlette sees the request: they are most of the traffic, and
starlette's layers (error middleware, exception middleware, router matching every route, the
`Request` object, the endpoint wrapper) cost about as much per call as the whole bare hop. The
rest -- admin API, inspector, health, metrics, models, count_tokens -- is a starlette app. Both
render errors through `_render`: the API's own shape, operator secrets redacted, the
conversation header once known.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import State
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from .. import loop_lag, retention, ui
from ..admission import Admission
from ..asgi import Incoming, RawResponse, error_response, query_of
from ..catalog import ModelCatalog
from ..chat import handle
from ..compaction import Compactor
from ..config import Config
from ..credentials import redact_access_log, resolve_keys
from ..errors import BadRequest, NotFound, ProxyError, StoreError, StoreUnavailable
from ..metrics import Metrics
from ..projector import Projector
from ..protocols import WIRES, wire_for_path, wire_for_request
from ..protocols.base import Wire
from ..record import Recorder
from ..renderings import Transient
from ..request_log import RequestLogger
from ..services import Services, history_cache
from ..shadow.runner import Shadows
from ..store import make_store
from ..summarizer import Summarizer
from ..tracing import Tracing, failed, traced
from ..upstream import RoutedUpstream, uses_litellm
from . import admin, admin_keys, admin_memory, admin_shadow, endpoints

log = logging.getLogger("ctxproxy")


def _render(
    services: Services | None, wire: Wire | None, exc: Exception, path: str, reported: list[tuple[str, str]]
) -> RawResponse:
    """The error answer: in the client API's shape (`wire`; OpenAI's for paths of no API), with
    the conversation headers once the request's conversation is known (`chat.handle` sets them
    right after identifying: `Incoming.reported`)."""
    if isinstance(exc, StoreError):
        log.error("store failure on %s: %s", path, exc)
        exc = StoreUnavailable("The proxy's store is unavailable; retry shortly.")
    elif not isinstance(exc, ProxyError):
        log.exception("unexpected error on %s", path, exc_info=exc)
        exc = ProxyError("The proxy failed unexpectedly; the error was logged. Retry the request.")
    response = error_response(exc, wire)
    if services is not None:  # a message quoting a client's value never quotes an operator secret
        response.body = services.keys.redact(response.body)
    response.headers.extend(reported)
    return response


async def _starlette_error(request: Request, exc: Exception) -> RawResponse:
    path = request.url.path
    if isinstance(exc, HTTPException):
        if exc.status_code == 404:
            exc = NotFound(f"Unknown path {path}.")
        elif exc.status_code == 405:
            exc = _not_allowed(request.method, path)
        else:
            error = ProxyError(str(exc.detail))
            error.status = exc.status_code
            exc = error
    return _render(getattr(request.app.state, "ctx", None), wire_for_path(path), exc, path, [])


def _not_allowed(method: str, path: str) -> BadRequest:
    not_allowed = BadRequest(f"Method {method} is not allowed on {path}.")
    not_allowed.status = 405
    return not_allowed


class ProxyApp:
    """The ASGI app: model calls straight to `chat.handle`, everything else to starlette
    (`site`, which also runs the lifespan and so holds the services in `state.ctx`)."""

    def __init__(self, site: Starlette, tracing: Tracing | None = None) -> None:
        self.site = site
        self.tracing = tracing
        """OpenTelemetry's request spans (`proxy/tracing.py`; None: off)"""
        self.model_paths: dict[str, Wire] = {path: wire for wire in WIRES for path in wire.paths}
        """The wires' fixed model paths (a wire may serve more: `Wire.target`, `wire_for_request`)."""

    @property
    def state(self) -> State:
        return self.site.state

    @property
    def routes(self) -> list[BaseRoute]:
        """starlette's routes (the model paths are the wires' own, `wire_for_request`, POST only)."""
        return self.site.routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = query_of(scope) if scope["type"] == "http" else None
        found = wire_for_request(scope["path"], query) if query is not None else None
        if found is None:
            await self.site(scope, receive, send)
            return
        wire, target = found
        services: Services = self.site.state.ctx
        request = Incoming(scope, receive, query)
        with traced(self.tracing, wire.provider):  # the relayed stream and its record included
            try:
                if scope["method"] != "POST":
                    raise _not_allowed(scope["method"], scope["path"])
                response = await handle(services, request, wire, target)
            except Exception as exc:
                failed(exc)
                response = _render(services, wire, exc, scope["path"], request.reported)
            await response(scope, receive, send)


def create_app(config: Config, env: dict[str, str] | None = None, config_path: str | None = None) -> ProxyApp:
    """The app for `config` (`config_path`: the file it was read from, shown in commands)."""
    keys = resolve_keys(config, env)
    redact_access_log()  # an API may take the caller's key in the query string
    tracing = Tracing.from_env()

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
        for line in projector.windows.configure(config):
            log.info("budgets: %s", line)
        metrics = Metrics()
        admission = Admission(store, config, metrics)
        requests = RequestLogger(config.request_log, keys)
        recorder = Recorder(store, metrics, catalog, config.routes, requests, admission)
        compactor = Compactor(store, Summarizer(upstream, keys), projector, recorder, config.caches.shared_prompts_mb)
        compactor.lease_ttl = config.compaction_lease_seconds
        salt = await store.tenant_salt()
        services = Services(
            config,
            keys,
            store,
            upstream,
            projector,
            compactor,
            recorder,
            metrics,
            history_cache(config.caches, Transient.of(config.transient_parts, config.transient_max_chars)),
            salt,
            Shadows(config, store, upstream, recorder, projector, metrics),
            admission,
            config_path=config_path,
        )
        app.state.ctx = services
        lag = asyncio.create_task(loop_lag.sample_forever(metrics), name="loop-lag")
        purger = None
        if retention.enabled(config.retention):
            purger = asyncio.create_task(retention.run_forever(store, config.retention), name="retention")
        try:
            yield
        finally:
            for task in (lag, purger):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            # shadow calls in flight are billed too: recorded before the store closes
            await services.shadows.drain(timeout=max(10.0, config.server.shutdown_grace))
            # summarizer calls in flight are billed: give them the shutdown grace to answer and be recorded
            await compactor.drain(timeout=max(10.0, config.server.shutdown_grace))
            await upstream.close()
            await store.close()
            if tracing is not None:
                await tracing.close()

    routes = [
        Route("/v1/models", endpoints.list_models, methods=["GET"]),
        *(Route(path, endpoints.embeddings, methods=["POST"]) for path in endpoints.EMBEDDINGS_PATHS),
        *(Route(path, endpoints.count_tokens, methods=["POST"]) for wire in WIRES for path in wire.count_paths),
        Route("/", endpoints.root, methods=["GET", "HEAD"]),
        Route("/healthz", endpoints.healthz, methods=["GET"]),
        Route("/metrics", endpoints.metrics, methods=["GET"]),
        *admin.routes,
        *admin_memory.routes,
        *admin_shadow.routes,
        *admin_keys.routes,
        *ui.routes,  # the inspector, /ui/ (proxy/ui/)
    ]
    # starlette types handlers as returning its Response; ours return plain ASGI responses
    handlers: dict[Any, Any] = {
        ProxyError: _starlette_error,
        HTTPException: _starlette_error,
        Exception: _starlette_error,
    }
    return ProxyApp(Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers), tracing)
