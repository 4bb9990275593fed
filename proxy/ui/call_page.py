"""One call's diff (what the client sent beside what went upstream) and a conversation's
"where the tokens went" table; both rebuilt by `reconstruct`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from policies.text import content_text

from ..asgi import RawResponse
from ..errors import BadRequest, NotFound
from . import data
from .conversation import event_link
from .elided import segments
from .guard import Ctx
from .html import cell, cost, esc, frame, json_answer, link, message_text, ms, num, query, respond, table
from .reconstruct import CallView, Rebuilder, Row, consumers, preview, shown_record

MARKER = re.compile(
    r"\[(?:trimmed|repeat|near-repeat|cut for summarization): [^\]\n]*\]|\[\.\.\. [\d,]+ \w+ left out[^\]\n]*\]"
)
"""The policies' markers in rewritten text (`trim_result`: head + tail, by content, the lines an
excerpt left out; `repeats`: repeat and near-repeat; summary_tail's cut)."""
ROWS_PAGE = 300
SHOWN_CHARS = 6000
"""Of a trimmed result and of the summary block: enough to see both sides of the rewrite."""
BRIEF_CHARS = 600
"""Of every other row: the rows that are not rewritten stay short; their event has the whole text."""
TOKEN_CALLS = 500
FORM_TEXT = {
    "prefix": "system prefix, pinned",
    "raw": "sent as is",
    "trimmed": "trimmed",
    "pinned": "pinned: kept although summarized",
    "summarized": "summarized",
    "pruned": "pruned",
    "orphan": "not sent (orphan)",
    "summary": "summary block",
}


def _offset(request: Request, name: str) -> int:
    raw = request.query_params.get(name, "0")
    if not raw.isdigit():
        raise BadRequest(f"Query parameter {name!r} must be a non-negative integer.", param=name)
    return int(raw)


async def _view(request: Request, ctx: Ctx) -> tuple[data.Detail, CallView]:
    detail = await data.detail(ctx.services.store, request.path_params["id"])
    call = detail.call(request.path_params["call"])
    view = await Rebuilder(ctx.services, detail).rebuild(call)
    if view is None:
        raise NotFound(f"Call {call.id!r} was not projected (purpose {call.purpose}, no projection record).")
    return detail, view


def _text(cid: str, branch: str | None, row: Row, message: Mapping[str, Any] | None) -> str:
    text = message_text(message)
    limit = SHOWN_CHARS if row.form in ("trimmed", "summary") else BRIEF_CHARS
    more = ""
    if len(text) > limit:
        more = f" … {len(text) - limit:,} more chars"
        text = text[:limit]
        if row.seq is not None:
            more += " — " + event_link(cid, branch, row.seq, "full event")
    if limit == BRIEF_CHARS:  # folded: a line of preview, the text on demand
        return f"<details><summary>{esc(preview(message or {}, 90))}</summary><pre>{esc(text)}</pre>{more}</details>"
    marked = MARKER.sub(r"<mark>\g<0></mark>", esc(text))
    return f"<pre>{marked}</pre>{more}"


def elided_details(api: str, seq: int) -> str:
    """The on-demand view of what a trimmed result left out: opening it loads `elided_json`
    (app.js) and shows the stored original, its elided runs marked."""
    return (
        f'<details class="elided" data-src="{esc(f"{api}/elided/{seq}")}">'
        '<summary>Show the elided parts</summary><pre class="original"></pre></details>'
    )


def diff_row(cid: str, branch: str | None, row: Row, api: str | None = None) -> str:
    """One event's row; `api`: the call's JSON path, for the elided parts of a trimmed result."""
    where = event_link(cid, branch, row.seq) if row.seq is not None else ""
    left = _text(cid, branch, row, row.client) if row.client is not None else ""
    if row.form == "raw":
        right = '<span class="same">= same</span>'
    elif row.sent is None:
        right = f'<span class="gone">{esc(FORM_TEXT[row.form])}</span>'
    else:
        right = _text(cid, branch, row, row.sent)
        if row.form == "trimmed" and row.seq is not None and api is not None:
            right += elided_details(api, row.seq)
    return (
        f'<tr class="form-{row.form}" data-form="{row.form}" data-seq="{"" if row.seq is None else row.seq}">'
        f'<td>{where}</td><td><span class="badge {row.form}">{esc(FORM_TEXT[row.form])}</span>'
        f"<small>{esc(row.note)}</small></td><td>{left}</td><td>{right}</td>"
        + cell("client_tokens", row.client_tokens)
        + cell("sent_tokens", row.sent_tokens)
        + "</tr>"
    )


