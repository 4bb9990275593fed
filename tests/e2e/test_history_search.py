"""GET /admin/conversations/{id}/search: people search a branch's whole stored history."""

from __future__ import annotations

import uuid

from tests.support.e2e import assert_openai_error, user
from tests.support.upstream_server import Reply, tool_call

TOOLS = [
    {
        "type": "function",
        "function": {"name": "bash", "description": "run", "parameters": {"type": "object", "properties": {}}},
    }
]


def _conversation(p, upstream, api_key, marker: str) -> str:
    """A stored history: a user message, a tool call whose result is large, then several answers."""
    client = p.client(api_key)
    call = tool_call("bash", {"cmd": "cat /etc/app.conf"})
    upstream.push(Reply(tool_calls=[call]))
    history = [user(f"{marker} Goal: deploy the app. Budget 150 EUR.")]
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, tools=TOOLS)
    conv = raw.headers["x-conversation-id"]
    history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
    result = "x" * 20_000 + " listen_port = 8443 " + "y" * 20_000
    history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    for i in range(6):
        upstream.push(Reply(content=f"answer {i}: the staging DB is fine"))
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, tools=TOOLS)
        history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        history.append(user(f"next {i}"))
    p.wait_calls(conv, 7)
    return conv


def test_search_finds_tool_results_pages_and_filters(proxy, upstream, api_key):
    p = proxy()
    conv = _conversation(p, upstream, api_key, f"search-{uuid.uuid4().hex}")
    seqs = {e["seq"]: e for e in p.events(conv)}

    page = p.admin_json(f"conversations/{conv}/search", params={"q": "LISTEN_PORT 8443"})
    (hit,) = page["data"]
    assert page["conversation_id"] == conv and page["next_cursor"] is None
    assert hit["role"] == "tool" and hit["tool"] == "bash" and hit["truncated"] is True
    assert "listen_port = 8443" in hit["excerpt"] and len(hit["excerpt"]) < 400
    assert seqs[hit["seq"]]["role"] == "tool" and hit["event"] == hit["seq"]
    assert isinstance(hit["created_at"], float)

    # a phrase, paged two at a time, oldest first, until next_cursor is null
    seen, cursor = [], None
    while True:
        params = {"q": '"staging db"', "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = p.admin_json(f"conversations/{conv}/search", params=params)
        assert len(page["data"]) <= 2
        seen += [h["seq"] for h in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 6 and seen == sorted(seen)
    assert all("answer" in seqs[s]["message"]["content"] for s in seen)

    assert [h["role"] for h in p.admin_json(f"conversations/{conv}/search", params={"q": "app.conf"})["data"]] == [
        "assistant"
    ]
    only_user = p.admin_json(f"conversations/{conv}/search", params={"q": "budget", "role": "user"})["data"]
    assert len(only_user) == 1 and "150 EUR" in only_user[0]["excerpt"]
    assert p.admin_json(f"conversations/{conv}/search", params={"q": "budget", "role": "tool"})["data"] == []
    by_tool = p.admin_json(f"conversations/{conv}/search", params={"q": "8443", "tool": "bash"})["data"]
    assert len(by_tool) == 1
    assert p.admin_json(f"conversations/{conv}/search", params={"q": "8443", "tool": "grep"})["data"] == []


def test_search_bad_params_and_unknown_conversation(proxy, upstream, api_key):
    p = proxy()
    conv = _conversation(p, upstream, api_key, f"bad-{uuid.uuid4().hex}")
    for params in ({}, {"q": "  "}, {"q": "x", "role": "robot"}, {"q": "x", "limit": 0}, {"q": "x", "cursor": "abc"}):
        assert_openai_error(p.admin(f"conversations/{conv}/search", params=params), 400)
    assert_openai_error(p.admin(f"conversations/{conv}/search", params={"q": "x", "branch": "br_nope"}), 404)
    missing = f"conv-does-not-exist-{uuid.uuid4().hex}"
    assert_openai_error(p.admin(f"conversations/{missing}/search", params={"q": "x"}), 404)
    assert_openai_error(p.admin(f"conversations/{conv}/search", params={"q": "x"}, token="wrong"), 401)
