"""Claude Code's own compaction call is a side call of its session, not a turn (`proxy.side_calls`).

The shapes are Claude Code's, sent as raw HTTP on the Messages API: `x-claude-code-session-id`,
the newest message marked with `cache_control` (the marker moves to the newest block each turn),
then `/compact`: the history with the summary instructions as the newest user text -- a new
user message after the last answer, or, after a turn the user interrupted (its answer never
arrived whole, so the history ends with that user message), a second text block of that
message carrying the marker. Then the history rebuilt from the summary. One conversation, the
compaction recorded as `client_compaction`, nothing of it in the line, and two branches: the
session's line and the rebuilt one, its next branch after the compaction call (`proxy.rebuilt`).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import pytest

from tests.support.anthropic_upstream import Reply
from tests.support.proxy_process import ProxyProcess

MODEL = "claude-compact-test"
CC = {"type": "ephemeral"}
SESSION = "x-claude-code-session-id"
TOOLS = [{"name": "Bash", "description": "run a command", "input_schema": {"type": "object", "properties": {}}}]
COMPACT = (
    "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n"
    "Your task is to create a detailed summary of the conversation so far, paying close attention to "
    "the user's explicit requests and your previous actions."
)
REBUILT = "This session is being continued from a previous conversation that ran out of context."
SUMMARY = "The user ran steps 0 to 2; each answered ok, and step 3 is next."


def _config(url: str) -> dict[str, Any]:
    return {
        "routes": [
            {
                "name": "claude",
                "match": {"model": "claude-*", "path": "/v1/messages"},
                "upstream": {"base_url": url, "api_key_env": "UPSTREAM_KEY"},
                "policy": "default",
            }
        ],
        "policies": {"default": {"context_window": 200000, "max_output_tokens": 4096}},
    }


def _post(p: ProxyProcess, api_key: str, session: str, messages: list[dict[str, Any]], stream: bool = False) -> str:
    body = {"model": MODEL, "max_tokens": 256, "system": "You are Claude Code.", "tools": TOOLS, "messages": messages}
    headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01", SESSION: session}
    r = httpx.post(f"{p.url}/v1/messages", json={**body, "stream": stream}, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return str(r.headers["x-conversation-id"])


def _cut(p: ProxyProcess, api_key: str, session: str, messages: list[dict[str, Any]]) -> str:
    """A streamed turn the upstream breaks off after its first events: the client saw part of it."""
    body = {"model": MODEL, "max_tokens": 256, "system": "You are Claude Code.", "tools": TOOLS, "stream": True}
    headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01", SESSION: session}
    with httpx.stream("POST", f"{p.url}/v1/messages", json={**body, "messages": messages}, headers=headers) as r:
        assert r.status_code == 200
        assert b"message_stop" not in r.read()
        return str(r.headers["x-conversation-id"])


def _text(text: str, marked: bool = False) -> dict[str, Any]:
    return {"type": "text", "text": text, **({"cache_control": CC} if marked else {})}


def _session(p: ProxyProcess, api_key: str, session: str) -> tuple[str, list[dict[str, Any]]]:
    """Two answered turns, the marker on the newest prompt (a marked block, re-sent as a string on
    the next turn); the history as the next request re-sends it."""
    history: list[dict[str, Any]] = []
    conversation = ""
    for n in range(2):
        conversation = _post(p, api_key, session, [*history, {"role": "user", "content": [_text(f"step {n}", True)]}])
        history += [
            {"role": "user", "content": f"step {n}"},
            {"role": "assistant", "content": [_text(f"ok: step {n}")]},
        ]
    return conversation, history


@pytest.mark.parametrize("interrupted", [False, True], ids=["after-an-answer", "after-an-interrupted-turn"])
def test_claude_code_compact_is_a_side_call_and_the_rebuilt_history_its_next_branch(
    proxy, anthropic_upstream, api_key, interrupted
):
    p = proxy(fresh=True, **_config(anthropic_upstream.url))
    session = str(uuid.uuid4())
    conversation, history = _session(p, api_key, session)
    if interrupted:  # the third turn's stream is cut before its answer is whole: no answer stored
        anthropic_upstream.push(Reply(text="a long answer that never", drop_after_events=4))
        cut = [*history, {"role": "user", "content": [_text("step 2", marked=True)]}]
        assert _cut(p, api_key, session, cut) == conversation
        last = {"role": "user", "content": [_text("step 2"), _text(COMPACT, marked=True)]}
        compaction = [*history, last]
    else:
        compaction = [*history, {"role": "user", "content": [_text(COMPACT, marked=True)]}]
    p.wait_calls(conversation, 3 if interrupted else 2)
    line = [str(e["message"]["content"]) for e in p.events(conversation)]

    anthropic_upstream.push(Reply(text=f"<summary>{SUMMARY}</summary>"))
    assert _post(p, api_key, session, compaction) == conversation

    calls = p.wait_calls(conversation, 4 if interrupted else 3)
    assert [c["purpose"] for c in calls].count("client_compaction") == 1
    assert len(p.conversation(conversation)["branches"]) == 1
    assert [str(e["message"]["content"]) for e in p.events(conversation)] == line  # nothing of it stored

    rebuilt = [
        {"role": "user", "content": f"{REBUILT}\nSummary:\n{SUMMARY}"},
        {"role": "user", "content": "step 3"},
    ]
    assert _post(p, api_key, session, rebuilt) == conversation
    branches = p.conversation(conversation)["branches"]
    assert len(branches) == 2
    compacted = next(c for c in p.calls(conversation) if c["purpose"] == "client_compaction")
    assert [(b["parent_id"], b["fork_seq"]) for b in branches if b["parent_id"]] == [(compacted["branch_id"], 0)]
    metrics = httpx.get(f"{p.url}/metrics", timeout=10).text
    assert 'ctxproxy_identity_total{how="side_call"} 1' in metrics
    assert re.findall(r'ctxproxy_forks_total\{cause="(\w+)"\} (\S+)', metrics) == [("client_compaction", "1")]


def test_a_compaction_prompt_on_a_history_never_seen_is_a_turn(proxy, anthropic_upstream, api_key):
    """Nothing stored to be a side call of: the request is ingested as any first request."""
    p = proxy(fresh=True, **_config(anthropic_upstream.url))
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    conversation = _post(p, api_key, str(uuid.uuid4()), [*messages, {"role": "user", "content": COMPACT}])
    assert [c["purpose"] for c in p.wait_calls(conversation, 1)] == ["main"]
    assert len(p.events(conversation)) == 4
