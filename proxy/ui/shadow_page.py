"""The inspector's shadow page (/ui/shadow): did rewriting change the agent's next step?

The report of `proxy/shadow/report.py` over a time range (each rewrite kind's divergence rate and
bootstrap interval beside the A/A floor of its route and model), then the diverged pairs, newest
first: what the rewrite left out (links to those events), the two next steps side by side, and a
link to the call the client got. Read from the shadow call records through the store, like the
admin API's `GET /admin/shadow`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request

from ..asgi import RawResponse
from ..errors import BadRequest
from ..shadow.report import diverged, report
from ..store.base import CallRecord
from .guard import Ctx
from .html import cell, esc, frame, json_answer, link, pct, query, respond, table, when

RANGES = {"24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}
MAX_PAIRS = 5000
LISTED = 50


async def _calls(request: Request, ctx: Ctx) -> tuple[list[CallRecord], str]:
    span = request.query_params.get("range") or "7d"
    if span not in RANGES:
        raise BadRequest(f"'range' must be one of {', '.join(RANGES)}.", param="range")
    since = time.time() - RANGES[span]
    return await ctx.services.store.calls_of_purpose("shadow", since, MAX_PAIRS), span


async def shadow_json(request: Request, ctx: Ctx) -> RawResponse:
    calls, _ = await _calls(request, ctx)
    return json_answer({"report": report(calls), "diverged": diverged(calls, LISTED)})


def _interval(value: list[float] | None) -> str:
    return "—" if value is None else f"{pct(value[0])} – {pct(value[1])}"


def _report_rows(groups: list[dict[str, Any]]) -> list[str]:
    rows = []
    for group in groups:
        floor = group["floor"]
        rows.append(
            f'<tr data-kind="{esc(group["kind"])}" data-route="{esc(group["route"])}">'
            f"<td>{esc(group['route'])}</td><td>{esc(group['model'])}</td><td>{esc(group['kind'])}</td>"
            + cell("pairs", group["pairs"])
            + cell("diverged", group["diverged"])
            + cell("rate", group["rate"], pct(group["rate"]))
            + cell("interval", group["interval"], _interval(group["interval"]))
            + cell("floor_rate", floor["rate"], pct(floor["rate"]))
            + cell("floor_interval", floor["interval"], _interval(floor["interval"]))
            + cell("failed", group["failed"])
            + "</tr>"
        )
    return rows


def _removed(conversation: str | None, removed: dict[str, Any] | None) -> str:
    """What the rewrite left out, each range a link to its events."""
    if not conversation or not removed:
        return "—"
    parts = []
    for what in ("missing", "cut"):
        for low, high in removed.get(what) or []:
            label = f"e{low}" if low == high else f"e{low}–e{high}"
            href = f"/ui/conversations/{conversation}/events?after={max(low - 1, 0)}#e{low}"
            parts.append(f'<li class="{what}">{esc(what)} {link(href, label)}</li>')
    return f'<ul class="removed">{"".join(parts)}</ul>' if parts else "—"


def _step(step: dict[str, Any] | None) -> str:
    return f"<pre>{esc(json.dumps(step, indent=1, ensure_ascii=False))}</pre>"


def _pair_rows(pairs: list[dict[str, Any]]) -> list[str]:
    rows = []
    for pair in pairs:
        conversation, steps = pair["conversation_id"], pair.get("steps") or {}
        client = (
            link(f"/ui/conversations/{conversation}/calls/{pair['of']}", "client's call")
            if conversation and pair.get("of")
            else "—"
        )
        rows.append(
            f'<tr data-call="{esc(pair["shadow_call"])}"><td>{esc(when(pair["started_at"]))}<br>{client}</td>'
            f"<td>{esc(pair['route'])}<br><small>{esc(pair['model'])}</small></td>"
            f"<td>{esc(', '.join(pair['kinds']))}</td>"
            f'<td class="removed-cell">{_removed(conversation, pair.get("removed"))}</td>'
            f'<td class="step client">{_step(steps.get("client"))}</td>'
            f'<td class="step shadow">{_step(steps.get("shadow"))}</td>'
            f'<td class="difference">{_step(pair.get("difference"))}</td></tr>'
        )
    return rows


async def shadow_page(request: Request, ctx: Ctx) -> RawResponse:
    calls, span = await _calls(request, ctx)
    result, pairs = report(calls), diverged(calls, LISTED)
    ranges = "".join(f'<option value="{r}"{" selected" if r == span else ""}>{r}</option>' for r in RANGES)
    form = (
        '<form method="get" action="/ui/shadow" class="search">'
        f'<label>Range <select name="range">{ranges}</select></label><button type="submit">Show</button></form>'
    )
    if not result["groups"]:
        note = (
            '<p class="empty">No shadow pairs. Shadow mode is off unless a policy sets '
            "<code>shadow: {rate: ...}</code> (docs/shadow.md).</p>"
        )
        return respond(frame("Shadow pairs", form + note, ctx.creds, ctx.csrf))
    headers = ["Route", "Model", "Kind", "Pairs", "Diverged", "Rate", "95% interval", "A/A floor", "Floor interval"]
    grid = table([*headers, "Failed"], _report_rows(result["groups"]), id="shadow-report")
    listing = (
        table(
            ["When", "Route", "Kinds", "Left out", "Client's next step", "Shadow's next step", "Difference"],
            _pair_rows(pairs),
            id="diverged",
        )
        if pairs
        else '<p class="empty">No diverged pair.</p>'
    )
    body = form + grid + "<h2>Diverged pairs</h2>" + listing
    return respond(frame("Shadow pairs", body, ctx.creds, ctx.csrf, live=query("/ui/api/shadow", range=span)))
