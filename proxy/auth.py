"""Authenticate (with DESIGN step 1, route): who is calling, and so which tenant the request is.

Problem: a route with the operator's key (`api_key_env`) lets whoever reaches the proxy spend
that key, and clients without a key of their own would share one anonymous tenant.

Rules, per request, once its route is known:
* A configured client key (`clients:`, any of the ways the APIs carry a key) authenticates
  the request as that client: its tenant is the client's configured tenant, a route outside its
  `routes` is a 403, and the key never goes upstream (the route's own key does, or none).
* Without one, a route with the operator's key answers 401 -- unless `open_access: true`.
* On a route that forwards the client's own key (no `api_key_env`) any key is accepted and the
  tenant is its salted fingerprint, as before; with clients configured (authentication on) a
  request carrying no key at all is a 401: there is no anonymous tenant then.
Every check runs before anything is stored or sent upstream; keys are compared in constant time
(`Keys.client_for`) and never appear in errors, logs or records.

Example: clients alice and bob, both `tenant: team-a`, share conversations (an implicit match or
`X-Conversation-Id` finds the other's); carol (`tenant: team-b`) gets a 404 for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import identify
from .asgi import client_api_key
from .config import Config, Route
from .credentials import Keys
from .errors import Forbidden, Unauthorized


@dataclass(frozen=True)
class Caller:
    tenant: str
    client: str | None
    """The configured client's name; None when the caller is not one (its key, if any, is its own)."""

    @property
    def forwards_key(self) -> bool:
        """Whether the request's own credentials may go upstream (never a client key)."""
        return self.client is None


def authenticate(keys: Keys, config: Config, route: Route, headers: Mapping[str, str], salt: bytes) -> Caller:
    presented = client_api_key(headers)
    client = keys.client_for(presented)
    if client is not None:
        if client.routes is not None and route.name not in client.routes:
            raise Forbidden(
                f"Client {client.name!r} may not use route {route.name!r}; its routes: {', '.join(client.routes)}.",
                param="model",
                code="route_not_allowed",
            )
        return Caller(client.tenant_name, client.name)
    if route.upstream.api_key_env and not config.open_access:
        raise Unauthorized(
            "This proxy needs a client key: send 'Authorization: Bearer <key>' (or x-api-key) with a key "
            "its operator configured under clients:."
        )
    if presented is None and config.clients:
        raise Unauthorized("This proxy authenticates its clients: send 'Authorization: Bearer <key>' (or x-api-key).")
    return Caller(identify.tenant_of(presented, salt), None)
