"""Authenticate (with DESIGN step 1, route): who is calling, and so which tenant the request is.

Problem: a route with the operator's key (`api_key_env`) lets whoever reaches the proxy spend
that key, and clients without a key of their own would share one anonymous tenant.

Rules, per request, once its route is known:
* A configured client key (`clients:`, wherever the called API carries a key: `Wire.client_key`) authenticates
  the request as that client: its tenant is the client's configured tenant, a route outside its
  `routes` is a 403, and the key never goes upstream (the route's own key does, or none).
* A key made through the admin API (`proxy/keyring.py`) does the same, with the tenant, routes
  and quota it was made with; once expired it is a 401, once deleted it is unknown.
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

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import identify, keyring
from .config import Config, Route
from .credentials import Keys
from .errors import Forbidden, Unauthorized
from .quota import Quota
from .store.access import ApiKey
from .store.public import iso_utc

if TYPE_CHECKING:
    from .services import Services


@dataclass(frozen=True)
class Caller:
    tenant: str
    client: str | None
    """The configured client's name (an API key's `name`); None when the caller is not one (its
    key, if any, is its own)."""
    key: str | None = None
    """The client key's id in the ledger and its counters: a configured client's name, an API
    key's id (`key_...`)."""
    quota: Quota | None = None
    """The client key's own budgets and rate limits."""

    @property
    def account(self) -> tuple[str, str, Quota] | None:
        """The client key's id, name and quota when it has limits (`Admission.admit`)."""
        if self.key is None or self.client is None or self.quota is None:
            return None
        return self.key, self.client, self.quota

    @property
    def forwards_key(self) -> bool:
        """Whether the request's own credentials may go upstream (never a client key)."""
        return self.client is None


async def caller_of(services: Services, route: Route, presented: str | None) -> Caller:
    """`authenticate`, with the key the request presents (`Wire.client_key`) looked up among the
    keys made through the admin API first."""
    found = None
    if presented is not None and presented.startswith(keyring.PREFIX) and services.keys.client_for(presented) is None:
        found = await keyring.issued(services.store, services.salt, presented)
        if found is None:
            raise Unauthorized("This client key is not known to the proxy: it was revoked, or is mistyped.")
    return authenticate(services.keys, services.config, route, presented, services.salt, (found, services.clock()))


def authenticate(
    keys: Keys,
    config: Config,
    route: Route,
    presented: str | None,
    salt: bytes,
    issued: tuple[ApiKey | None, float] = (None, 0.0),
) -> Caller:
    """Who is calling with the key `presented` (the caller's own, as its API carries it:
    `Wire.client_key`); `issued` is the admin API's key it presents (None: none) and the time now."""
    client = keys.client_for(presented)
    if client is not None:
        _allowed(f"Client {client.name!r}", client.routes, route)
        return Caller(client.tenant_name, client.name, client.name, client.quota)
    api_key, now = issued
    if api_key is not None:
        if api_key.expires_at is not None and now >= api_key.expires_at:
            raise Unauthorized(
                f"Client key {api_key.name!r} expired at {iso_utc(api_key.expires_at)}; ask the proxy's operator "
                "for a new one.",
                code="expired_api_key",
            )
        _allowed(f"Client key {api_key.name!r}", api_key.routes, route)
        return Caller(api_key.tenant, api_key.name, api_key.id, Quota(**api_key.limits))
    if route.upstream.api_key_env and not config.open_access:
        raise Unauthorized(
            "This proxy needs a client key: send 'Authorization: Bearer <key>' (or x-api-key) with a key "
            "its operator configured under clients:."
        )
    if presented is None and config.clients:
        raise Unauthorized("This proxy authenticates its clients: send 'Authorization: Bearer <key>' (or x-api-key).")
    return Caller(identify.tenant_of(presented, salt), None)


def _allowed(who: str, routes: tuple[str, ...] | None, route: Route) -> None:
    if routes is not None and route.name not in routes:
        raise Forbidden(
            f"{who} may not use route {route.name!r}; its routes: {', '.join(routes)}.",
            param="model",
            code="route_not_allowed",
        )
