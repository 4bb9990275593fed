"""Tenant isolation over every endpoint, generated from the app's route table.

Tenant A (client alice) holds a conversation with a secret marker; tenant M (client mallory)
probes every endpoint with everything it could know or guess of it: A's client-chosen id, A's
internal id, A's opening turns verbatim (the marker comes after them). The matrix below must
have one entry per (method, path) of the Starlette route table, so a new endpoint without an
entry fails `test_the_matrix_covers_every_route`.
Measured: cross-tenant reads (the marker in any answer or upstream request caused by M)
and writes (any change to what the admin API shows of A's conversation): both must be 0; A's
objects answer M's scoped lookups with 404.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from proxy.config_file import parse_config
from proxy.serving.app import create_app
from proxy.serving.endpoints import EMBEDDINGS_PATHS
from tests.support.e2e import user
from tests.support.proxy_process import ADMIN_TOKEN

pytestmark = pytest.mark.slow

ALICE, MALLORY = "ck-matrix-alice-" + "1" * 20, "ck-matrix-mallory-" + "2" * 20
CLIENTS = [
    {"name": "alice", "key_sha256": hashlib.sha256(ALICE.encode()).hexdigest(), "tenant": "team-a"},
    {"name": "mallory", "key_sha256": hashlib.sha256(MALLORY.encode()).hexdigest(), "tenant": "team-m"},
]
CONVERSATION_PATHS = ["", "/events", "/calls", "/search", "/projection", "/checkpoints"]


def route_table() -> set[tuple[str, str]]:
    config = parse_config({"routes": [{"name": "r", "upstream": {"base_url": "http://127.0.0.1:9/v1"}}]}, env={})
    app = create_app(config, env={})
    table = {("POST", path) for path in app.model_paths}  # dispatched before starlette's router
    for route in app.routes:
        methods = set(getattr(route, "methods", None) or ()) - {"HEAD"} or {"HEAD"}
        table.update((method, route.path) for method in methods)
    return table


class Probe:
    """What M's probes saw: every answer body and every upstream request they caused."""

    def __init__(self, p: Any, upstream: Any, secrets: list[str]) -> None:
        self.p, self.upstream, self.secrets = p, upstream, secrets
        self.answers: list[tuple[str, bytes]] = []
        self.probes = 0

    def send(self, what: str, method: str, path: str, key: str | None = MALLORY, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}))
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        seen = len(self.upstream.requests)
        r = httpx.request(method, f"{self.p.url}{path}", headers=headers, timeout=30, **kw)
        self.probes += 1
        self.answers.append((what, r.content + json.dumps(dict(r.headers)).encode()))
        for sent in self.upstream.requests[seen:]:
            self.answers.append((f"{what} -> upstream", sent.raw + json.dumps(sent.headers).encode()))
        return r

    def leaks(self) -> list[str]:
        return [what for what, data in self.answers for s in self.secrets if s.encode() in data]


def _model_call(path: str, body: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> Callable[..., None]:
    def check(probe: Probe, a: dict[str, Any]) -> None:
        for ref in (a["external_id"], a["id"]):
            probe.send(path, "POST", path, json=body([user("mallory asks")]), headers={"X-Conversation-Id": ref})
            own = probe.p.admin_json(f"conversations/{ref}", params={"tenant": "team-m"})
            assert own["id"] != a["id"] and own["tenant"] == "team-m"  # the id names mallory's own
        probe.send(f"{path} same history", "POST", path, json=body(a["history"]))
        for header in ({"Authorization": f"Bearer {ALICE[:-1]}"}, {}):
            r = httpx.post(f"{probe.p.url}{path}", json=body(a["history"]), headers=header, timeout=30)
            assert r.status_code == 401, r.text

    return check


def _chat_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": messages}


def _responses_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "gpt-4o", "input": messages, "store": False}


def _messages_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "gpt-4o", "max_tokens": 50, "messages": messages}


def _gemini_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    roles = {"assistant": "model"}
    contents = [{"role": roles.get(m["role"], "user"), "parts": [{"text": m["content"]}]} for m in messages]
    return {"contents": contents}


