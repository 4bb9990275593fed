"""Who may see the inspector, over real HTTP against a real proxy: off without an admin token,
nothing without credentials, bearer or a signed session cookie, CSRF-proof changes, the security
headers. (The browser side of the login form is in test_ui_pages.py.)"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from proxy.ui import access
from tests.support.proxy_process import ADMIN_TOKEN, ProxyProcess

PAGES = ("/ui/", "/ui/usage", "/ui/api/conversations", "/ui/api/usage")


def conversation_pages(conversation: str) -> list[str]:
    return [
        f"/ui/conversations/{conversation}",
        f"/ui/conversations/{conversation}/events",
        f"/ui/conversations/{conversation}/tokens",
        f"/ui/conversations/{conversation}/search?q=secret",
        f"/ui/conversations/{conversation}/export.json",
        f"/ui/conversations/{conversation}/delete",
        f"/ui/api/conversations/{conversation}/state",
        f"/ui/api/conversations/{conversation}/tokens",
    ]


def start_conversation(p: ProxyProcess, api_key: str, text: str) -> str:
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": text}]
    )
    return raw.headers["x-conversation-id"]


def login(p: ProxyProcess, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        f"{p.url}/ui/login",
        data={"token": ADMIN_TOKEN},
        headers={"Origin": p.url, **(headers or {})},
        follow_redirects=False,
    )


def session(p: ProxyProcess) -> tuple[str, str]:
    """(cookie value, CSRF token from a rendered form) of a fresh login."""
    r = login(p)
    value = r.cookies[access.COOKIE]
    page = httpx.get(f"{p.url}/ui/", cookies={access.COOKIE: value})
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert match, "the logout form carries the CSRF token"
    return value, match.group(1)


def test_the_inspector_does_not_exist_without_an_admin_token(proxy: Any, api_key: str) -> None:
    p = proxy(admin_token_env=None)
    conversation = start_conversation(p, api_key, "the secret is swordfish")
    for path in (*PAGES, "/ui/login", "/ui/static/app.js", "/ui", *conversation_pages(conversation)):
        r = httpx.get(p.url + path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert r.status_code == 404, path
        assert r.json()["error"]["code"] == "not_found" and "swordfish" not in r.text
    assert httpx.post(f"{p.url}/ui/login", data={"token": ""}).status_code == 404


def test_no_page_shows_data_without_valid_credentials(proxy: Any, api_key: str) -> None:
    p = proxy()
    conversation = start_conversation(p, api_key, "the secret is swordfish")
    for path in (*PAGES, *conversation_pages(conversation)):
        r = httpx.get(p.url + path)
        assert r.status_code in (303, 401), path
        assert "swordfish" not in r.text and conversation not in r.text, path
        if r.status_code == 303:
            assert r.headers["location"] == "/ui/login"
        wrong = httpx.get(p.url + path, headers={"Authorization": "Bearer wrong"})
        assert wrong.status_code == 401 and "swordfish" not in wrong.text, path
        forged = httpx.get(p.url + path, cookies={access.COOKIE: "9999999999.abcd.0123"})
        assert forged.status_code in (303, 401) and "swordfish" not in forged.text, path
    expired = access.new_session(ADMIN_TOKEN, now=time.time() - access.SESSION_SECONDS - 5)
    r = httpx.get(f"{p.url}/ui/conversations/{conversation}", cookies={access.COOKIE: expired})
    assert r.status_code == 303 and "swordfish" not in r.text
    other_key = access.new_session("another-token")
    assert httpx.get(f"{p.url}/ui/", cookies={access.COOKIE: other_key}).status_code == 303
    api = httpx.get(f"{p.url}/ui/api/conversations")
    assert api.status_code == 401 and api.json()["error"]["type"] == "authentication_error"


def test_bearer_and_cookie_both_open_the_pages_with_security_headers(proxy: Any, api_key: str) -> None:
    p = proxy()
    conversation = start_conversation(p, api_key, "the secret is swordfish")
    cookie, _ = session(p)
    for path in (*PAGES, *conversation_pages(conversation)):
        for kw in ({"headers": {"Authorization": f"Bearer {ADMIN_TOKEN}"}}, {"cookies": {access.COOKIE: cookie}}):
            r = httpx.get(p.url + path, **kw)  # type: ignore[arg-type]
            assert r.status_code == 200, (path, r.text[:300])
            csp = r.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
            assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["cache-control"] == "no-store"
    page = httpx.get(f"{p.url}/ui/conversations/{conversation}/events", cookies={access.COOKIE: cookie})
    assert "swordfish" in page.text
    assert "<script>" not in page.text and " style=" not in page.text, "no inline script or style"


def test_login_sets_a_signed_http_only_strict_cookie_secure_behind_https(proxy: Any) -> None:
    p = proxy()
    wrong = httpx.post(f"{p.url}/ui/login", data={"token": "nope"}, headers={"Origin": p.url})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    r = login(p)
    assert r.status_code == 303 and r.headers["location"] == "/ui/" and ADMIN_TOKEN not in r.headers["location"]
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
    assert f"Max-Age={access.SESSION_SECONDS}" in cookie and "Secure" not in cookie
    assert ADMIN_TOKEN not in cookie
    behind_tls = login(p, {"X-Forwarded-Proto": "https"})
    assert "; Secure" in behind_tls.headers["set-cookie"]
    # a login posted from another site is refused
    foreign = httpx.post(f"{p.url}/ui/login", data={"token": ADMIN_TOKEN}, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403 and "set-cookie" not in foreign.headers
    cross = httpx.post(f"{p.url}/ui/login", data={"token": ADMIN_TOKEN}, headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403 and "set-cookie" not in cross.headers
    # the token is never taken from the URL
    in_url = httpx.get(f"{p.url}/ui/?token={ADMIN_TOKEN}", follow_redirects=False)
    assert in_url.status_code == 303


@pytest.mark.parametrize("attack", ["no proof", "wrong proof", "foreign origin", "cross-site fetch"])
def test_delete_and_logout_refuse_requests_without_the_csrf_proof(proxy: Any, api_key: str, attack: str) -> None:
    p = proxy()
    conversation = start_conversation(p, api_key, "keep me")
    cookie, csrf = session(p)
    form = {"no proof": {}, "wrong proof": {"csrf": "0" * 64}}.get(attack, {"csrf": csrf})
    headers = {
        "foreign origin": {"Origin": "https://evil.example"},
        "cross-site fetch": {"Sec-Fetch-Site": "cross-site"},
    }
    for path in (f"/ui/conversations/{conversation}/delete", "/ui/logout"):
        r = httpx.post(p.url + path, data=form, headers=headers.get(attack, {}), cookies={access.COOKIE: cookie})
        assert r.status_code == 403 and "set-cookie" not in r.headers, (path, attack, r.status_code, r.text[:200])
    assert p.admin(f"conversations/{conversation}").status_code == 200, "the conversation must survive"
    assert httpx.get(f"{p.url}/ui/", cookies={access.COOKIE: cookie}).status_code == 200, "nor the session end"


def test_delete_with_the_proof_or_the_bearer_token_deletes(proxy: Any, api_key: str) -> None:
    p = proxy()
    cookie, csrf = session(p)
    first = start_conversation(p, api_key, "first")
    r = httpx.post(
        f"{p.url}/ui/conversations/{first}/delete",
        data={"csrf": csrf},
        headers={"Origin": p.url},
        cookies={access.COOKIE: cookie},
    )
    assert r.status_code == 303 and p.admin(f"conversations/{first}").status_code == 404
    second = start_conversation(p, api_key, "second")
    r = httpx.post(f"{p.url}/ui/conversations/{second}/delete", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert r.status_code == 303 and p.admin(f"conversations/{second}").status_code == 404
    # a GET never deletes: it is the confirmation page
    third = start_conversation(p, api_key, "third")
    page = httpx.get(f"{p.url}/ui/conversations/{third}/delete", cookies={access.COOKIE: cookie})
    assert page.status_code == 200 and "cannot be undone" in page.text
    assert p.admin(f"conversations/{third}").status_code == 200
    logout = httpx.post(
        f"{p.url}/ui/logout", data={"csrf": csrf}, headers={"Origin": p.url}, cookies={access.COOKIE: cookie}
    )
    assert logout.status_code == 303 and "Max-Age=0" in logout.headers["set-cookie"]


def test_bad_parameters_are_clear_errors_not_500s(proxy: Any, api_key: str) -> None:
    p = proxy()
    conversation = start_conversation(p, api_key, "hello")
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    for path, status in (
        ("/ui/?limit=abc", 400),
        ("/ui/?before=yesterday", 400),
        ("/ui/usage?group_by=planet", 400),
        ("/ui/usage?range=forever", 400),
        ("/ui/conversations/c_nope", 404),
        (f"/ui/conversations/{conversation}?branch=b_nope", 404),
        (f"/ui/conversations/{conversation}/calls/call_nope", 404),
        (f"/ui/conversations/{conversation}/events?after=-1", 400),
        (f"/ui/conversations/{conversation}/search?q=%22", 400),
        ("/ui/api/conversations?limit=0", 400),
        ("/ui/static/../../etc/passwd", 404),
    ):
        r = httpx.get(p.url + path, headers=auth)
        assert r.status_code == status, (path, r.status_code, r.text[:300])
        assert "Traceback" not in r.text
    api = httpx.get(f"{p.url}/ui/api/conversations?limit=0", headers=auth)
    assert api.json()["error"]["param"] == "limit"


def test_revoking_a_key_needs_the_csrf_proof(proxy: Any) -> None:
    p = proxy()
    made = p.admin("keys", "POST", json={"name": "ui-revoke", "tenant": "team-r"}).json()
    path = f"{p.url}/ui/keys/{made['id']}/revoke"
    cookie, csrf = session(p)
    for form, headers in (({}, {}), ({"csrf": "0" * 64}, {}), ({"csrf": csrf}, {"Origin": "https://evil.example"})):
        r = httpx.post(path, data=form, headers=headers, cookies={access.COOKIE: cookie})
        assert r.status_code == 403, (form, headers, r.status_code, r.text[:200])
    assert made["id"] in [k["id"] for k in p.admin_json("keys")["data"]], "the key must survive"
    r = httpx.post(path, data={"csrf": csrf}, headers={"Origin": p.url}, cookies={access.COOKIE: cookie})
    assert r.status_code == 303 and r.headers["location"] == "/ui/keys"
    assert made["id"] not in [k["id"] for k in p.admin_json("keys")["data"]]
    again = httpx.post(path, data={"csrf": csrf}, headers={"Origin": p.url}, cookies={access.COOKIE: cookie})
    assert again.status_code == 404
