"""The inspector at /ui/: server-rendered pages over the stored log, behind the admin token.

`routes` is mounted by `proxy.serving.app`. Modules: `access` (token, session cookie, CSRF, security
headers), `guard` (the gate around every handler), `data` (reads through the store), `reconstruct`
(what a past call sent, rebuilt from the log), `charts` (inline SVG), `html` (the page frame), and
the pages: `pages` (login, list, usage), `keys` (client keys, budgets and limits), `conversation`,
`call_page` (the diff, where the tokens went), `memories` (long-term memory: see, edit, approve,
delete), `shadow_page` (shadow pairs: divergence against the A/A floor, the diverged pairs).
Static files (`static/`) ship as package data; nothing is loaded from elsewhere.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.routing import Route

from ..asgi import RawResponse
from ..errors import NotFound
from . import access, call_page, conversation, keys, memories, pages, shadow_page
from .access import SECURITY_HEADERS
from .guard import api, page

STATIC = {"style.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}


async def static(request: Request) -> RawResponse:
    access.admin_token(request)
    name = request.path_params["name"]
    if name not in STATIC:
        raise NotFound(f"Unknown path {request.url.path}.")
    body = resources.files(__package__).joinpath("static", name).read_bytes()
    return RawResponse(
        body, 200, [("content-type", STATIC[name]), *SECURITY_HEADERS[:-1], ("cache-control", "max-age=300")]
    )


async def home_redirect(request: Request) -> RawResponse:
    access.admin_token(request)
    return RawResponse(b"", 308, [("location", "/ui/"), *SECURITY_HEADERS])


C = "/ui/conversations/{id}"
routes = [
    Route("/ui", home_redirect, methods=["GET"]),
    Route("/ui/static/{name}", static, methods=["GET"]),
    Route("/ui/login", pages.login_page, methods=["GET"]),
    Route("/ui/login", pages.login, methods=["POST"]),
    Route("/ui/logout", pages.logout, methods=["POST"]),
    Route("/ui/", page(pages.conversations), methods=["GET"]),
    Route("/ui/usage", page(pages.usage), methods=["GET"]),
    Route("/ui/shadow", page(shadow_page.shadow_page), methods=["GET"]),
    Route("/ui/keys", page(keys.keys_page), methods=["GET"]),
    Route("/ui/keys/{id}/revoke", page(keys.revoke_key), methods=["POST"]),
    Route("/ui/memories", page(memories.memories_page), methods=["GET"]),
    Route("/ui/memories/{id}/edit", page(memories.edit_memory), methods=["POST"]),
    Route("/ui/memories/{id}/approve", page(memories.approve_memory), methods=["POST"]),
    Route("/ui/memories/{id}/delete", page(memories.delete_memory), methods=["POST"]),
    Route(C, page(conversation.conversation), methods=["GET"]),
    Route(C + "/events", page(conversation.events_page), methods=["GET"]),
    Route(C + "/search", page(conversation.search_page), methods=["GET"]),
    Route(C + "/export.json", api(conversation.export), methods=["GET"]),
    Route(C + "/delete", page(conversation.delete_confirm), methods=["GET"]),
    Route(C + "/delete", page(conversation.delete), methods=["POST"]),
    Route(C + "/calls/{call}", page(call_page.call_page), methods=["GET"]),
    Route(C + "/tokens", page(call_page.tokens_page), methods=["GET"]),
    Route("/ui/api/conversations", api(pages.conversations_json), methods=["GET"]),
    Route("/ui/api/usage", api(pages.usage_json), methods=["GET"]),
    Route("/ui/api/shadow", api(shadow_page.shadow_json), methods=["GET"]),
    Route("/ui/api" + C[3:] + "/state", api(conversation.state_json), methods=["GET"]),
    Route("/ui/api" + C[3:] + "/calls/{call}", api(call_page.call_json), methods=["GET"]),
    Route("/ui/api" + C[3:] + "/calls/{call}/elided/{seq}", api(call_page.elided_json), methods=["GET"]),
    Route("/ui/api" + C[3:] + "/tokens", api(call_page.tokens_json), methods=["GET"]),
]
