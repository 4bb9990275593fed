"""HTTP endpoints beside the chat pipeline: relayed or answered here, never recorded."""

from __future__ import annotations

from starlette.requests import Request

from .errors import NotFound, ProxyError
from .http import RawResponse, read_body
from .protocols.anthropic import WIRE as ANTHROPIC
from .protocols.anthropic.errors import error_bytes as anthropic_error_bytes
from .protocols.anthropic.validate import parse_body, require_model
from .upstream.http import upstream_request_headers


async def count_tokens(request: Request) -> RawResponse:
    """`POST /v1/messages/count_tokens`: relayed to the upstream of the route serving the body's
    model, unchanged and unrecorded; errors in Anthropic's shape."""
    try:
        state = request.app.state.ctx
        config = state.config
        raw = await read_body(request, config.limits)
        model = require_model(parse_body(raw))
        route = config.route_for(ANTHROPIC.path, model)
        if route is None:
            raise NotFound(f"No route serves model {model!r} on {ANTHROPIC.path}.", param="model")
        key = state.upstream_key(route)
        headers = upstream_request_headers(
            request.headers,
            ANTHROPIC.auth_headers(key) if key else None,
            frozenset({config.conversation_header.lower()}),
        )
        upstream = await state.upstream.send(route, "POST", ANTHROPIC.upstream_path + "/count_tokens", raw, headers)
        try:
            data = await upstream.read()
        finally:
            upstream.close()
        return RawResponse(data, upstream.status, upstream.headers)
    except ProxyError as exc:
        return RawResponse(anthropic_error_bytes(exc), exc.status, [("content-type", "application/json")])
