"""The admin API: inspect and delete conversations (long-term memories: `admin_memory.py`). Off
unless `admin_token_env` names a set variable.

The admin token is separate from client keys and upstream keys and compared in constant time.
Without a configured token every /admin path answers 404, as if it did not exist.

A conversation is named by its internal id or by the client's own `X-Conversation-Id`, within
the `tenant` query parameter or alone when only one tenant has a conversation of that id (409
listing the tenants when several do). Every list says whether more pages exist: `has_more`, and
the cursor parameter of the next page (`next_cursor`, plus the older names `next_before` /
`next_after`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from policies.base import KNOWN_ROLES
from policies.search import Hit, parse_query, search

from ..asgi import RawResponse, json_response, require_token
from ..errors import BadRequest, Conflict, NotFound
from ..ledger import GROUP_BY, summarize
from ..projector import Asked
from ..protocols import DEFAULT, wire_named
from ..services import Services
from ..store.base import Conversation, UsageQuery


def state_of(request: Request) -> Services:
    state: Services = request.app.state.ctx
    variable = state.config.admin_token_env
    setting = (
        f"{variable} in the proxy's environment" if variable else "admin_token_env in the config, and its variable"
    )
    require_token(request, state.keys.admin_token, "the admin API", setting, "invalid_admin_token")
    return state


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"Query parameter {name!r} must be an integer, got {raw!r}.", param=name) from None
    if not low <= value <= high:
        raise BadRequest(f"Query parameter {name!r} must be between {low} and {high}.", param=name)
    return value


async def _conversation_or_404(state: Services, request: Request) -> Conversation:
    """The conversation the path names: an internal id, or the client's own id (see the module
    docstring); with `tenant`, only that tenant's."""
    ref = request.path_params["id"]
    tenant = request.query_params.get("tenant") or None
    conversation = await state.store.get_conversation(ref)
    if conversation is not None and tenant in (None, conversation.tenant):
        return conversation
    found = [c for c in await state.store.conversations_with_external_id(ref) if tenant in (None, c.tenant)]
    if len(found) == 1:
        return found[0]
    if found:
        tenants = ", ".join(c.tenant for c in found)
        raise Conflict(
            f"{len(found)} tenants have a conversation {ref!r}: {tenants}. Add ?tenant=<one of them>.", param="tenant"
        )
    where = f" for tenant {tenant!r}" if tenant else ""
    raise NotFound(f"No conversation {ref!r}{where}.", param="id")


def _page(data: list[dict[str, Any]], limit: int, cursor: Any) -> dict[str, Any]:
    """A page of at most `limit` rows out of `data` (fetched with one extra row to know)."""
    more = len(data) > limit
    return {"data": data[:limit], "has_more": more, "next_cursor": cursor(data[limit - 1]) if more else None}


async def list_conversations(request: Request) -> RawResponse:
    state = state_of(request)
    limit = int_param(request, "limit", 50, 1, 1000)
    before_raw = request.query_params.get("before") or request.query_params.get("cursor")
    try:
        before = float(before_raw) if before_raw is not None else None
    except ValueError:
        raise BadRequest("Query parameter 'before' must be a timestamp.", param="before") from None
    rows = await state.store.list_conversations(limit + 1, before)
    page = _page([c.to_dict() for c in rows], limit, lambda row: str(row["updated_at"]))
    return json_response({**page, "next_before": page["data"][-1]["updated_at"] if page["has_more"] else None})


async def get_conversation(request: Request) -> RawResponse:
    state = state_of(request)
    conversation = await _conversation_or_404(state, request)
    branches = await state.store.list_branches(conversation.id)
    return json_response({**conversation.to_dict(), "branches": [b.to_dict() for b in branches]})


async def list_events(request: Request) -> RawResponse:
    state = state_of(request)
    conversation = await _conversation_or_404(state, request)
    branch_id = await _branch_or_default(state, request, conversation.id)
    after = int_param(request, "after", int_param(request, "cursor", 0, 0, 1 << 62), 0, 1 << 62)
    limit = int_param(request, "limit", 100, 1, 1000)
    events = await state.store.lineage_events(branch_id, after, limit + 1)
    page = _page([e.to_dict() for e in events], limit, lambda row: str(row["seq"]))
    next_after = page["data"][-1]["seq"] if page["has_more"] else None
    return json_response({"conversation_id": conversation.id, "branch_id": branch_id, **page, "next_after": next_after})


SEARCH_PAGE_CHARS = 32_000
"""The excerpts of one search page together stay under this; the rest is on the next page."""
SEARCH_EXCERPT_CHARS = 300


