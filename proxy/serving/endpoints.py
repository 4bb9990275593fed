"""The endpoints beside the model calls: the root hint, the model list, embeddings, the token
counts (Anthropic's count_tokens, the Responses API's input_tokens), health and metrics. None of
them is recorded; the model list and embeddings are the upstream's answers relayed unchanged, a
count is the projection's."""

from __future__ import annotations

from starlette.requests import Request

from .. import auth, codec, routing
from ..asgi import RawResponse, json_response, read_body, require_token
from ..config import Config, Route
from ..count import count
from ..errors import BadRequest
from ..metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ..protocols import CREDENTIAL_HEADERS, DEFAULT, WIRES, wire_for_path
from ..relay import relay_unchanged
from ..services import Services
from ..upstream.base import upstream_request_headers

SOURCE_HEADER = "X-Ctxproxy-Count"
"""Where a count came from: `carried` (the last bill plus the estimated change), `upstream` (its
own count of the projected body) or `estimated`."""


def _hint() -> str:
    """The model paths of the APIs served (one per wire the client calls for answers)."""
    paths = list(dict.fromkeys(wire.path for wire in WIRES if wire.purpose == "main"))
    listed = ", ".join(paths[:-1]) + " or " + paths[-1] if len(paths) > 1 else paths[0]
    return f"POST {listed} here; health: GET /healthz"


ROOT_HINT = {"service": "ctxproxy", "hint": _hint()}


async def root(request: Request) -> RawResponse:
    """`GET /` and `HEAD /`: a one-line hint, so a client probing the base URL (Claude Code does
    `HEAD /` at start) gets a 200 instead of a 404."""
    return json_response(ROOT_HINT)


async def healthz(request: Request) -> RawResponse:
    services: Services = request.app.state.ctx
    try:
        await services.store.ping()
    except Exception:
        return json_response({"status": "store unavailable"}, 503)
    return json_response({"status": "ok"})


async def metrics(request: Request) -> RawResponse:
    """Prometheus text format. Open unless `metrics_token_env` is configured: then a bearer token
    is required (and while that variable is unset the path answers 404, like the admin API)."""
    services: Services = request.app.state.ctx
    if services.config.metrics_token_env:
        name = f"${services.config.metrics_token_env}"
        require_token(request, services.keys.metrics_token, "/metrics", name, "invalid_metrics_token")
    return RawResponse(services.metrics.render(), 200, [("content-type", METRICS_CONTENT_TYPE)])


def _models_route(config: Config) -> Route | None:
    """The route whose upstream lists the models: the first OpenAI-compatible (not litellm) one
    that serves chat completions (the default wire's paths), whatever the model (`GET /v1/models`
    is OpenAI's path: a route limited to another API's path, such as Anthropic's, does not answer it)."""
    for route in config.routes:
        if not route.upstream.model and route.match.path in (None, *DEFAULT.paths):
            return route
    return None


async def list_models(request: Request) -> RawResponse:
    """The models of the OpenAI-compatible route serving chat completions (`_models_route`), as
    the client would list them directly; without one, the litellm routes' models."""
    services: Services = request.app.state.ctx
    route = _models_route(services.config)
    if route is None:
        await auth.caller_of(services, services.config.routes[0], DEFAULT.client_key(request.headers))
        data = [
            {"id": r.upstream.model, "object": "model", "created": 0, "owned_by": "litellm"}
            for r in services.config.routes
            if r.upstream.model
        ]
        return json_response({"object": "list", "data": data})
    caller = await auth.caller_of(services, route, DEFAULT.client_key(request.headers))
    key = services.upstream_key(route)
    drop = frozenset() if caller.forwards_key else CREDENTIAL_HEADERS
    headers = upstream_request_headers(request.headers, DEFAULT.auth_headers(key) if key else None, drop)
    return await relay_unchanged(services.keys, await services.upstream.send(route, "GET", "/models", None, headers))


EMBEDDINGS_PATHS = ("/v1/embeddings", "/embeddings")


async def embeddings(request: Request) -> RawResponse:
    """`POST /v1/embeddings`: relayed as sent to the OpenAI-compatible route that serves its model
    (routed, authenticated and admitted by the caller's limits as a model call; not recorded, so
    not charged to budgets: there is no conversation in it)."""
    services: Services = request.app.state.ctx
    config = services.config
    raw = await read_body(request.headers, request.receive, config.limits)
    try:
        body = codec.loads(raw)
    except codec.JsonRejected as exc:
        raise BadRequest(f"We could not parse the JSON body of your request ({exc}).") from None
    model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(model, str) or not model:
        raise BadRequest("you must provide a model parameter (a non-empty string)", param="model")
    route, _ = routing.route_for(config, EMBEDDINGS_PATHS[0], model)
    if route.upstream.model:
        raise BadRequest(
            f"Route {route.name!r} serves model {model!r} through litellm ({route.upstream.model}); embeddings are "
            "relayed to OpenAI-compatible upstreams (base_url) only.",
            param="model",
        )
    caller = await auth.caller_of(services, route, DEFAULT.client_key(request.headers))
    await services.admission.admit(caller.tenant, caller.account)  # its limits apply; it is not charged
    key = services.upstream_key(route)
    drop = frozenset({config.conversation_header.lower()}) | (
        frozenset() if caller.forwards_key else CREDENTIAL_HEADERS
    )
    headers = upstream_request_headers(request.headers, DEFAULT.auth_headers(key) if key else None, drop)
    return await relay_unchanged(
        services.keys, await services.upstream.send(route, "POST", "/embeddings", raw, headers)
    )


async def count_tokens(request: Request) -> RawResponse:
    """`POST /v1/messages/count_tokens`, `POST /v1/responses/input_tokens` and `POST
    /v1beta/models/{model}:countTokens`: the input tokens of what the proxy would send for the
    body (`proxy.count`), in the API's shape; errors in it too (the app's error boundary knows
    which API the path belongs to). Nothing is recorded."""
    services: Services = request.app.state.ctx
    wire = wire_for_path(request.url.path)
    assert wire is not None and wire.count_paths, request.url.path
    query = dict(request.query_params)
    target = wire.count_target(request.url.path, query)
    counted = await count(services, request.headers, request.receive, wire, (target, query))
    if counted.relayed is not None:
        return await relay_unchanged(services.keys, counted.relayed)
    assert counted.tokens is not None
    return json_response(wire.count_answer(counted.tokens), headers=[(SOURCE_HEADER, counted.source)])
