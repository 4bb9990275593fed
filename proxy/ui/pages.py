"""The inspector's entry pages: login and logout, the conversation list with its search, usage."""

from __future__ import annotations

import hmac
import time
from typing import Any

from starlette.requests import Request

from ..asgi import RawResponse
from ..errors import BadRequest, Forbidden, Unauthorized
from ..ledger import GROUP_BY, summarize
from ..store.base import UsageQuery
from . import access, charts, data
from .access import SECURITY_HEADERS
from .guard import Ctx
from .html import cell, cost, esc, frame, json_answer, link, pct, query, respond, table, when

PAGE = 50
RANGES = {"1h": 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400, "all": None}


def login_form(variable: str, message: str = "", status: int = 200) -> RawResponse:
    """The form; `variable`: the environment variable holding the admin token (`admin_token_env`)."""
    note = f'<p class="error" role="alert">{esc(message)}</p>' if message else ""
    body = (
        f'{note}<form method="post" action="/ui/login" class="login">'
        '<label for="token">Admin token</label>'
        '<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>'
        '<button type="submit">Log in</button></form>'
        f"<p>The token is the value of <code>${esc(variable)}</code> in the proxy's environment "
        f"(<code>admin_token_env: {esc(variable)}</code>): <code>echo ${esc(variable)}</code> where the proxy "
        "was started.</p>"
    )
    return respond(frame("Log in", body, None, None), status)


def _token_variable(request: Request) -> str:
    variable: str = request.app.state.ctx.config.admin_token_env
    return variable


async def login_page(request: Request) -> RawResponse:
    access.admin_token(request)  # 404 while the inspector is off
    return login_form(_token_variable(request))


async def login(request: Request) -> RawResponse:
    token = access.admin_token(request)
    if not access.same_origin(request):
        return login_form(_token_variable(request), "The login must come from this site's own form.", 403)
    form = await access.read_form(request)
    given = form.get("token", "")
    if not hmac.compare_digest(given.encode(), token.encode()):
        return login_form(_token_variable(request), "That is not the admin token.", 401)
    cookie = access.cookie_header(request, access.new_session(token), access.SESSION_SECONDS)
    return RawResponse(b"", 303, [("location", "/ui/"), cookie, *SECURITY_HEADERS])


async def logout(request: Request) -> RawResponse:
    try:
        await access.require_change(request)
    except Unauthorized:
        pass  # no valid session: nothing to end, the cookie is cleared all the same
    except Forbidden as exc:  # a forged logout: the session stays
        return respond(frame("Error 403", f'<p class="error">{esc(exc.message)}</p>', None, None), 403)
    cookie = access.cookie_header(request, "", 0)
    return RawResponse(b"", 303, [("location", "/ui/login"), cookie, *SECURITY_HEADERS])


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit", str(PAGE))
    if not raw.isdigit() or not 1 <= int(raw) <= 500:
        raise BadRequest("Query parameter 'limit' must be an integer between 1 and 500.", param="limit")
    return int(raw)


def _before(request: Request) -> float | None:
    raw = request.query_params.get("before")
    try:
        return float(raw) if raw else None
    except ValueError:
        raise BadRequest("Query parameter 'before' must be a timestamp.", param="before") from None


async def rows_for(request: Request, ctx: Ctx) -> tuple[list[data.ConversationRow], float | None, dict[int, list[Any]]]:
    """The list's rows: an id search (`q`), a text search (`text`) or a page (`before`, `limit`)."""
    store = ctx.services.store
    limit = _limit(request)
    params = request.query_params
    if params.get("q"):
        return await data.find_by_id(store, params["q"], limit), None, {}
    if params.get("text"):
        matches = await data.find_by_text(store, params["text"], limit)
        return [m.row for m in matches], None, {i: m.hits for i, m in enumerate(matches)}
    rows, next_before = await data.conversation_rows(store, limit, _before(request))
    return rows, next_before, {}


async def conversations_json(request: Request, ctx: Ctx) -> RawResponse:
    rows, next_before, _ = await rows_for(request, ctx)
    return json_answer({"data": [r.to_dict() for r in rows], "next_before": next_before})


