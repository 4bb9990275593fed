"""The admin API: inspect and delete conversations. Off unless `admin_token_env` names a set variable.

The admin token is separate from client keys and upstream keys and compared in constant time.
Without a configured token every /admin path answers 404, as if it did not exist.
"""

from __future__ import annotations

import hmac
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from .errors import BadRequest, NotFound, Unauthorized
from .responses import RawResponse, json_response
from .state import AppState


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.ctx
    if not state.admin_token:
        raise NotFound(f"Unknown path {request.url.path}: the admin API is disabled (set admin_token_env).")
    given = request.headers.get("authorization", "")
    token = given[7:] if given.lower().startswith("bearer ") else ""
    if not hmac.compare_digest(token.encode(), state.admin_token.encode()):
        raise Unauthorized("The admin API needs 'Authorization: Bearer <admin token>'.", code="invalid_admin_token")
    return state


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
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


async def _conversation_or_404(state: AppState, conversation_id: str) -> Any:
    conversation = await state.store.get_conversation(conversation_id)
    if conversation is None:
        raise NotFound(f"No conversation {conversation_id!r}.", param="id")
    return conversation


async def list_conversations(request: Request) -> RawResponse:
    state = _state(request)
    limit = _int_param(request, "limit", 50, 1, 1000)
    before_raw = request.query_params.get("before")
    try:
        before = float(before_raw) if before_raw is not None else None
    except ValueError:
        raise BadRequest("Query parameter 'before' must be a timestamp.", param="before") from None
    rows = await state.store.list_conversations(limit, before)
    data = [c.to_dict() for c in rows]
    return json_response({"data": data, "next_before": data[-1]["updated_at"] if len(data) == limit else None})


async def get_conversation(request: Request) -> RawResponse:
    state = _state(request)
    conversation = await _conversation_or_404(state, request.path_params["id"])
    branches = await state.store.list_branches(conversation.id)
    return json_response({**conversation.to_dict(), "branches": [b.to_dict() for b in branches]})


async def list_events(request: Request) -> RawResponse:
    state = _state(request)
    conversation = await _conversation_or_404(state, request.path_params["id"])
    branches = await state.store.list_branches(conversation.id)
    branch_id = request.query_params.get("branch")
    if branch_id is None:
        branch_id = max(branches, key=lambda b: (b.updated_at, b.created_at)).id
    elif branch_id not in {b.id for b in branches}:
        raise NotFound(f"Conversation {conversation.id!r} has no branch {branch_id!r}.", param="branch")
    after = _int_param(request, "after", 0, 0, 1 << 62)
    limit = _int_param(request, "limit", 100, 1, 1000)
    events = await state.store.lineage_events(branch_id, after, limit)
    data = [e.to_dict() for e in events]
    return json_response(
        {"branch_id": branch_id, "data": data, "next_after": data[-1]["seq"] if len(data) == limit else None}
    )


async def list_calls(request: Request) -> RawResponse:
    state = _state(request)
    conversation = await _conversation_or_404(state, request.path_params["id"])
    limit = _int_param(request, "limit", 100, 1, 1000)
    offset = _int_param(request, "offset", 0, 0, 1 << 62)
    calls = await state.store.list_calls(conversation.id, limit, offset)
    return json_response({"data": [c.to_dict() for c in calls]})


async def delete_conversation(request: Request) -> RawResponse:
    state = _state(request)
    conversation_id = request.path_params["id"]
    if not await state.store.delete_conversation(conversation_id):
        raise NotFound(f"No conversation {conversation_id!r}.", param="id")
    return json_response({"deleted": conversation_id})


routes = [
    Route("/admin/conversations", list_conversations, methods=["GET"]),
    Route("/admin/conversations/{id}", get_conversation, methods=["GET"]),
    Route("/admin/conversations/{id}", delete_conversation, methods=["DELETE"]),
    Route("/admin/conversations/{id}/events", list_events, methods=["GET"]),
    Route("/admin/conversations/{id}/calls", list_calls, methods=["GET"]),
]
