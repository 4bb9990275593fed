"""The inspector's client keys page: every key (the config's and the admin API's) with its tenant,
routes, expiry and limits, and each limit's standing -- what the current day, month or minute
has used of it and when it resets; then the tenants' limits the same way. Keys are made through
the admin API (`POST /admin/keys`, docs/keys.md); a key made there can be revoked here too (a
POST with the page's CSRF proof, like the other changes the inspector makes).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from ..asgi import RawResponse
from ..errors import NotFound
from ..standing import describe_keys, describe_tenants
from . import access
from .access import SECURITY_HEADERS
from .guard import Ctx
from .html import csrf_field, esc, frame, link, query, respond, table, when

UNITS = {"usd": "USD", "tokens": "tokens", "requests": "requests"}


def _used(value: float, quantity: str) -> str:
    return f"${value:.4f}" if quantity == "usd" else f"{value:,.0f}"


def standing(rows: list[dict[str, Any]]) -> str:
    """One line per limit: `used of limit unit per period`, with a meter and the reset time."""
    if not rows:
        return '<span class="muted">no limits</span>'
    lines = []
    for s in rows:
        quantity, limit, used = s["quantity"], s["limit"], s["used"]
        share = min(1.0, used / limit) if limit else 0.0
        state = "spent" if (used > limit if quantity == "requests" else used >= limit) else "ok"
        lines.append(
            f'<li class="limit {state}" data-limit="{esc(quantity)}-{esc(s["per"])}">'
            f"{esc(_used(used, quantity))} of {esc(_used(limit, quantity))} {UNITS[quantity]} per {esc(s['per'])} "
            f'<meter min="0" max="1" value="{share:.3f}" title="{share:.0%} used"></meter> '
            f"<small>resets {esc(s['resets_at_iso'])}</small></li>"
        )
    return f'<ul class="limits">{"".join(lines)}</ul>'


async def keys_page(request: Request, ctx: Ctx) -> RawResponse:
    keys = await describe_keys(ctx.services)
    key_rows = [
        f'<tr data-key="{esc(k["id"])}"><td>{esc(k["name"])}<br><small><code>{esc(k["id"])}</code>'
        f"{' …' + esc(k['hint']) if k.get('hint') else ''}</small></td>"
        f"<td>{esc(k['source'])}</td><td><code>{esc(k['tenant'])}</code></td>"
        f"<td>{esc(', '.join(k['routes'])) if k['routes'] else 'every route'}</td>"
        f"<td>{_expiry(k)}</td><td>{standing(k['standing'])}</td>"
        f"<td>{link(query('/ui/usage', group_by='client'), 'usage by key')}</td>"
        f"<td>{_revoke(k, ctx.csrf)}</td></tr>"
        for k in keys
    ]
    listing = (
        table(
            ["Key", "Source", "Tenant", "Routes", "Expires", "Limits: used this period", "Usage", "Revoke"],
            key_rows,
            id="keys",
        )
        if keys
        else '<p class="empty">No client keys: configure <code>clients:</code> or make one with '
        "<code>POST /admin/keys</code>.</p>"
    )
    tenants = await describe_tenants(ctx.services)
    tenant_rows = [
        f'<tr data-tenant="{esc(t["tenant"])}"><td><code>{esc(t["tenant"])}</code></td>'
        f"<td>{standing(t['standing'])}</td></tr>"
        for t in tenants
    ]
    tenant_table = (
        table(["Tenant", "Limits: used this period"], tenant_rows, id="tenants")
        if tenants
        else '<p class="empty">No tenant limits (<code>tenants:</code> in the config).</p>'
    )
    body = (
        "<h2>Client keys</h2>"
        + listing
        + "<h2>Tenants</h2>"
        + tenant_table
        + "<p>Keys are made through the admin API (<code>POST /admin/keys</code>) and revoked here or with "
        "<code>DELETE /admin/keys/&lt;id&gt;</code>; a configured client is removed from the config file.</p>"
    )
    return respond(frame("Keys and limits", body, ctx.creds, ctx.csrf))


def _expiry(key: dict[str, Any]) -> str:
    expires = key.get("expires_at")
    if expires is None:
        return "never"
    return f"{'expired ' if key.get('expired') else ''}{esc(when(expires))}"


def _revoke(key: dict[str, Any], csrf: str | None) -> str:
    if key["source"] != "api":
        return '<span class="muted">in the config</span>'
    return (
        f'<form method="post" action="/ui/keys/{esc(key["id"])}/revoke">{csrf_field(csrf)}'
        f'<button type="submit" class="danger">Revoke</button></form>'
    )


async def revoke_key(request: Request, ctx: Ctx) -> RawResponse:
    """Revoke a key made through the admin API: at once, on every replica."""
    await access.require_change(request)  # the CSRF proof before anything
    key_id = request.path_params["id"]
    if not await ctx.services.store.delete_api_key(key_id):
        raise NotFound(f"No client key {key_id!r} made through the admin API (already revoked?).", param="id")
    return RawResponse(b"", 303, [("location", "/ui/keys"), *SECURITY_HEADERS])
