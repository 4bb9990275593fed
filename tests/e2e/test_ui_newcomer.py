"""What a newcomer meets on the way to a first inspected call: the inspector off says which
variable to export, the login page names it, the client's own conversation id opens its page,
and the Replay command names the config file the proxy runs with."""

from __future__ import annotations

import html
import re
import shlex
import uuid
from typing import Any

import httpx

from tests.support.proxy_process import ADMIN_TOKEN

BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def test_the_inspector_off_names_the_variable_to_export(proxy: Any) -> None:
    p = proxy(admin_token_env="CTXPROXY_NEWCOMER_UNSET_TOKEN")
    for path in ("/ui/", "/admin/conversations"):
        r = httpx.get(p.url + path, headers=BEARER)
        assert r.status_code == 404
        assert "CTXPROXY_NEWCOMER_UNSET_TOKEN" in r.json()["error"]["message"], (path, r.text)


def test_the_login_page_names_the_admin_token_variable(proxy: Any) -> None:
    p = proxy()
    page = httpx.get(p.url + "/ui/login")
    assert page.status_code == 200 and "$CTXPROXY_ADMIN_TOKEN" in page.text


def test_the_clients_own_conversation_id_opens_its_pages(proxy: Any, api_key: str) -> None:
    p = proxy()
    mine = f"my-thread-{uuid.uuid4().hex}"
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "hello newcomer"}],
        extra_headers={"X-Conversation-Id": mine},
    )
    assert raw.headers["x-conversation-id"] == mine
    internal = p.conversation(mine)["id"]
    for suffix in ("", "/events", "/tokens", "/export.json"):
        r = httpx.get(f"{p.url}/ui/conversations/{mine}{suffix}", headers=BEARER)
        assert r.status_code == 200, (suffix, r.text[:300])
    state = httpx.get(f"{p.url}/ui/api/conversations/{mine}/state", headers=BEARER)
    assert state.status_code == 200 and state.json()["id"] == internal
    assert httpx.get(f"{p.url}/ui/conversations/no-such-{mine}", headers=BEARER).status_code == 404


def test_the_replay_command_names_the_running_config(proxy: Any, api_key: str) -> None:
    p = proxy()
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "replay me"}]
    )
    page = httpx.get(f"{p.url}/ui/conversations/{raw.headers['x-conversation-id']}", headers=BEARER)
    command = html.unescape(re.search(r'id="replay" readonly value="([^"]+)"', page.text).group(1))
    words = shlex.split(command)
    assert words[words.index("--config") + 1] == str(p.config_path), command
    assert "$CTXPROXY_ADMIN_TOKEN" in command


def test_a_failed_first_call_names_no_conversation_that_is_gone(proxy: Any, api_key: str) -> None:
    """The newcomer's first call fails upstream (its key refused, its host unreachable): the
    request founded a conversation and left nothing in it, so the conversation is gone. The error
    then names no conversation for the inspector to 404 on; the failed call is in the ledger."""
    p = proxy(routes=[{"name": "down", "upstream": {"base_url": "http://127.0.0.1:9/v1"}}], fresh=True)
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"hi {uuid.uuid4().hex}"}]}
    r = httpx.post(f"{p.base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {api_key}"})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_unavailable", r.text
    assert "x-conversation-id" not in r.headers
    usage = p.admin_json("usage")
    assert usage["totals"]["calls"] == 1, usage
