"""A conversation's page: totals and actions, branches, checkpoints over the timeline, charts, calls,
recall detours; and its events, its search, its download and its deletion."""

from __future__ import annotations

import json
import shlex
from typing import Any

from starlette.requests import Request

from policies.search import parse_query, search

from .. import codec
from ..asgi import RawResponse
from ..covered import readable
from ..errors import BadRequest
from ..store.base import Branch, CallRecord
from . import access, charts, data
from .access import SECURITY_HEADERS
from .guard import Ctx
from .html import (
    cell,
    cost,
    csrf_field,
    esc,
    frame,
    json_answer,
    link,
    message_text,
    ms,
    pct,
    query,
    respond,
    table,
    when,
)
from .reconstruct import head_seq, projected, shown_record

CALLS_PAGE = 100
EVENTS_PAGE = 100


def _int(request: Request, name: str, default: int, high: int = 1 << 62) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) > high:
        raise BadRequest(f"Query parameter {name!r} must be an integer between 0 and {high}.", param=name)
    return int(raw)


def totals_table(detail: data.Detail) -> str:
    t = detail.totals
    c = detail.conversation
    share = data.cached_share(t)
    rows = [
        f"<tr><th>Client id</th><td>{esc(c.external_id or '—')}</td></tr>",
        f"<tr><th>Proxy id</th><td><code>{esc(c.id)}</code></td></tr>",
        f'<tr><th>Tenant</th><td><code title="{esc(c.tenant)}">{esc(c.tenant[:12])}</code></td></tr>',
        f"<tr><th>Created / last activity</th><td>{esc(when(c.created_at))} / {esc(when(c.updated_at))}</td></tr>",
        "<tr><th>Calls</th>" + cell("calls", t["calls"]) + "</tr>",
        "<tr><th>Turns (main calls)</th>" + cell("turns", t["calls_by_purpose"].get("main", 0)) + "</tr>",
        "<tr><th>Input tokens</th>" + cell("input_total", t["input_total"]) + "</tr>",
        "<tr><th>Cache reads</th>" + cell("cache_read", t["cache_read"]) + "</tr>",
        "<tr><th>Cached share</th>" + cell("cached_share", share, pct(share)) + "</tr>",
        "<tr><th>Output tokens</th>" + cell("output", t["output"]) + "</tr>",
        "<tr><th>Tokens saved</th>" + cell("tokens_saved", t["tokens_saved"]) + "</tr>",
        "<tr><th>Cost</th>" + cell("cost_usd", t["cost_usd"], cost(t["cost_usd"])) + "</tr>",
    ]
    return f'<table class="facts" id="totals"><tbody>{"".join(rows)}</tbody></table>'


def actions(request: Request, ctx: Ctx, detail: data.Detail) -> str:
    cid = detail.conversation.id
    origin = f"{request.url.scheme}://{request.headers.get('host', '127.0.0.1:8787')}"
    url = shlex.quote(f"{origin}/ui/conversations/{cid}/export.json")
    file = shlex.quote(f"{cid}.json")
    token = ctx.services.config.admin_token_env or "CTXPROXY_ADMIN_TOKEN"
    config = shlex.quote(ctx.services.config_path or "config.example.yaml")
    command = f'curl -s -H "Authorization: Bearer ${token}" {url} -o {file} && ctxproxy replay {file} --config {config}'

    return (
        '<div class="actions">'
        + link(f"/ui/conversations/{cid}/export.json", "Download JSON", download=f"{cid}.json")
        + link(f"/ui/conversations/{cid}/tokens", "Where the tokens went")
        + link(f"/ui/conversations/{cid}/events", "Events")
        + link(f"/ui/conversations/{cid}/delete", "Delete…", cls="danger")
        + f'<label class="replay">Replay <input id="replay" readonly value="{esc(command)}"></label>'
        '<button type="button" data-copy="replay">Copy</button></div>'
    )


