"""Secret canaries: the client key, the operator's upstream key and the admin/metrics token, sent
in headers, in request bodies and echoed back by the upstream in error bodies and headers, never
appear in the proxy's answers, records, metrics, logs or database files -- in plain, hex or
base64 form. Measured: occurrences, which must be 0."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from typing import Any

import httpx

from tests.support.e2e import user
from tests.support.proxy_process import ADMIN_TOKEN, UPSTREAM_KEY
from tests.support.upstream_server import Reply, openai_error

CLIENT_KEY = "ck-canary-client-" + uuid.uuid4().hex


def forms(secret: str) -> dict[str, bytes]:
    raw = secret.encode()
    return {
        "plain": raw,
        "hex": raw.hex().encode(),
        "base64": base64.b64encode(raw).rstrip(b"="),
        "base64url": base64.urlsafe_b64encode(raw).rstrip(b"="),
    }


CANARIES = {"client key": CLIENT_KEY, "upstream key": UPSTREAM_KEY, "admin token": ADMIN_TOKEN}


def test_no_secret_reaches_answers_records_metrics_logs_or_the_database(proxy, upstream):
    p = proxy(
        fresh=True,
        open_access=False,
        clients=[{"name": "canary", "key_sha256": hashlib.sha256(CLIENT_KEY.encode()).hexdigest()}],
        metrics_token_env="CTXPROXY_ADMIN_TOKEN",
    )
    seen: list[tuple[str, bytes]] = []

    def keep(what: str, r: httpx.Response) -> httpx.Response:
        seen.append((what, r.content + json.dumps(dict(r.headers)).encode()))
        return r

    def chat(what: str, body: Any, **headers: str) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json", **headers}
        return keep(what, httpx.post(f"{p.base_url}/chat/completions", content=content, headers=h, timeout=30))

    ref = f"canary-{uuid.uuid4().hex}"
    history = [user("hello")]
    ok = chat("ok", {"model": "gpt-4o", "messages": history}, **{"X-Conversation-Id": ref})
    assert ok.status_code == 200
    history.append(ok.json()["choices"][0]["message"])
    for header in ("x-api-key", "api-key"):
        r = keep(
            header,
            httpx.post(
                f"{p.base_url}/chat/completions",
                json={"model": "gpt-4o", "messages": [*history, user(f"via {header}")]},
                headers={header: CLIENT_KEY, "X-Conversation-Id": ref},
                timeout=30,
            ),
        )
        assert r.status_code == 200
    # the upstream echoes the key it was sent, in its error body and in a header
    echo = openai_error(f"Incorrect API key provided: {UPSTREAM_KEY}. Bearer {UPSTREAM_KEY}", code="invalid_api_key")
    for status, stream in ((401, False), (403, True), (500, False), (429, True)):
        upstream.push(Reply(status=status, error_body=echo, headers={"x-debug-key": UPSTREAM_KEY}))
        body = {"model": "gpt-4o", "messages": [*history, user(f"echo {status}")], "stream": stream}
        assert chat(f"upstream {status}", body, **{"X-Conversation-Id": ref}).status_code == status
    # secrets inside request bodies: non-message fields, malformed bodies, wrong credentials
    chat("body fields", {"model": "gpt-4o", "messages": history, "user": ADMIN_TOKEN, "metadata": {"k": UPSTREAM_KEY}})
    chat("bad json", b'{"model": "gpt-4o", "api_key": "' + CLIENT_KEY.encode() + b'", "messages": [')
    chat("bad type", {"model": "gpt-4o", "messages": {"key": CLIENT_KEY}})
    chat("bad role", {"model": "gpt-4o", "messages": [{"role": ADMIN_TOKEN, "content": "x"}]})
    for wrong in (CLIENT_KEY[:-1], CLIENT_KEY + "0", ADMIN_TOKEN, UPSTREAM_KEY):
        assert (
            chat("wrong key", {"model": "gpt-4o", "messages": [user("x")]}, Authorization=f"Bearer {wrong}").status_code
            == 401
        )
        keep("admin wrong", p.admin("conversations", token=wrong + "x"))
        keep("admin client key", p.admin("conversations", token=CLIENT_KEY))
        keep("metrics wrong", httpx.get(f"{p.url}/metrics", headers={"Authorization": f"Bearer {wrong}x"}, timeout=10))
    # everything the operator can read back
    conv = p.admin_json(f"conversations/{ref}")
    p.wait_calls(conv["id"], 7)
    for path in ("", "/events", "/calls", "/checkpoints", "/projection", "/search?q=hello"):
        keep(f"admin {path}", p.admin(f"conversations/{ref}{path}"))
    keep("conversations", p.admin("conversations", params={"limit": 1000}))
    keep("usage", p.admin("usage", params={"group_by": "route"}))
    keep("metrics", httpx.get(f"{p.url}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10))
    p.stop()  # flush the logs and the WAL as a crash would not: what is on disk is all there is
    for path in sorted(p.workdir.iterdir()):
        if path.suffix == ".log" or path.name.startswith(p.db_path.name):
            seen.append((path.name, path.read_bytes()))
    assert any(name.startswith(p.db_path.name) for name, _ in seen) and any(".log" in name for name, _ in seen)

    found = [
        (what, name, form)
        for what, data in seen
        for name, secret in CANARIES.items()
        for form, needle in forms(secret).items()
        if needle in data
    ]
    assert found == [], f"{len(found)} secret occurrences"
    assert len(seen) >= 39  # answers, read-backs, log and database files


def test_caller_key_echoed_by_the_upstream_is_kept_out_of_answers_records_and_files(proxy, upstream):
    """A route without an operator key forwards the caller's own key; an upstream that echoes it
    back in an error must not have it written into the records, the logs or the database."""
    p = proxy(fresh=True)
    own = "sk-own-canary-" + uuid.uuid4().hex
    seen: list[tuple[str, bytes]] = []
    ref = f"own-{uuid.uuid4().hex}"
    echo = openai_error(f"Incorrect API key provided: {own}.", code="invalid_api_key")
    opened = httpx.post(  # the conversation exists: a failed first request would leave none (settle.reject)
        f"{p.base_url}/chat/completions",
        json={"model": "pass-echo", "messages": [user("opens the conversation")]},
        headers={"Authorization": f"Bearer {own}", "X-Conversation-Id": ref},
        timeout=30,
    )
    assert opened.status_code == 200
    for status, stream in ((401, False), (401, True), (500, False)):
        upstream.push(Reply(status=status, error_body=echo))
        r = httpx.post(
            f"{p.base_url}/chat/completions",
            json={"model": "pass-echo", "messages": [user(f"echo {status} {stream}")], "stream": stream},
            headers={"Authorization": f"Bearer {own}", "X-Conversation-Id": ref},
            timeout=30,
        )
        assert r.status_code == status
        assert r.json()["error"]["code"] == "invalid_api_key"  # the upstream's error, in its shape
        seen.append((f"answer {status}", r.content + json.dumps(dict(r.headers)).encode()))
    assert upstream.chat_requests[-1].headers["authorization"] == f"Bearer {own}"  # it was forwarded
    conv = p.admin_json(f"conversations/{ref}")
    p.wait_calls(conv["id"], 4)
    seen.append(("calls", p.admin(f"conversations/{ref}/calls").content))
    p.stop()
    for path in sorted(p.workdir.iterdir()):
        if path.suffix == ".log" or path.name.startswith(p.db_path.name):
            seen.append((path.name, path.read_bytes()))
    found = [(what, form) for what, data in seen for form, needle in forms(own).items() if needle in data]
    assert found == [], f"{len(found)} occurrences of the caller's key"
    assert any(b"[redacted]" in data for what, data in seen if what.startswith("answer"))