def facts(view: CallView) -> str:
    c = view.call
    p = c.projection or {}
    shown = shown_record(c) or p
    mode = f"<tr><th>Mode</th><td>{esc(p['mode'])}</td></tr>" if isinstance(p.get("mode"), str) else ""
    rows = [
        f"<tr><th>Purpose / status</th><td>{esc(c.purpose)} / {esc(c.status)} {esc(c.error or '')}</td></tr>",
        mode,
        f"<tr><th>Model / route</th><td>{esc(c.model)} / {esc(c.route)}</td></tr>",
        "<tr><th>Latency / TTFB</th>" + cell("latency_ms", c.latency_ms, ms(c.latency_ms)) + "</tr>",
        "<tr><th>Time to first byte</th>" + cell("ttfb_ms", c.ttfb_ms, ms(c.ttfb_ms)) + "</tr>",
        "<tr><th>Client payload tokens</th>" + cell("client_tokens", p.get("client_tokens")) + "</tr>",
        "<tr><th>Sent upstream tokens</th>" + cell("sent_tokens", p.get("sent_tokens")) + "</tr>",
        "<tr><th>Billed input / cached / output</th><td>"
        + " / ".join(num(c.usage.get(k)) for k in ("input_total", "cache_read", "output"))
        + "</td></tr>",
        "<tr><th>Cost</th>" + cell("cost_usd", c.cost_usd, cost(c.cost_usd)) + "</tr>",
        "<tr><th>History</th>" + cell("head_seq", view.head_seq, f"e1–e{view.head_seq}") + "</tr>",
        "<tr><th>Trimmed / pruned / summary</th><td>"
        f"{num(shown.get('trimmed'))} trimmed, {len(shown.get('pruned_seqs') or [])} pruned range(s), "
        f"summary generation {esc(shown.get('checkpoint_generation') or '—')}"
        f" through e{esc(shown.get('covered_through_seq'))}</td></tr>",
    ]
    if shown is not p:
        rows.append(
            "<tr><th>Would have sent tokens</th>" + cell("observed_sent_tokens", shown.get("sent_tokens")) + "</tr>"
        )
    return f'<table class="facts" id="call-facts"><tbody>{"".join(rows)}</tbody></table>'


async def call_page(request: Request, ctx: Ctx) -> RawResponse:
    detail, view = await _view(request, ctx)
    cid = detail.conversation.id
    offset = _offset(request, "rows")
    if view.verified:
        banner = '<p class="ok" id="verified">Rebuilt from the stored log; equals the stored projection record.</p>'
    else:
        problems = "".join(f"<li>{esc(m)}</li>" for m in view.mismatches)
        banner = (
            '<div class="warn" id="verified"><p>The rebuilt projection differs from the stored record (the live '
            "call's budget differed: a client max_tokens). Summarized, pinned and pruned events "
            f"are the record's; trims are the rebuild's.</p><ul>{problems}</ul></div>"
        )
    if shown_record(view.call) is not view.call.projection:
        banner += (
            '<p class="warn" id="observed">Observed (<code>X-Ctxproxy-Mode: observe</code>): the upstream got the '
            "client's request as it was sent; the right column is what ctxproxy would have sent instead.</p>"
        )
    counts = view.counts()
    legend = "".join(
        f'<li><span class="badge {form}">{esc(FORM_TEXT[form])}</span> {counts[form]}</li>'
        for form in FORM_TEXT
        if form in counts
    )
    shown = view.rows[offset : offset + ROWS_PAGE]
    observed = shown_record(view.call) is not view.call.projection
    grid = table(
        ["Event", "Form", "Client sent", "Would have gone upstream" if observed else "Went upstream"]
        + ["Client tokens", "Would-be sent tokens" if observed else "Sent tokens"],
        [diff_row(cid, view.call.branch_id, row, f"/ui/api/conversations/{cid}/calls/{view.call.id}") for row in shown],
        cls="grid diff",
        id="diff",
    )
    base = f"/ui/conversations/{cid}/calls/{view.call.id}"
    pager = []
    if offset > 0:
        pager.append(link(query(base, rows=max(offset - ROWS_PAGE, 0)), "← Earlier rows"))
    if offset + ROWS_PAGE < len(view.rows):
        pager.append(link(query(base, rows=offset + ROWS_PAGE), "Later rows →"))
    answer = f"<h2>Answer</h2><pre>{esc(message_text(view.call.response))}</pre>" if view.call.response else ""
    body = (
        f"<p>{link(f'/ui/conversations/{cid}', '← Conversation')}</p>{facts(view)}{banner}"
        f'<ul class="legend forms">{legend}</ul><p class="pager">{" ".join(pager)}</p>{grid}{answer}'
    )
    return respond(frame(f"Call {view.call.id}", body, ctx.creds, ctx.csrf))