def branch_tree(detail: data.Detail, current: Branch) -> str:
    """The branches as a tree of forks; a branch that continues the line after the agent's own
    compaction (`Detail.continued`) follows its parent on the same level, after a boundary
    marker linking to the compaction call: one line with one boundary per compaction."""
    children: dict[str | None, list[Branch]] = {}
    for b in sorted(detail.branches, key=lambda b: b.created_at):
        children.setdefault(b.parent_id, []).append(b)
    cid = detail.conversation.id
    continued = detail.continued

    def items(b: Branch) -> list[str]:
        if b.id in continued:
            fork = "continues the line"
        else:
            fork = f"forked after e{b.fork_seq}" if b.parent_id else "root"
        mark = ' aria-current="true" class="current"' if b.id == current.id else ""
        out = [
            f'<li{mark} data-branch="{esc(b.id)}">'
            + link(query(f"/ui/conversations/{cid}", branch=b.id), b.id)
            + f" {esc(fork)}, events to e{b.head_seq}, last {esc(when(b.updated_at))}"
            + render([c for c in children.get(b.id, []) if c.id not in continued])
            + "</li>"
        ]
        for c in children.get(b.id, []):
            if c.id in continued:
                call = continued[c.id]
                out.append(
                    f'<li class="boundary" data-boundary="client_compaction" data-call="{esc(call)}">'
                    + link(f"/ui/conversations/{cid}/calls/{call}", "client compaction")
                    + "</li>"
                )
                out += items(c)
        return out

    def render(branches: list[Branch]) -> str:
        rows = [row for b in branches for row in items(b)]
        return f"<ul>{''.join(rows)}</ul>" if rows else ""

    return f'<section id="branches"><h2>Branches</h2>{render(children.get(None, []))}</section>'


def checkpoints_section(detail: data.Detail, branch: Branch) -> str:
    lineage = {b.id for b in detail.lineage(branch)}
    shown = [c for c in detail.checkpoints if c.branch_id in lineage]
    spans = [
        (
            c.from_seq,
            c.covered_through_seq,
            c.status,
            f"generation {c.generation}: e{c.from_seq}–e{c.covered_through_seq} {c.status}",
        )
        for c in shown
    ]
    marks = [
        (head_seq(c.projection), f"{c.purpose} call {c.id} at e{head_seq(c.projection)}")
        for c in detail.calls
        if projected(c) and c.branch_id in lineage
    ]
    chart = charts.timeline(branch.head_seq, spans, marks, "checkpoints (bars) and calls (ticks) over the events")
    rows = [
        f'<tr data-checkpoint="{esc(c.id)}" class="{esc(c.status)}">'
        + cell("generation", c.generation)
        + f"<td>{esc(c.branch_id)}</td>"
        + cell("from_seq", c.from_seq)
        + cell("covered_through_seq", c.covered_through_seq)
        + f'<td data-field="status">{esc(c.status)}</td>'
        + cell("tokens", c.tokens)
        + f'<td>{esc(c.model)}</td><td>{esc(when(c.created_at))}</td><td class="error">{esc(c.error or "")}</td></tr>'
        for c in shown
    ]
    grid = table(
        ["Gen", "Branch", "From", "Through", "Status", "Tokens", "Model", "Created", "Error"], rows, id="checkpoints"
    )
    summaries = "".join(
        f"<details><summary>Summary generation {c.generation} ({esc(c.status)})</summary>"
        f"<pre>{esc(readable(c))}</pre></details>"
        for c in shown
        if c.summary
    )
    return f'<section id="checkpoint-section"><h2>Checkpoints</h2>{chart}{grid}{summaries}</section>'