async def search_events(request: Request) -> RawResponse:
    """Search a branch's whole stored history (trimmed and summarized parts included) for people:
    `q` (words and "quoted phrases", case-insensitive, all must match), `role`, `tool`, `branch`,
    `limit`, `cursor`. Hits oldest first; `next_cursor` is null on the last page."""
    state = state_of(request)
    conversation = await _conversation_or_404(state, request)
    params = request.query_params
    try:
        query = parse_query(params.get("q", ""))
    except ValueError as exc:
        raise BadRequest(str(exc), param="q") from None
    role = params.get("role") or None
    if role is not None and role not in KNOWN_ROLES:
        raise BadRequest(f"Query parameter 'role' must be one of {', '.join(KNOWN_ROLES)}, got {role!r}.", param="role")
    branch_id = await _branch_or_default(state, request, conversation.id)
    limit = int_param(request, "limit", 20, 1, 100)
    cursor = int_param(request, "cursor", 0, 0, 1 << 62)
    events = await state.store.lineage_events(branch_id, cursor, 1 << 30)
    hits = search(events, query, role=role, tool=params.get("tool") or None, excerpt_chars=SEARCH_EXCERPT_CHARS)
    page: list[Hit] = []
    spent = 0
    for hit in hits[:limit]:
        spent += len(hit.excerpt)
        if page and spent > SEARCH_PAGE_CHARS:
            break
        page.append(hit)
    more = len(page) < len(hits)
    return json_response(
        {
            "conversation_id": conversation.id,
            "branch_id": branch_id,
            "query": list(query.terms),
            "data": [hit.to_dict() for hit in page],
            "has_more": more,
            "next_cursor": str(page[-1].seq) if more else None,
        }
    )


async def list_calls(request: Request) -> RawResponse:
    state = state_of(request)
    conversation = await _conversation_or_404(state, request)
    limit = int_param(request, "limit", 100, 1, 1000)
    offset = int_param(request, "offset", int_param(request, "cursor", 0, 0, 1 << 62), 0, 1 << 62)
    calls = await state.store.list_calls(conversation.id, limit + 1, offset)
    page = _page([c.to_dict() for c in calls], limit, lambda row: str(offset + limit))
    return json_response({"conversation_id": conversation.id, **page})


async def _branch_or_default(state: Services, request: Request, conversation_id: str) -> str:
    branches = await state.store.list_branches(conversation_id)
    branch_id = request.query_params.get("branch")
    if branch_id is None:
        return max(branches, key=lambda b: (b.updated_at, b.created_at)).id
    if branch_id not in {b.id for b in branches}:
        raise NotFound(f"Conversation {conversation_id!r} has no branch {branch_id!r}.", param="branch")
    return branch_id


async def get_projection(request: Request) -> RawResponse:
    """Exactly what the next call on this branch would send for the stored history, and why:
    the first thing to look at when an agent seems to have forgotten something."""
    state = state_of(request)
    conversation = await _conversation_or_404(state, request)
    branch_id = await _branch_or_default(state, request, conversation.id)
    last = await state.store.last_call(branch_id, "main")
    if last is None or last.model is None:
        raise NotFound(f"Branch {branch_id!r} has no calls yet, so there is no model or route to project for.")
    route = next((r for r in state.config.routes if r.name == last.route), None)
    route = route or state.config.route_for((wire_named(last.wire) or DEFAULT).path, last.model)
    if route is None:
        raise NotFound(f"No configured route serves model {last.model!r} any more.")
    events = await state.store.lineage_events(branch_id, 0, 1 << 30)
    prefix_blob = await state.store.get_blob(last.system_hash) if last.system_hash else None
    tools_blob = await state.store.get_blob(last.tools_hash) if last.tools_hash else None
    body: dict[str, Any] = {"model": last.model}
    if tools_blob:
        body["tools"] = json.loads(tools_blob)
    checkpoint = await state.store.active_checkpoint(branch_id)
    policy = state.config.policy_for(route)
    counter = state.projector.counter(last.model)
    items = state.projector.items([e.message for e in events], [e.chain_hash for e in events], counter)
    prefix = json.loads(prefix_blob) if prefix_blob else []
    asked = Asked(policy, last.model, body, prefix, items, branch_id, route=route)
    projection = state.projector.project_request(asked, checkpoint).projection
    return json_response(
        {
            "conversation_id": conversation.id,
            "branch_id": branch_id,
            "route": route.name,
            "model": last.model,
            "checkpoint": checkpoint.to_dict() if checkpoint else None,
            "messages": projection.messages,
            "record": projection.record.to_dict(),
        }
    )


