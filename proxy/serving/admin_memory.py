"""The admin API of long-term memory: list, search, get, create, edit, approve and delete memories.

Behind the admin token like the rest of /admin. A memory is named by its id (`m_...`); with
`?tenant=` only that tenant's. Lists page like the other admin lists (`limit`, `cursor`,
`has_more`, `next_cursor`). An edit or approval is a compare-and-set on the record as read: a
memory that changed meanwhile (the model confirmed, updated or forgot it) answers 409 and the
operator reads it again. A delete leaves nothing in the store; the next request's injection
block no longer lists it. Deleting a conversation (`DELETE /admin/conversations/{id}`) keeps its
memories unless `?memories=true` deletes them too (seed 000: deleting a memory and deleting a
conversation are separate actions).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from .. import codec
from ..asgi import RawResponse, json_response
from ..errors import BadRequest, Conflict, NotFound
from ..memory.actions import MAX_TEXT_CHARS, approve
from ..memory.scopes import normalized
from ..services import Services
from ..store.memories import CURRENT, STATUSES, Memory, MemoryQuery, new_memory_id
from .admin import int_param, state_of


async def list_memories(request: Request) -> RawResponse:
    """Memories, most recently updated first: `tenant`, `scope`, `status`, `q` (a case-insensitive
    substring of the text), `conversation` (the one they came from), `limit`, `cursor`."""
    state = state_of(request)
    params = request.query_params
    status = params.get("status") or None
    if status is not None and status not in STATUSES:
        raise BadRequest(f"Query parameter 'status' must be one of {', '.join(STATUSES)}.", param="status")
    query = MemoryQuery(
        tenant=params.get("tenant") or None,
        scope=params.get("scope") or None,
        status=status,
        text=params.get("q") or None,
        conversation_id=params.get("conversation") or None,
    )
    limit = int_param(request, "limit", 50, 1, 1000)
    offset = int_param(request, "cursor", 0, 0, 1 << 40)
    rows = await state.store.list_memories(query, limit + 1, offset)
    more = len(rows) > limit
    return json_response(
        {
            "data": [m.to_dict() for m in rows[:limit]],
            "has_more": more,
            "next_cursor": str(offset + limit) if more else None,
        }
    )


async def _memory_or_404(state: Services, request: Request) -> Memory:
    memory_id = request.path_params["id"]
    tenant = request.query_params.get("tenant") or None
    memory = await state.store.get_memory(memory_id)
    if memory is None or tenant not in (None, memory.tenant):
        where = f" for tenant {tenant!r}" if tenant else ""
        raise NotFound(f"No memory {memory_id!r}{where}.", param="id")
    return memory


async def get_memory(request: Request) -> RawResponse:
    state = state_of(request)
    return json_response((await _memory_or_404(state, request)).to_dict())


async def read_json(request: Request) -> dict[str, Any]:
    try:
        body = codec.loads(await request.body() or b"{}")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    return body


def _text(body: dict[str, Any]) -> str:
    text = body.get("text")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
        raise BadRequest(f"'text' must be a non-empty string of at most {MAX_TEXT_CHARS} characters.", param="text")
    return text.strip()


async def create_memory(request: Request) -> RawResponse:
    """An operator's memory: `{"tenant", "scope", "text"}`, active at once (writer `operator`)."""
    state = state_of(request)
    body = await read_json(request)
    tenant, scope = body.get("tenant"), body.get("scope")
    if not isinstance(tenant, str) or not tenant:
        raise BadRequest("'tenant' must be a tenant name.", param="tenant")
    if not isinstance(scope, str) or not (scope == "tenant" or scope.startswith(("project:", "user:"))):
        raise BadRequest("'scope' must be 'tenant', 'project:<key>' or 'user:<client name>'.", param="scope")
    kind, _, key = scope.partition(":")
    scope = f"{kind}:{normalized(key)}" if key else scope
    now = time.time()
    memory = Memory(
        id=new_memory_id(tenant),
        tenant=tenant,
        scope=scope,
        text=_text(body),
        status="active",
        writer="operator",
        source={"seen_in": "operator"},
        created_at=now,
        updated_at=now,
        confirmed_at=now,
        confirmed_times=(now,),
        listed_from=now,
    )
    await state.store.save_memory(memory)
    return json_response(memory.to_dict(), status=201)


async def edit_memory(request: Request) -> RawResponse:
    """`{"text": ...}`: the operator's correction, in place (writer `operator`; the provenance of
    the original stays in `source`, with `edited_at`)."""
    state = state_of(request)
    memory = await _memory_or_404(state, request)
    body = await read_json(request)
    if memory.status not in CURRENT:
        raise Conflict(f"Memory {memory.id} is {memory.status}; only current memories are edited.", code="memory_state")
    now = time.time()
    edited = dataclasses.replace(
        memory, text=_text(body), writer="operator", updated_at=now, source={**memory.source, "edited_at": now}
    )
    if not await state.store.replace_memory(edited, memory.updated_at):
        raise Conflict(f"Memory {memory.id} changed meanwhile; read it again.", code="memory_changed")
    return json_response(edited.to_dict())


async def approve_memory(request: Request) -> RawResponse:
    """A pending (`write: confirm`) or unconfirmed memory becomes active from now on."""
    state = state_of(request)
    memory = await _memory_or_404(state, request)
    if memory.status not in ("pending", "unconfirmed"):
        raise Conflict(f"Memory {memory.id} is {memory.status}, not pending or unconfirmed.", code="memory_state")
    approved = await approve(state.store, memory, time.time())
    if approved is None:
        raise Conflict(f"Memory {memory.id} changed meanwhile; read it again.", code="memory_changed")
    return json_response(approved.to_dict())


async def delete_memory(request: Request) -> RawResponse:
    state = state_of(request)
    memory = await _memory_or_404(state, request)
    if not await state.store.delete_memory(memory.id):
        raise NotFound(f"No memory {memory.id!r}.", param="id")
    return json_response({"deleted": memory.id})


routes = [
    Route("/admin/memories", list_memories, methods=["GET"]),
    Route("/admin/memories", create_memory, methods=["POST"]),
    Route("/admin/memories/{id}", get_memory, methods=["GET"]),
    Route("/admin/memories/{id}", edit_memory, methods=["PATCH"]),
    Route("/admin/memories/{id}", delete_memory, methods=["DELETE"]),
    Route("/admin/memories/{id}/approve", approve_memory, methods=["POST"]),
]