def call_charts(calls: list[CallRecord]) -> str:
    main = [c for c in calls if projected(c)]
    labels = [f"{i + 1} {c.purpose}" for i, c in enumerate(main)]
    tokens = charts.grouped_bars(
        labels,
        [
            ("client payload tokens", [c.projection.get("client_tokens") if c.projection else None for c in main]),
            ("sent upstream tokens", [c.projection.get("sent_tokens") if c.projection else None for c in main]),
        ],
        "tokens per call: client vs upstream",
        "tokens",
    )
    reuse = charts.grouped_bars(
        labels,
        [("cache reads / input", [_share(c) for c in main])],
        "cache reuse per call",
        "share of input",
    )
    spend = charts.line(
        [f"{i + 1} {c.purpose}" for i, c in enumerate(calls)],
        [c.cost_usd for c in calls],
        "cumulative cost (USD)",
        "cost USD, cumulative",
        "USD",
    )
    return (
        f'<section id="charts"><h2>Charts</h2><h3>Tokens per call</h3>{tokens}'
        f"<h3>Cache reuse</h3>{reuse}<h3>Cumulative cost</h3>{spend}</section>"
    )


def _share(call: CallRecord) -> float | None:
    read, total = call.usage.get("cache_read"), call.usage.get("input_total")
    return None if read is None or not total else read / total


def calls_section(detail: data.Detail, offset: int) -> str:
    cid = detail.conversation.id
    page = detail.calls[offset : offset + CALLS_PAGE]
    rows = []
    for i, c in enumerate(page, start=offset + 1):
        p = c.projection or {}
        diff = link(f"/ui/conversations/{cid}/calls/{c.id}", "diff", cls="diff") if shown_record(c) else ""
        mode = f" ({p['mode']})" if isinstance(p.get("mode"), str) else ""
        rows.append(
            f'<tr data-call="{esc(c.id)}" data-purpose="{esc(c.purpose)}" class="{esc(c.status)}">'
            f"<td>{i}</td><td>{esc(when(c.started_at))}</td><td>{esc(c.purpose + mode)}</td><td>{esc(c.model)}</td>"
            f'<td data-field="status">{esc(c.status)}{" " + esc(c.error) if c.error else ""}</td>'
            + cell("latency_ms", c.latency_ms, ms(c.latency_ms))
            + cell("ttfb_ms", c.ttfb_ms, ms(c.ttfb_ms))
            + cell("input_total", c.usage.get("input_total"))
            + cell("cache_read", c.usage.get("cache_read"))
            + cell("output", c.usage.get("output"))
            + cell("cost_usd", c.cost_usd, cost(c.cost_usd))
            + cell("client_tokens", p.get("client_tokens"))
            + cell("sent_tokens", p.get("sent_tokens"))
            + f"<td>{diff}</td></tr>"
        )
    headers = [
        "#",
        "Started",
        "Purpose",
        "Model",
        "Status",
        "Latency",
        "TTFB",
        "Input",
        "Cached",
        "Output",
        "Cost",
        "Client",
        "Sent",
        "",
    ]
    pager = []
    if offset > 0:
        pager.append(link(query(f"/ui/conversations/{cid}", calls=max(offset - CALLS_PAGE, 0)), "← Earlier calls"))
    if offset + CALLS_PAGE < len(detail.calls):
        pager.append(link(query(f"/ui/conversations/{cid}", calls=offset + CALLS_PAGE), "Later calls →"))
    return (
        f'<section id="calls-section"><h2>Calls ({len(detail.calls)})</h2>{table(headers, rows, id="calls")}'
        f'<p class="pager">{" ".join(pager)}</p></section>'
    )


