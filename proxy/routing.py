"""Route (DESIGN step 1): which configured route serves a request, and with which credentials.

A route is matched by path and model (glob), first match wins. The credentials sent upstream
are the route's own key in the wire's header when the route names one (`api_key_env`), else the
client's own key, forwarded as it came (a key the API takes in the query goes in the wire's own
header, `Wire.auth_headers`) -- never a configured client key (`proxy/auth.py` says who the caller
is); no request field or header can choose the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .auth import Caller
from .config import Config, Route
from .credentials import Keys
from .errors import NotFound, Unauthorized
from .policy_settings import Policy
from .protocols import CREDENTIAL_HEADERS
from .protocols.base import NO_QUERY, Wire
from .upstream.base import upstream_request_headers


def route_for(config: Config, path: str, model: str) -> tuple[Route, Policy]:
    route = config.route_for(path, model)
    if route is None:
        raise NotFound(
            f"No route serves model {model!r} on {path}. Configured routes: "
            + ", ".join(f"{r.name} (model {r.match.model})" for r in config.routes)
            + ".",
            param="model",
            code="model_not_found",
        )
    return route, config.policy_for(route)


def deferred(policy: Policy, wire: Wire, body: dict[str, Any]) -> bool:
    """Whether the request leaves its context to the provider (`provider_context: defer` and a
    `context_management` field): then it goes, and is counted, exactly as the client sent it."""
    return policy.provider_context == "defer" and wire.provider_managed(body)


def projectable(policy: Policy, wire: Wire, body: dict[str, Any]) -> bool:
    """Whether ctxproxy may project the request: its policy rewrites, its wire allows it for this
    body, and it is not `deferred`."""
    return policy.rewrite and wire.rewrite_allowed(body) and not deferred(policy, wire, body)


def upstream_headers(
    keys: Keys,
    wire: Wire,
    route: Route,
    client_headers: Mapping[str, str],
    drop: frozenset[str],
    caller: Caller,
    query: Mapping[str, str] = NO_QUERY,
) -> dict[str, str]:
    """The headers of the upstream request: the client's, minus hop-by-hop and our own, with the
    route's key in place of the client's credentials (in any wire's header) when the route has
    one; a configured client's key is dropped, never forwarded."""
    key = keys.upstream_key(route)
    if (
        key is None
        and route.upstream.model
        and (wire.client_key(client_headers, query) is None or not caller.forwards_key)
    ):
        raise Unauthorized(
            "This route forwards your own provider API key, and the request carries none (a client key "
            "of this proxy is not forwarded). Send 'Authorization: Bearer <key>'."
        )
    if key is None and not caller.forwards_key:
        drop = drop | CREDENTIAL_HEADERS
    headers = upstream_request_headers(client_headers, wire.auth_headers(key) if key else None, drop)
    if key is None and caller.forwards_key:
        headers.update(_from_query(wire, client_headers, query))
    return headers


def summary_auth(
    keys: Keys,
    wire: Wire,
    route: Route,
    client_headers: Mapping[str, str],
    caller: Caller,
    query: Mapping[str, str] = NO_QUERY,
) -> dict[str, str]:
    """Credentials for a summarizer call on the route's upstream: the route's key, else the
    client's own (held in memory for the job only, never stored), never a client key."""
    key = keys.upstream_key(route)
    if key is not None:
        return wire.auth_headers(key)
    if not caller.forwards_key:
        return {}
    sent = {k: v for k, v in client_headers.items() if k.lower() in CREDENTIAL_HEADERS}
    return {**sent, **_from_query(wire, client_headers, query)}


def _from_query(wire: Wire, client_headers: Mapping[str, str], query: Mapping[str, str]) -> dict[str, str]:
    """The caller's own key when it came only in the query (`Wire.credential_query`), in the
    wire's header: the query string is never forwarded."""
    if not query or wire.client_key(client_headers) is not None:
        return {}
    key = wire.client_key(client_headers, query)
    return wire.auth_headers(key) if key is not None else {}