async def list_checkpoints(request: Request) -> RawResponse:
    state = state_of(request)
    conversation = await _conversation_or_404(state, request)
    checkpoints = await state.store.list_checkpoints(conversation.id)
    return json_response(
        {"conversation_id": conversation.id, "data": [c.to_dict() for c in checkpoints], "has_more": False}
    )


async def delete_conversation(request: Request) -> RawResponse:
    """Delete a conversation; with `?memories=true`, the long-term memories that came from it too
    (by default they stay: deleting a memory and deleting a conversation are separate actions)."""
    state = state_of(request)
    conversation = await _conversation_or_404(state, request)
    memories = request.query_params.get("memories", "false")
    if memories not in ("true", "false"):
        raise BadRequest("Query parameter 'memories' must be true or false.", param="memories")
    if not await state.store.delete_conversation(conversation.id):
        raise NotFound(f"No conversation {request.path_params['id']!r}.", param="id")
    out: dict[str, Any] = {"deleted": conversation.id}
    if memories == "true":
        out["memories_deleted"] = await state.store.delete_memories_from(conversation.tenant, conversation.id)
    return json_response(out)


def time_param(request: Request, name: str) -> float | None:
    """A time: Unix seconds (`1764800000`) or an ISO 8601 date or time (`2026-12-04`,
    `2026-12-04T21:00:00Z`, `2026-12-04T22:00+01:00`; without an offset, UTC)."""
    raw = request.query_params.get(name)
    return None if raw is None else parse_time(raw, f"Query parameter {name!r}", name)


def parse_time(raw: str | float, what: str, param: str) -> float:
    """`raw` as Unix seconds: a number, or an ISO 8601 date or time (without an offset, UTC)."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    try:
        return float(raw)
    except (TypeError, ValueError):
        pass
    try:
        when = datetime.fromisoformat(str(raw))
    except ValueError:
        raise BadRequest(
            f"{what} must be Unix seconds or an ISO 8601 date or time (2026-12-04, 2026-12-04T21:00:00Z), got {raw!r}.",
            param=param,
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


async def usage(request: Request) -> RawResponse:
    """The ledger: token, cost and call totals over the calls matching the filters
    (`conversation`, `route`, `tenant`, `client`: a client key's name or API key id, `since`,
    `until`), per `group_by` (route, conversation, model, tenant, client, day) when asked.
    Unknown values are not summed as 0: see `proxy/ledger.py`."""
    state = state_of(request)
    params = request.query_params
    group_by = params.get("group_by") or None
    if group_by is not None and group_by not in GROUP_BY:
        raise BadRequest(
            f"Query parameter 'group_by' must be one of {', '.join(GROUP_BY)}, got {group_by!r}.", param="group_by"
        )
    query = UsageQuery(
        conversation_id=params.get("conversation") or None,
        route=params.get("route") or None,
        tenant=params.get("tenant") or None,
        client=params.get("client") or None,
        since=time_param(request, "since"),
        until=time_param(request, "until"),
        group_by=group_by,
    )
    cells = await state.store.usage_cells(query)
    return json_response(summarize(cells, query))


async def rejected_tools(request: Request) -> RawResponse:
    """The routes and models not offered the recall tool now: why, since when, for how long."""
    state = state_of(request)
    return json_response({"data": state.recalls_rejected.describe()})


async def lift_rejected_tools(request: Request) -> RawResponse:
    """Offer the recall tool again everywhere (a mark comes back if the upstream rejects it again)."""
    state = state_of(request)
    return json_response({"lifted": state.recalls_rejected.forget()})


async def estimates(request: Request) -> RawResponse:
    """What this process has learned of each route and model's token counting (`proxy/estimate.py`)."""
    state = state_of(request)
    return json_response({"data": state.projector.estimator.describe()})


routes = [
    Route("/admin/usage", usage, methods=["GET"]),
    Route("/admin/estimates", estimates, methods=["GET"]),
    Route("/admin/recall/rejected", rejected_tools, methods=["GET"]),
    Route("/admin/recall/rejected", lift_rejected_tools, methods=["DELETE"]),
    Route("/admin/conversations", list_conversations, methods=["GET"]),
    Route("/admin/conversations/{id}", get_conversation, methods=["GET"]),
    Route("/admin/conversations/{id}", delete_conversation, methods=["DELETE"]),
    Route("/admin/conversations/{id}/events", list_events, methods=["GET"]),
    Route("/admin/conversations/{id}/calls", list_calls, methods=["GET"]),
    Route("/admin/conversations/{id}/search", search_events, methods=["GET"]),
    Route("/admin/conversations/{id}/projection", get_projection, methods=["GET"]),
    Route("/admin/conversations/{id}/checkpoints", list_checkpoints, methods=["GET"]),
]