async def recall_section(ctx: Ctx, detail: data.Detail) -> str:
    detours = [c for c in detail.calls if c.purpose == "recall"]
    if not detours:
        return ""
    items = []
    for c in detours:
        queries = []
        for tool_call in (c.response or {}).get("tool_calls") or []:
            try:
                arguments = codec.loads((tool_call.get("function") or {}).get("arguments") or "{}")
            except ValueError:
                arguments = {}
            queries.append(str(arguments.get("query", "")) if isinstance(arguments, dict) else "")
        found = []
        if c.branch_id:
            lineage = await ctx.services.store.lineage_events(c.branch_id, 0, head_seq(c.projection or {}) or data.ALL)
            for text in queries:
                try:
                    hits = search(lineage, parse_query(text), excerpt_chars=160)
                except ValueError:
                    hits = []
                found.append(
                    f"<li><q>{esc(text)}</q> → {len(hits)} hit(s): "
                    + ", ".join(event_link(detail.conversation.id, c.branch_id, h.seq) for h in hits[:10])
                    + "</li>"
                )
        items.append(f'<li data-call="{esc(c.id)}">{esc(when(c.started_at))} <ul>{"".join(found)}</ul></li>')
    return f'<section id="recall"><h2>Recall detours</h2><ul>{"".join(items)}</ul></section>'


async def conversation(request: Request, ctx: Ctx) -> RawResponse:
    detail = await data.detail(ctx.services.store, request.path_params["id"])
    branch = detail.branch(request.query_params.get("branch") or None)
    offset = _int(request, "calls", 0)
    cid = detail.conversation.id
    searchbox = (
        f'<form method="get" action="/ui/conversations/{esc(cid)}/search" class="search" role="search">'
        f'<input type="hidden" name="branch" value="{esc(branch.id)}">'
        '<label>Search this history <input name="q" placeholder="words or &quot;a phrase&quot;"></label>'
        '<button type="submit">Search</button></form>'
    )
    body = (
        totals_table(detail)
        + actions(request, ctx, detail)
        + searchbox
        + branch_tree(detail, branch)
        + checkpoints_section(detail, branch)
        + call_charts(detail.calls)
        + calls_section(detail, offset)
        + await recall_section(ctx, detail)
    )
    title = f"Conversation {detail.conversation.external_id or cid}"
    return respond(frame(title, body, ctx.creds, ctx.csrf, live=f"/ui/api/conversations/{cid}/state"))


async def state_json(request: Request, ctx: Ctx) -> RawResponse:
    """What the live view polls: it refreshes when any of these change."""
    store = ctx.services.store
    conversation = await data.resolve(store, request.path_params["id"])
    totals = await data.totals(store, conversation.id)
    return json_answer(
        {
            "id": conversation.id,
            "updated_at": conversation.updated_at,
            "calls": totals["calls"],
            "checkpoints": [[c.id, c.status] for c in await store.list_checkpoints(conversation.id)],
            "totals": totals,
        }
    )


def event_link(cid: str, branch: str | None, seq: int, text: str | None = None) -> str:
    """A link to event `seq` on its page of the branch's events."""
    href = query(f"/ui/conversations/{cid}/events", branch=branch, after=max(seq - 1, 0)) + f"#e{seq}"
    return link(href, text or f"e{seq}", cls="event")


def event_rows(cid: str, events: list[Any]) -> list[str]:
    return [
        f'<tr id="e{e.seq}" data-seq="{e.seq}" class="{esc(e.role)}"><td>{link(f"#e{e.seq}", f"e{e.seq}")}</td>'
        f"<td>{esc(e.role)}</td><td>{esc(e.source)}</td>"
        + cell("tokens", e.tokens)
        + f"<td>{esc(when(e.created_at))}</td>"
        f"<td><pre>{esc(message_text(e.message))}</pre></td></tr>"
        for e in events
    ]