async def call_json(request: Request, ctx: Ctx) -> RawResponse:
    _, view = await _view(request, ctx)
    return json_answer(
        {
            "call": view.call.to_dict(),
            "head_seq": view.head_seq,
            "verified": view.verified,
            "mismatches": view.mismatches,
            "counts": view.counts(),
            "rows": [
                {
                    "form": r.form,
                    "seq": r.seq,
                    "client_tokens": r.client_tokens,
                    "sent_tokens": r.sent_tokens,
                    "note": r.note,
                }
                for r in view.rows
            ],
        }
    )


async def elided_json(request: Request, ctx: Ctx) -> RawResponse:
    """A trimmed result of the call: the stored original cut into kept and elided runs
    (`elided.segments`), and how it was trimmed."""
    raw = request.path_params["seq"]
    if not raw.isdigit():
        raise BadRequest(f"Event {raw!r} is not an event number.", param="seq")
    seq = int(raw)
    _, view = await _view(request, ctx)
    row = next((r for r in view.rows if r.seq == seq and r.form == "trimmed"), None)
    if row is None:
        raise NotFound(f"Event {seq} was not trimmed in call {view.call.id!r}.")
    original, sent = content_text((row.client or {}).get("content")), content_text((row.sent or {}).get("content"))
    parts = segments(original, sent)
    return json_answer(
        {
            "seq": seq,
            "note": row.note,
            "original_chars": len(original),
            "elided_chars": sum(len(text) for text, elided in parts if elided),
            "segments": [{"text": text, "elided": elided} for text, elided in parts],
        }
    )


async def _consumers(request: Request, ctx: Ctx) -> tuple[data.Detail, list[Any], int]:
    detail = await data.detail(ctx.services.store, request.path_params["id"])
    ranked, read = await consumers(ctx.services, detail, TOKEN_CALLS)
    return detail, ranked, read


async def tokens_json(request: Request, ctx: Ctx) -> RawResponse:
    _, ranked, read = await _consumers(request, ctx)
    return json_answer({"calls_read": read, "data": [c.to_dict() for c in ranked]})


def branch_label(detail: data.Detail, branch_id: str) -> str:
    """`root`, or the fork's id and where it forked."""
    branch = next((b for b in detail.branches if b.id == branch_id), None)
    if branch is None or branch.parent_id is None:
        return "root"
    return f"{branch_id} (forked after e{branch.fork_seq})"


async def tokens_page(request: Request, ctx: Ctx) -> RawResponse:
    detail, ranked, read = await _consumers(request, ctx)
    cid = detail.conversation.id
    offset = _offset(request, "rows")
    rows = []
    for rank, c in enumerate(ranked[offset : offset + ROWS_PAGE], start=offset + 1):
        d = c.to_dict()
        forms = ", ".join(f"{name} {n}" for name, n in d["forms"].items())
        if c.seq is None or c.branch_id is None:  # the prefix, the tools, the summary block: every call's
            what, branch, attrs = esc(c.kind), "every call's", f'data-kind="{esc(c.kind)}"'
        else:
            what, branch = event_link(cid, c.branch_id, c.seq), esc(branch_label(detail, c.branch_id))
            attrs = f'data-seq="{c.seq}" data-branch="{esc(c.branch_id)}"'
        rows.append(
            f"<tr {attrs}><td>{rank}</td><td>{what}</td>"
            f'<td data-field="branch">{branch}</td><td>{esc(c.role)}</td><td>{esc(c.preview)}</td>'
            + cell("sent_tokens", d["sent_tokens"])
            + cell("cost_usd", d["cost_usd"], cost(d["cost_usd"]))
            + cell("calls", d["calls"])
            + f'<td data-field="forms">{esc(forms)}</td></tr>'
        )
    base = f"/ui/conversations/{cid}/tokens"
    pager = []
    if offset > 0:
        pager.append(link(query(base, rows=max(offset - ROWS_PAGE, 0)), "← Larger"))
    if offset + ROWS_PAGE < len(ranked):
        pager.append(link(query(base, rows=offset + ROWS_PAGE), "Smaller →"))
    intro = (
        f"<p>{link(f'/ui/conversations/{cid}', '← Conversation')}</p>"
        f"<p>Over the newest {read} projected main call(s): how many tokens each stored event cost upstream in "
        "total, its share of those calls' cost, and in which form each call carried it (raw, trimmed, pinned; "
        "summarized and pruned send none of its own tokens); the system prefix, the tool definitions and the "
        "summary block, sent with every call, are lines of their own. An event shared by branches counts with "
        "the branch it was first stored on. Largest first: fix the top rows first.</p>"
    )
    grid = table(
        ["#", "Event", "Branch", "Role", "Preview", "Sent tokens", "Cost share", "Calls sent", "Forms"],
        rows,
        id="consumers",
    )
    return respond(
        frame("Where the tokens went", intro + grid + f'<p class="pager">{" ".join(pager)}</p>', ctx.creds, ctx.csrf)
    )