async def conversations(request: Request, ctx: Ctx) -> RawResponse:
    rows, next_before, hits = await rows_for(request, ctx)
    params = request.query_params
    search = (
        '<form method="get" action="/ui/" class="search" role="search">'
        f'<label>Id <input name="q" value="{esc(params.get("q", ""))}" placeholder="conversation or client id"></label>'
        f'<label>Text <input name="text" value="{esc(params.get("text", ""))}"'
        ' placeholder="words or &quot;a phrase&quot;"></label>'
        '<button type="submit">Search</button></form>'
    )
    headers = [
        "Conversation",
        "Tenant",
        "Last activity",
        "Turns",
        "Branches",
        "Input",
        "Output",
        "Cached",
        "Saved",
        "Cost",
    ]
    body_rows = []
    for i, r in enumerate(rows):
        c = r.conversation
        t = r.totals
        found = "".join(
            f"<li>{link(f'/ui/conversations/{c.id}/events?after={max(h.seq - 1, 0)}#e{h.seq}', f'e{h.seq}')} "
            f"{esc(h.excerpt)}</li>"
            for h in hits.get(i, [])
        )
        hit_list = f'<ul class="hits">{found}</ul>' if found else ""
        body_rows.append(
            f'<tr data-conversation="{esc(c.id)}"><td>{link(f"/ui/conversations/{c.id}", r.shown_id, cls="open")}'
            f"{'<br><small>' + esc(c.id) + '</small>' if c.external_id else ''}{hit_list}</td>"
            f'<td><code title="{esc(c.tenant)}">{esc(c.tenant[:12])}</code></td>'
            f"<td>{esc(when(c.updated_at))}</td>"
            + cell("turns", r.turns)
            + cell("branches", r.branches)
            + cell("input_total", t["input_total"])
            + cell("output", t["output"])
            + cell("cached_share", data.cached_share(t), pct(data.cached_share(t)))
            + cell("tokens_saved", t["tokens_saved"])
            + cell("cost_usd", t["cost_usd"], cost(t["cost_usd"]))
            + "</tr>"
        )
    listing = table(headers, body_rows, id="conversations") if rows else '<p class="empty">No conversations.</p>'
    pager = ""
    if next_before is not None:
        older = query("/ui/", before=repr(next_before), limit=params.get("limit"))
        pager = f'<p class="pager">{link(older, "Older →", rel="next")}</p>'
    return respond(frame("Conversations", search + listing + pager, ctx.creds, ctx.csrf, live="/ui/api/conversations"))


def usage_query(request: Request) -> tuple[UsageQuery, str]:
    params = request.query_params
    group_by = params.get("group_by") or "route"
    if group_by not in GROUP_BY:
        raise BadRequest(f"'group_by' must be one of {', '.join(GROUP_BY)}.", param="group_by")
    span = params.get("range") or "all"
    if span not in RANGES:
        raise BadRequest(f"'range' must be one of {', '.join(RANGES)}.", param="range")
    seconds = RANGES[span]
    since = time.time() - seconds if seconds is not None else None
    return UsageQuery(since=since, group_by=group_by), span


async def usage_json(request: Request, ctx: Ctx) -> RawResponse:
    usage_q, _ = usage_query(request)
    return json_answer(summarize(await ctx.services.store.usage_cells(usage_q), usage_q))


async def usage(request: Request, ctx: Ctx) -> RawResponse:
    usage_q, span = usage_query(request)
    result = summarize(await ctx.services.store.usage_cells(usage_q), usage_q)
    choose = "".join(
        f'<option value="{g}"{" selected" if g == usage_q.group_by else ""}>{g}</option>' for g in GROUP_BY
    )
    ranges = "".join(f'<option value="{r}"{" selected" if r == span else ""}>{r}</option>' for r in RANGES)
    form = (
        '<form method="get" action="/ui/usage" class="search">'
        f'<label>By <select name="group_by">{choose}</select></label>'
        f'<label>Range <select name="range">{ranges}</select></label><button type="submit">Show</button></form>'
    )
    groups = result.get("groups", [])
    labels = [str(g["key"]) for g in groups]
    chart = charts.grouped_bars(
        labels,
        [("input tokens", [g["input_total"] for g in groups]), ("output tokens", [g["output"] for g in groups])],
        f"tokens per {usage_q.group_by}",
        "tokens",
    ) + charts.grouped_bars(
        labels, [("cost USD", [g["cost_usd"] for g in groups])], f"cost per {usage_q.group_by}", "USD"
    )
    rows = [
        f'<tr data-key="{esc(g["key"])}"><td>{esc(g["key"])}</td>'
        + cell("calls", g["calls"])
        + cell("input_total", g["input_total"])
        + cell("cache_read", g["cache_read"])
        + cell("output", g["output"])
        + cell("tokens_saved", g["tokens_saved"])
        + cell("saved_usd", g["saved_usd"], cost(g["saved_usd"]))
        + cell("cost_usd", g["cost_usd"], cost(g["cost_usd"]))
        + "</tr>"
        for g in [*groups, {"key": "total", **result["totals"]}]
    ]
    headers = [usage_q.group_by or "", "Calls", "Input", "Cache read", "Output", "Saved tokens", "Saved $", "Cost"]
    grid = table(headers, rows, id="usage")
    note = f"<p>Calls since {esc(when(usage_q.since))}.</p>" if usage_q.since else "<p>All recorded calls.</p>"
    return respond(
        frame(
            "Usage",
            form + note + chart + grid,
            ctx.creds,
            ctx.csrf,
            live=query("/ui/api/usage", group_by=usage_q.group_by, range=span),
        )
    )
