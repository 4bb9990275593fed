"""Agent session headers: one session, one conversation, through the agent's own compaction.

Claude Code sends `x-claude-code-session-id` on every request of a session. After its own
`/compact` it rebuilds its history from a summary, so nothing matches: the session header links
that request to the session's conversation as a new branch. Side calls (a title request: one
message, no tools) get their own conversation and never fork the main line.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.upstream_server import Reply

HEADER = "x-claude-code-session-id"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "Bash",
            "description": "run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
SYSTEM = {"role": "system", "content": "You are an agent."}


def _post(p: Any, api_key: str, session: str | None, messages: list[dict[str, Any]], tools: Any = TOOLS) -> str:
    body: dict[str, Any] = {"model": "gpt-4o", "messages": [SYSTEM, *messages]}
    if tools:
        body["tools"] = tools
    response = p.post_chat(api_key, body, headers={HEADER: session} if session else None)
    assert response.status_code == 200, response.text
    return str(response.headers["x-conversation-id"])


def _turns(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out += [{"role": "user", "content": f"step {i}"}, {"role": "assistant", "content": "ok"}]
    return out


def _rebuilt(prompt: str) -> list[dict[str, Any]]:
    summary = f"This session is being continued from a previous conversation that ran out of context. Next: {prompt}"
    return [{"role": "user", "content": summary}, {"role": "user", "content": prompt}]


def test_compacted_session_continues_as_a_branch(proxy, upstream, api_key):
    p = proxy()
    session = str(uuid.uuid4())
    upstream.responder = lambda body: Reply(content="ok")
    conv = _post(p, api_key, session, [{"role": "user", "content": "step 0"}])
    for n in range(1, 3):
        assert _post(p, api_key, session, [*_turns(n), {"role": "user", "content": f"step {n}"}]) == conv
    p.wait_calls(conv, 3)
    (main,) = [b["id"] for b in p.conversation(conv)["branches"]]

    # a side call of the session: own conversation, the main one untouched
    title = _post(p, api_key, session, [{"role": "user", "content": "Write a title for: step 0"}], tools=None)
    assert title != conv
    assert len(p.conversation(conv)["branches"]) == 1

    # the agent compacted: a rebuilt history that matches nothing, same tools
    rebuilt = _rebuilt("step 3")
    assert _post(p, api_key, session, rebuilt) == conv
    branches = {b["id"]: b for b in p.conversation(conv)["branches"]}
    assert len(branches) == 2
    (new,) = [b for b in branches.values() if b["id"] != main]
    assert new["parent_id"] == main and new["fork_seq"] == 0

    # and goes on there: no further branch
    p.wait_calls(conv, 4)
    assert (
        _post(
            p,
            api_key,
            session,
            [*rebuilt, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "step 4"}],
        )
        == conv
    )
    assert len(p.conversation(conv)["branches"]) == 2
    events = p.events(conv, branch=new["id"])
    assert [e["message"]["content"] for e in events][-2:] == ["step 4", "ok"]


def test_side_call_first_does_not_claim_the_session(proxy, upstream, api_key):
    p = proxy()
    session = str(uuid.uuid4())
    upstream.responder = lambda body: Reply(content="ok")
    title = _post(p, api_key, session, [{"role": "user", "content": "Write a title"}], tools=None)
    conv = _post(p, api_key, session, [{"role": "user", "content": "the objective"}])
    assert conv != title
    p.wait_calls(conv, 1)
    assert _post(p, api_key, session, _rebuilt("go on")) == conv
    # a request with other tools is a side call too
    other = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "name": "Classify"}}]
    classify = [{"role": "user", "content": "classify this"}]
    assert _post(p, api_key, session, classify, tools=other) not in (conv, title)
    assert len(p.conversation(conv)["branches"]) == 2


def test_session_is_tenant_scoped_and_needs_the_header(proxy, upstream, api_key):
    p = proxy()
    session = str(uuid.uuid4())
    upstream.responder = lambda body: Reply(content="ok")
    conv = _post(p, api_key, session, [{"role": "user", "content": "objective"}])
    p.wait_calls(conv, 1)
    assert _post(p, "other-" + api_key, session, _rebuilt("go on")) != conv  # another tenant
    assert _post(p, api_key, None, _rebuilt("go on, no header")) != conv
    assert _post(p, api_key, str(uuid.uuid4()), _rebuilt("another session")) != conv
    assert len(p.conversation(conv)["branches"]) == 1


def test_explicit_conversation_id_wins(proxy, upstream, api_key):
    p = proxy()
    session = str(uuid.uuid4())
    upstream.responder = lambda body: Reply(content="ok")
    conv = _post(p, api_key, session, [{"role": "user", "content": "objective"}])
    p.wait_calls(conv, 1)
    explicit = "mine-" + uuid.uuid4().hex
    body = {"model": "gpt-4o", "messages": [SYSTEM, *_rebuilt("go on")], "tools": TOOLS}
    response = p.post_chat(api_key, body, headers={HEADER: session, "X-Conversation-Id": explicit})
    assert response.headers["x-conversation-id"] == explicit
    assert len(p.conversation(conv)["branches"]) == 1


def test_configured_session_headers(proxy, upstream, api_key):
    p = proxy(session_headers=["session_id"])
    session = str(uuid.uuid4())
    upstream.responder = lambda body: Reply(content="ok")

    def post(headers: dict[str, str], messages: list[dict[str, Any]]) -> str:
        response = p.post_chat(api_key, {"model": "gpt-4o", "messages": messages, "tools": TOOLS}, headers=headers)
        return str(response.headers["x-conversation-id"])

    conv = post({"session_id": session}, [{"role": "user", "content": "objective"}])
    p.wait_calls(conv, 1)
    assert post({"session_id": session}, _rebuilt("go on")) == conv
    assert post({HEADER: session}, _rebuilt("not configured here")) != conv
