"""The admin API of client keys, budgets and rate limits: `POST/GET/DELETE /admin/keys`,
`GET /admin/tenants`. Behind the admin token like the rest of /admin.

`POST /admin/keys` makes a key (`{"name", "tenant", "routes"?, "expires_at"?, "quota"?}`) and
answers it once, in `key`; the store keeps only its digest (`proxy/keyring.py`). `GET` lists the
keys of the config (`source: config`, managed in the file) beside the ones made here (`source:
api`), each with its limits and what the current periods have used. `DELETE /admin/keys/{id}`
revokes a key at once on every replica; a configured key is removed from the config instead.
"""

from __future__ import annotations

import re
import time
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.routing import Route

from .. import keyring
from ..asgi import RawResponse, json_response
from ..errors import BadRequest, Conflict, NotFound
from ..quota import Quota
from ..services import Services
from ..standing import describe_keys, describe_tenants, shown_key
from ..store.access import ApiKey
from .admin import parse_time, state_of
from .admin_memory import read_json

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _name(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not _NAME.match(value):
        raise BadRequest(
            f"'{field}' must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.", param=field
        )
    return value


def _routes(state: Services, body: dict[str, Any]) -> tuple[str, ...] | None:
    routes = body.get("routes")
    if routes is None:
        return None
    known = [r.name for r in state.config.routes]
    if not isinstance(routes, list) or not routes or not all(isinstance(r, str) for r in routes):
        raise BadRequest("'routes' must be a non-empty list of route names (omit it for every route).", param="routes")
    unknown = sorted(set(routes) - set(known))
    if unknown:
        raise BadRequest(f"Unknown route(s) {', '.join(unknown)}; the routes: {', '.join(known)}.", param="routes")
    return tuple(routes)


def _quota(body: dict[str, Any]) -> Quota:
    raw = body.get("quota") or {}
    try:
        return Quota.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'quota'}: {e['msg']}" for e in exc.errors())
        raise BadRequest(
            f"'quota' is not valid: {problems}. Fields: {', '.join(Quota.model_fields)}.", param="quota"
        ) from None


async def create_key(request: Request) -> RawResponse:
    state = state_of(request)
    body = await read_json(request)
    tenant = _name(body, "tenant")
    if tenant == "anonymous" or tenant.startswith("t_"):
        raise BadRequest("'tenant' must not be 'anonymous' or start with 't_' (key fingerprints).", param="tenant")
    expires = body.get("expires_at")
    expires_at = None if expires is None else parse_time(expires, "'expires_at'", "expires_at")
    if expires_at is not None and expires_at <= state.clock():
        raise BadRequest("'expires_at' is in the past.", param="expires_at")
    secret = keyring.new_secret()
    key = ApiKey(
        id=keyring.new_key_id(),
        digest=keyring.digest_of(state.salt, secret),
        name=_name(body, "name"),
        tenant=tenant,
        routes=_routes(state, body),
        limits=_quota(body).model_dump(exclude_none=True),
        hint=secret[-4:],
        created_at=time.time(),
        expires_at=expires_at,
    )
    if not await state.store.save_api_key(key):
        raise Conflict("A key with this id or digest exists already; make it again.", code="key_exists")
    shown = await shown_key(state, key)
    return json_response({**shown, "key": secret}, status=201)


async def list_keys(request: Request) -> RawResponse:
    """The configured clients' keys, then the keys made through this API (oldest first); `tenant` filters."""
    state = state_of(request)
    return json_response({"data": await describe_keys(state, request.query_params.get("tenant") or None)})


async def delete_key(request: Request) -> RawResponse:
    state = state_of(request)
    key_id = request.path_params["id"]
    if any(c.name == key_id for c in state.config.clients):
        raise Conflict(
            f"Client {key_id!r} is configured in the config file (clients:); remove it there and restart.",
            code="configured_key",
        )
    if not await state.store.delete_api_key(key_id):
        raise NotFound(f"No client key {key_id!r}.", param="id")
    return json_response({"deleted": key_id})


async def list_tenants(request: Request) -> RawResponse:
    """The tenants with budgets or rate limits (`tenants:` in the config) and their standing."""
    return json_response({"data": await describe_tenants(state_of(request))})


routes = [
    Route("/admin/keys", list_keys, methods=["GET"]),
    Route("/admin/keys", create_key, methods=["POST"]),
    Route("/admin/keys/{id}", delete_key, methods=["DELETE"]),
    Route("/admin/tenants", list_tenants, methods=["GET"]),
]
