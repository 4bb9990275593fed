"""The inspector's long-term memory page: a tenant's and scope's memories, to see, edit, approve
and delete, each linking to the event it came from (docs/memory.md).

Filters (`tenant`, `scope`, `status`, `q`) and pages (`cursor`) are the admin API's; the forms
post with the CSRF proof like the conversation delete. An edit or approval of a memory that
changed meanwhile is refused (409) rather than overwriting what the model or another operator did.
"""

from __future__ import annotations

import dataclasses
import time

from starlette.requests import Request

from ..asgi import RawResponse
from ..errors import BadRequest, Conflict, NotFound
from ..memory.actions import MAX_TEXT_CHARS, approve
from ..store.memories import CURRENT, STATUSES, Memory, MemoryQuery
from . import access
from .access import SECURITY_HEADERS
from .guard import Ctx
from .html import csrf_field, esc, frame, link, query, respond, table, when

PAGE = 50


def _query(request: Request) -> MemoryQuery:
    params = request.query_params
    status = params.get("status") or None
    if status is not None and status not in STATUSES:
        raise BadRequest(f"Query parameter 'status' must be one of {', '.join(STATUSES)}.", param="status")
    return MemoryQuery(
        tenant=params.get("tenant") or None,
        scope=params.get("scope") or None,
        status=status,
        text=params.get("q") or None,
    )


def _source(memory: Memory) -> str:
    source = memory.source
    conversation, seq = source.get("conversation_id"), source.get("seq")
    seen = " (tool output only)" if source.get("seen_in") == "tool_output" else ""
    if not conversation:
        return esc(memory.writer)
    where = f"/ui/conversations/{conversation}"
    if isinstance(seq, int):
        where += f"/events?after={max(seq - 1, 0)}#e{seq}"
    label = f"{conversation} e{seq} {source.get('role') or ''}" if isinstance(seq, int) else str(conversation)
    return link(where, label) + esc(seen)


def _actions(memory: Memory, csrf: str | None) -> str:
    base = f"/ui/memories/{esc(memory.id)}"
    out = []
    if memory.status in CURRENT:
        out.append(
            f'<form method="post" action="{base}/edit">{csrf_field(csrf)}'
            f'<input name="text" value="{esc(memory.text)}" maxlength="{MAX_TEXT_CHARS}" required>'
            '<button type="submit">Save</button></form>'
        )
    if memory.status in ("pending", "unconfirmed"):
        approve_button = '<button type="submit">Approve</button></form>'
        out.append(f'<form method="post" action="{base}/approve">{csrf_field(csrf)}{approve_button}')
    out.append(
        f'<form method="post" action="{base}/delete">{csrf_field(csrf)}'
        '<button type="submit" class="danger">Delete</button></form>'
    )
    return "".join(out)


async def memories_page(request: Request, ctx: Ctx) -> RawResponse:
    params = request.query_params
    wanted = _query(request)
    raw = params.get("cursor", "0")
    if not raw.isdigit():
        raise BadRequest("Query parameter 'cursor' must be an offset.", param="cursor")
    offset = int(raw)
    rows = await ctx.services.store.list_memories(wanted, PAGE + 1, offset)
    search = (
        '<form method="get" action="/ui/memories" class="search" role="search">'
        + "".join(
            f'<label>{name.title()} <input name="{name}" value="{esc(params.get(name, ""))}"></label>'
            for name in ("tenant", "scope", "status", "q")
        )
        + '<button type="submit">Filter</button></form>'
    )
    body_rows = [
        f'<tr data-memory="{esc(m.id)}"><td><code>{esc(m.id)}</code></td><td><code>{esc(m.tenant)}</code></td>'
        f"<td>{esc(m.scope)}</td><td>{esc(m.status)}</td><td>{esc(m.writer)}</td>"
        f"<td>{esc(m.text) or '<em>(forgotten)</em>'}</td><td>{_source(m)}</td>"
        f"<td>{esc(when(m.updated_at))}</td><td>{_actions(m, ctx.csrf)}</td></tr>"
        for m in rows[:PAGE]
    ]
    headers = ["Id", "Tenant", "Scope", "Status", "Writer", "Text", "From", "Updated", ""]
    more = ""
    if len(rows) > PAGE:
        more = "<p>" + link(query("/ui/memories", **{**dict(params), "cursor": offset + PAGE}), "Older") + "</p>"
    body = search + (table(headers, body_rows) if body_rows else "<p>No memory matches.</p>") + more
    return respond(frame("Long-term memory", body, ctx.creds, ctx.csrf))


async def _current(request: Request, ctx: Ctx) -> tuple[Memory, dict[str, str]]:
    """The memory the path names, once the form's CSRF proof is checked; and the form."""
    _, form = await access.require_change(request)  # the CSRF proof before anything
    memory = await ctx.services.store.get_memory(request.path_params["id"])
    if memory is None:
        raise NotFound(f"No memory {request.path_params['id']!r} (already deleted?).", param="id")
    return memory, form


def _back(memory: Memory) -> RawResponse:
    location = query("/ui/memories", tenant=memory.tenant, scope=memory.scope)
    return RawResponse(b"", 303, [("location", location), *SECURITY_HEADERS])


async def delete_memory(request: Request, ctx: Ctx) -> RawResponse:
    memory, _ = await _current(request, ctx)
    await ctx.services.store.delete_memory(memory.id)
    return _back(memory)


async def approve_memory(request: Request, ctx: Ctx) -> RawResponse:
    memory, _ = await _current(request, ctx)
    if (
        memory.status not in ("pending", "unconfirmed")
        or await approve(ctx.services.store, memory, time.time()) is None
    ):
        raise Conflict(f"Memory {memory.id} is {memory.status} or changed meanwhile.", code="memory_state")
    return _back(memory)


async def edit_memory(request: Request, ctx: Ctx) -> RawResponse:
    memory, form = await _current(request, ctx)
    text = form.get("text", "").strip()
    if not text or len(text) > MAX_TEXT_CHARS or memory.status not in CURRENT:
        raise BadRequest(f"The text must be 1 to {MAX_TEXT_CHARS} characters, of a current memory.", param="text")
    now = time.time()
    source = {**memory.source, "edited_at": now}
    edited = dataclasses.replace(memory, text=text, writer="operator", updated_at=now, source=source)
    if not await ctx.services.store.replace_memory(edited, memory.updated_at):
        raise Conflict(f"Memory {memory.id} changed meanwhile; reload the page.", code="memory_changed")
    return _back(memory)