def _count(path: str, body: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> Callable[..., None]:
    """A count reads the conversation it would continue (read-only): named by A's ids or by A's
    own history, mallory's count is of mallory's tenant, never leaks A's bytes, stores nothing."""

    def check(probe: Probe, a: dict[str, Any]) -> None:
        before = probe.p.admin_json("conversations", params={"tenant": "team-m", "limit": 1000})["data"]
        for ref in (a["external_id"], a["id"]):
            r = probe.send(path, "POST", path, json=body(a["history"]), headers={"X-Conversation-Id": ref})
            assert r.status_code < 500, r.text
        r = probe.send(f"{path} same history", "POST", path, json=body(a["history"]))
        assert r.status_code < 500, r.text
        after = probe.p.admin_json("conversations", params={"tenant": "team-m", "limit": 1000})["data"]
        assert after == before

    return check


def _plain(path: str, method: str = "GET", **kw: Any) -> Callable[..., None]:
    def check(probe: Probe, a: dict[str, Any]) -> None:
        probe.send(path, method, path, **kw)

    return check


def _admin(suffix: str, method: str = "GET") -> Callable[..., None]:
    def check(probe: Probe, a: dict[str, Any]) -> None:
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        for ref in (a["external_id"], a["id"]):
            path = f"/admin/conversations/{ref}{suffix}"
            nobody = probe.send(path, method, path, key=None, headers=admin, params={"tenant": "team-z", "q": "x"})
            assert nobody.status_code == 404, (path, nobody.text)
            # mallory's own conversation of that name, if its probes made one -- never alice's
            scoped = probe.send(path, method, path, key=None, headers=admin, params={"tenant": "team-m", "q": "x"})
            assert scoped.status_code in (200, 404), (path, scoped.text)
            if scoped.status_code == 200:
                body = scoped.json()
                named = body.get("deleted") or body.get("conversation_id") or body.get("id")
                assert named and named != a["id"], (path, body)
            as_client = probe.send(path, method, path, key=MALLORY)
            assert as_client.status_code == 401, (path, as_client.text)

    return check


def _admin_collection(path: str) -> Callable[..., None]:
    def check(probe: Probe, a: dict[str, Any]) -> None:
        for key in (MALLORY, ALICE):
            assert probe.send(path, "GET", path, key=key).status_code == 401
        if path == "/admin/usage":
            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            r = probe.send(
                path, "GET", path, key=None, headers=admin, params={"tenant": "team-m", "conversation": a["id"]}
            )
            assert r.status_code == 200 and r.json()["totals"]["calls"] == 0, r.text

    return check


def _operator_global(method: str, path: str) -> Callable[..., None]:
    """Per route and model, no conversation's: a client key of either tenant gets 401."""

    def check(probe: Probe, a: dict[str, Any]) -> None:
        for key in (MALLORY, ALICE):
            assert probe.send(path, method, path, key=key).status_code == 401

    return check


def _memories(method: str, template: str) -> Callable[..., None]:
    """The memory admin API (proxy/serving/admin_memory.py): a client key of either tenant gets
    401; with the admin token, a memory of no tenant named is a 404 (tenants are asked by
    `?tenant=`, tests/e2e/test_memory.py covers what each tenant sees)."""

    def check(probe: Probe, a: dict[str, Any]) -> None:
        path = template.replace("{id}", "m_00" + "0" * 14)
        for key in (MALLORY, ALICE):
            assert probe.send(path, method, path, key=key, json={}).status_code == 401
        if "{id}" in template:
            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            r = probe.send(path, method, path, key=None, headers=admin, params={"tenant": "team-m"}, json={"text": "x"})
            assert r.status_code == 404, (path, r.text)

    return check


UI_OPEN = {("GET", "/ui"), ("GET", "/ui/login"), ("GET", "/ui/static/{name}")}
"""Inspector paths that answer without credentials: a redirect, the login form, static files."""


def _operator_only(method: str, template: str) -> Callable[..., None]:
    """The inspector (/ui) is behind the admin token: a client key of either tenant opens
    nothing of it (a 303 to the login form, 401, 403 or 404), and no answer carries A's data."""

    def check(probe: Probe, a: dict[str, Any]) -> None:
        for ref in (a["external_id"], a["id"]):
            path = template.replace("{id}", ref).replace("{call}", a["call"]).replace("{name}", "style.css")
            for key in (MALLORY, ALICE):
                r = probe.send(path, method, path, key=key, data={"token": key})
                if (method, template) not in UI_OPEN:
                    assert r.status_code in (303, 401, 403, 404), (path, r.status_code, r.text[:300])

    return check


MATRIX: dict[tuple[str, str], Callable[..., None]] = {
    ("POST", "/v1/chat/completions"): _model_call("/v1/chat/completions", _chat_body),
    ("POST", "/chat/completions"): _model_call("/chat/completions", _chat_body),
    ("POST", "/v1/responses"): _model_call("/v1/responses", _responses_body),
    ("POST", "/responses"): _model_call("/responses", _responses_body),
    ("POST", "/v1/messages"): _model_call("/v1/messages", _messages_body),
    ("POST", "/v1/messages/count_tokens"): _count("/v1/messages/count_tokens", _messages_body),
    ("POST", "/v1/responses/input_tokens"): _count("/v1/responses/input_tokens", _responses_body),
    ("POST", "/responses/input_tokens"): _count("/responses/input_tokens", _responses_body),
    ("POST", "/v1beta/models/{model}:countTokens"): _count("/v1beta/models/gpt-4o:countTokens", _gemini_body),
    ("POST", "/v1/models/{model}:countTokens"): _count("/v1/models/gpt-4o:countTokens", _gemini_body),
    ("POST", "/v1/responses/compact"): _model_call("/v1/responses/compact", _responses_body),
    ("POST", "/responses/compact"): _model_call("/responses/compact", _responses_body),
    ("GET", "/v1/models"): _plain("/v1/models"),
    **{("POST", path): _plain(path, "POST", json={"model": "gpt-4o", "input": "x"}) for path in EMBEDDINGS_PATHS},
    ("GET", "/"): _plain("/"),
    ("GET", "/healthz"): _plain("/healthz"),
    ("GET", "/metrics"): _plain("/metrics"),
    ("GET", "/admin/usage"): _admin_collection("/admin/usage"),
    ("GET", "/admin/conversations"): _admin_collection("/admin/conversations"),
    ("GET", "/admin/shadow"): _admin_collection("/admin/shadow"),
    ("GET", "/admin/estimates"): _operator_global("GET", "/admin/estimates"),
    ("GET", "/admin/recall/rejected"): _operator_global("GET", "/admin/recall/rejected"),
    ("DELETE", "/admin/recall/rejected"): _operator_global("DELETE", "/admin/recall/rejected"),
    ("DELETE", "/admin/conversations/{id}"): _admin("", "DELETE"),
    # client keys and quotas are the operator's (tests/e2e/test_keys_budgets.py covers them)
    ("GET", "/admin/keys"): _operator_global("GET", "/admin/keys"),
    ("POST", "/admin/keys"): _operator_global("POST", "/admin/keys"),
    ("DELETE", "/admin/keys/{id}"): _operator_global("DELETE", "/admin/keys/key_000000000000"),
    ("GET", "/admin/tenants"): _operator_global("GET", "/admin/tenants"),
    **{
        (method, path): _memories(method, path)
        for method, path in [
            ("GET", "/admin/memories"),
            ("POST", "/admin/memories"),
            ("GET", "/admin/memories/{id}"),
            ("PATCH", "/admin/memories/{id}"),
            ("DELETE", "/admin/memories/{id}"),
            ("POST", "/admin/memories/{id}/approve"),
        ]
    },
    **{("GET", f"/admin/conversations/{{id}}{suffix}"): _admin(suffix) for suffix in CONVERSATION_PATHS},
    # the inspector: one rule for all its paths, enforced by its guard (proxy/ui/guard.py)
    **{
        (method, path): _operator_only(method, path)
        for method, path in route_table()
        if path == "/ui" or path.startswith("/ui/")
    },
}


def test_the_matrix_covers_every_route() -> None:
    assert set(MATRIX) == route_table()


def _view(p: Any, conv: str) -> list[bytes]:
    head = p.admin(f"conversations/{conv}")
    parts = [head.content, p.admin(f"conversations/{conv}/calls").content]
    for branch in head.json()["branches"]:
        parts.append(p.admin(f"conversations/{conv}/events", params={"branch": branch["id"]}).content)
    parts.append(p.admin(f"conversations/{conv}/checkpoints").content)
    return parts


def test_no_endpoint_reads_or_writes_another_tenants_conversation(proxy, upstream):
    p = proxy(open_access=False, clients=CLIENTS)
    marker = f"alice-secret-{uuid.uuid4().hex}"
    ref = f"matrix-{uuid.uuid4().hex}"
    opening = [user("alice opens the thread")]
    r = p.post_chat(ALICE, _chat_body(opening), headers={"X-Conversation-Id": ref})
    assert r.status_code == 200
    opening.append(r.json()["choices"][0]["message"])
    r = p.post_chat(
        ALICE, _chat_body([*opening, user(f"the launch code is {marker}")]), headers={"X-Conversation-Id": ref}
    )
    assert r.status_code == 200
    history = [*opening, user("mallory continues")]  # what mallory could know: the opening, not the rest
    conv = p.admin_json(f"conversations/{ref}", params={"tenant": "team-a"})
    p.wait_calls(conv["id"], 2)
    a = {"id": conv["id"], "external_id": ref, "history": history, "call": p.calls(conv["id"])[0]["id"]}
    before = _view(p, conv["id"])

    probe = Probe(p, upstream, [marker])
    for check in MATRIX.values():
        check(probe, a)
    assert probe.leaks() == [], "cross-tenant reads"
    assert _view(p, conv["id"]) == before, "cross-tenant writes"
    assert probe.probes >= 40
    # mallory's own requests did land -- in mallory's tenant
    mine = [c for c in p.admin_json("conversations", params={"limit": 1000})["data"] if c["tenant"] == "team-m"]
    assert mine and all(c["id"] != conv["id"] for c in mine)