async def events_page(request: Request, ctx: Ctx) -> RawResponse:
    detail = await data.detail(ctx.services.store, request.path_params["id"])
    branch = detail.branch(request.query_params.get("branch") or None)
    after = _int(request, "after", 0)
    events = await data.events(ctx.services.store, branch, after, EVENTS_PAGE)
    cid = detail.conversation.id
    nav = [link(f"/ui/conversations/{cid}", "← Conversation")]
    if after > 0:
        nav.append(
            link(
                query(f"/ui/conversations/{cid}/events", branch=branch.id, after=max(after - EVENTS_PAGE, 0)), "Earlier"
            )
        )
    if len(events) == EVENTS_PAGE:
        nav.append(
            link(query(f"/ui/conversations/{cid}/events", branch=branch.id, after=events[-1].seq), "Later", rel="next")
        )
    grid = table(["Event", "Role", "Source", "Tokens", "Stored", "Message"], event_rows(cid, events), id="events")
    body = f'<p class="pager">{" ".join(nav)}</p><p>Branch <code>{esc(branch.id)}</code></p>{grid}'
    return respond(frame(f"Events of {detail.conversation.external_id or cid}", body, ctx.creds, ctx.csrf))


async def search_page(request: Request, ctx: Ctx) -> RawResponse:
    """The admin API's history search (`policies.search`) over the branch, rendered."""
    detail = await data.detail(ctx.services.store, request.path_params["id"])
    branch = detail.branch(request.query_params.get("branch") or None)
    text = request.query_params.get("q", "")
    try:
        parsed = parse_query(text)
    except ValueError as exc:
        raise BadRequest(str(exc), param="q") from None
    hits = search(await ctx.services.store.lineage_events(branch.id, 0, data.ALL), parsed, excerpt_chars=300)
    cid = detail.conversation.id
    rows = [
        f'<tr data-seq="{h.seq}"><td>{event_link(cid, branch.id, h.seq)}</td>'
        f"<td>{esc(h.role)}</td><td>{esc(h.tool or '')}</td><td><pre>{esc(h.excerpt)}</pre></td></tr>"
        for h in hits[:200]
    ]
    body = f"<p>{len(hits)} hit(s) for <q>{esc(text)}</q> on branch <code>{esc(branch.id)}</code>.</p>" + table(
        ["Event", "Role", "Tool", "Excerpt"], rows, id="hits"
    )
    return respond(frame(f"Search {detail.conversation.external_id or cid}", body, ctx.creds, ctx.csrf))


async def export(request: Request, ctx: Ctx) -> RawResponse:
    store = ctx.services.store
    detail = await data.detail(store, request.path_params["id"])
    events = {b.id: await store.lineage_events(b.id, 0, data.ALL) for b in detail.branches}
    last = next((c for c in reversed(detail.calls) if c.purpose == "main"), None)
    prefix = json.loads(await store.get_blob(last.system_hash) or "[]") if last and last.system_hash else []
    tools = json.loads(await store.get_blob(last.tools_hash) or "null") if last and last.tools_hash else None
    disposition = ("content-disposition", f'attachment; filename="{detail.conversation.id}.json"')
    return json_answer(data.export(detail, events, prefix, tools), headers=[disposition])


async def delete_confirm(request: Request, ctx: Ctx) -> RawResponse:
    detail = await data.detail(ctx.services.store, request.path_params["id"])
    cid = detail.conversation.id
    body = (
        f"<p>Delete conversation <code>{esc(detail.conversation.external_id or cid)}</code> with its "
        f"{len(detail.branches)} branch(es), {len(detail.calls)} call(s) and {len(detail.checkpoints)} checkpoint(s)? "
        "This cannot be undone.</p>"
        f'<form method="post" action="/ui/conversations/{esc(cid)}/delete">{csrf_field(ctx.csrf)}'
        '<button type="submit" class="danger">Delete for good</button> '
        + link(f"/ui/conversations/{cid}", "Cancel")
        + "</form>"
    )
    return respond(frame("Delete conversation", body, ctx.creds, ctx.csrf))


async def delete(request: Request, ctx: Ctx) -> RawResponse:
    await access.require_change(request)  # the CSRF proof before anything
    store = ctx.services.store
    cid = (await data.resolve(store, request.path_params["id"])).id
    if not await store.delete_conversation(cid):
        raise BadRequest(f"No conversation {cid!r} (already deleted?).", param="id")
    return RawResponse(b"", 303, [("location", "/ui/"), *SECURITY_HEADERS])
