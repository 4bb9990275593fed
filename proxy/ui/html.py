"""Server-rendered HTML for the inspector: the page frame, escaping and number formats.

Every value reaches the page through `esc` (stored prompts and tool output are untrusted text);
no inline script or style exists, so the Content-Security-Policy can forbid both. Numbers a test
or a script may read carry `data-field`/`data-value` with the exact value beside the formatted one.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from ..asgi import RawResponse
from .access import SECURITY_HEADERS, Credentials

NAV = (
    ("/ui/", "Conversations"),
    ("/ui/usage", "Usage"),
    ("/ui/keys", "Keys"),
    ("/ui/shadow", "Shadow"),
    ("/ui/memories", "Memories"),
)


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def num(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def cost(value: float | None) -> str:
    return "—" if value is None else f"${value:,.6f}"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} ms"


def when(epoch: float | None) -> str:
    if epoch is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch)) + " UTC"


def cell(field: str, value: Any, text: str | None = None, cls: str = "num") -> str:
    """A table cell with its exact value in `data-value` (JSON) and the formatted text shown."""
    shown = text if text is not None else num(value)
    return f'<td class="{cls}" data-field="{esc(field)}" data-value="{esc(json.dumps(value))}">{esc(shown)}</td>'


def _attrs(attrs: dict[str, str]) -> str:
    """Keyword arguments as HTML attributes: `cls` is `class`, `_` becomes `-`."""
    names = {"cls": "class"}
    return "".join(f' {names.get(k, k.replace("_", "-"))}="{esc(v)}"' for k, v in attrs.items())


def link(href: str, text: str, **attrs: str) -> str:
    extra = _attrs(attrs)
    return f'<a href="{esc(href)}"{extra}>{esc(text)}</a>'


def query(path: str, **params: Any) -> str:
    kept = {k: v for k, v in params.items() if v is not None and v != ""}
    return f"{path}?{urlencode(kept)}" if kept else path


def table(headers: Iterable[str], rows: Iterable[str], cls: str = "grid", **attrs: str) -> str:
    extra = _attrs(attrs)
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    body = "".join(rows)
    grid = f'<table class="{cls}"{extra}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    return f'<div class="scroll">{grid}</div>'


def csrf_field(csrf: str | None) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(csrf)}">' if csrf else ""


def frame(title: str, body: str, creds: Credentials | None, csrf: str | None, live: str | None = None) -> str:
    """The whole document: header with navigation and logout (a CSRF-proof POST), `body` in <main>.
    `live`: a JSON URL the page script polls; the page's <main> is refreshed when its answer changes."""
    nav = "".join(f"<li>{link(href, text)}</li>" for href, text in NAV) if creds else ""
    logout = ""
    if creds is not None and not creds.bearer:
        logout = (
            f'<form method="post" action="/ui/logout" class="logout">{csrf_field(csrf)}'
            '<button type="submit">Log out</button></form>'
        )
    live_attr = f' data-live="{esc(live)}"' if live else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · ctxproxy</title>"
        '<link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/static/style.css">'
        '<script src="/ui/static/app.js" defer></script></head>'
        f'<body><header><a class="brand" href="/ui/">ctxproxy</a><nav><ul>{nav}</ul></nav>{logout}</header>'
        f'<main id="main"{live_attr}><h1>{esc(title)}</h1>{body}</main></body></html>'
    )


def respond(document: str, status: int = 200, headers: list[tuple[str, str]] | None = None) -> RawResponse:
    return RawResponse(
        document.encode(),
        status,
        [("content-type", "text/html; charset=utf-8"), *SECURITY_HEADERS, *(headers or [])],
    )


def json_answer(data: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> RawResponse:
    return RawResponse(
        json.dumps(data).encode(), status, [("content-type", "application/json"), *SECURITY_HEADERS, *(headers or [])]
    )


def message_text(message: Mapping[str, Any] | None) -> str:
    """A message as readable text: its content, then its tool calls; JSON for anything else."""
    if message is None:
        return ""
    content = message.get("content")
    if isinstance(content, list):
        parts = [str(p.get("text", "")) if isinstance(p, dict) and "text" in p else json.dumps(p) for p in content]
        content = "\n".join(parts)
    text = str(content) if content else ""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        text += f"\n→ {function.get('name')}({function.get('arguments', '')}) [{call.get('id')}]"
    if message.get("tool_call_id"):
        text = f"[result of {message['tool_call_id']}]\n{text}"
    return text.strip()
