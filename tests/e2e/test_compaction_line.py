"""The history an agent rebuilds after its own compaction continues the line (`proxy.rebuilt`).

The real anthropic SDK against the scripted Anthropic upstream, in Claude Code's shapes (those of
`test_client_compaction_call.py`): a session header, turns, the compaction request (the summary
prompt as the newest user text, the cache marker on it), the history rebuilt from the summary the
upstream answered, more turns. One conversation; the rebuilt history is the line's next branch,
linked to the compaction call; the inspector shows one boundary; the fork is counted by its cause.
A history that only resembles the summary, another session or another tenant never joins.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import Reply
from tests.support.proxy_process import ADMIN_TOKEN, ProxyProcess

MODEL = "claude-compact-line"
SESSION = "x-claude-code-session-id"
CC = {"type": "ephemeral"}
TOOLS = [{"name": "Bash", "description": "run a command", "input_schema": {"type": "object", "properties": {}}}]
COMPACT = (
    "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n"
    "Your task is to create a detailed summary of the conversation so far, paying close attention to "
    "the user's explicit requests and your previous actions."
)
FRAME = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The summary below covers the earlier portion of the conversation."
)
SUMMARY = (
    "1. Primary Request: the user ran steps 0 to 2 of the migration.\n\n"
    "2. Key facts: the launch code is 7431-ALPHA; the database lives on port 5433."
)
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


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


class Agent:
    """One Claude Code-like session through the anthropic SDK: its key (tenant), its session id."""

    def __init__(self, p: ProxyProcess, api_key: str, session: str) -> None:
        self.client = anthropic.Anthropic(
            base_url=p.url, api_key=api_key, max_retries=0, timeout=30, default_headers={SESSION: session}
        )

    def send(self, messages: list[dict[str, Any]]) -> tuple[str, str]:
        """The conversation the proxy put the request in, and the answer's text."""
        raw = self.client.messages.with_raw_response.create(
            model=MODEL, max_tokens=256, system="You are Claude Code.", tools=TOOLS, messages=messages
        )
        message = raw.parse()
        return raw.headers["x-conversation-id"], "".join(b.text for b in message.content if b.type == "text")

    def turns(self, history: list[dict[str, Any]], names: list[str]) -> tuple[str, list[dict[str, Any]]]:
        """Answered turns, the marker on the newest prompt (re-sent as a string next turn)."""
        conversation = ""
        for name in names:
            prompt = {"role": "user", "content": [{"type": "text", "text": name, "cache_control": CC}]}
            conversation, answer = self.send([*history, prompt])
            answered = {"role": "assistant", "content": [{"type": "text", "text": answer}]}
            history = [*history, {"role": "user", "content": name}, answered]
        return conversation, history


def _compacted(p: ProxyProcess, upstream: Any, agent: Agent) -> tuple[str, list[dict[str, Any]]]:
    """Three turns, then the agent's compaction answered with SUMMARY; the history it had."""
    conversation, history = agent.turns([], ["step 0", "step 1", "step 2"])
    upstream.push(Reply(text=f"<analysis>the steps ran</analysis>\n<summary>\n{SUMMARY}\n</summary>"))
    prompt = {"role": "user", "content": [{"type": "text", "text": COMPACT, "cache_control": CC}]}
    assert agent.send([*history, prompt])[0] == conversation
    return conversation, history


def _rebuilt(summary: str) -> list[dict[str, Any]]:
    """The history Claude Code rebuilds: the framed summary (blank lines re-wrapped), the next prompt."""
    return [
        {"role": "user", "content": f"{FRAME}\n\nSummary:\n{summary.replace(chr(10) * 2, chr(10))}"},
        {"role": "user", "content": "step 3"},
    ]


def _metrics(p: ProxyProcess) -> dict[str, str]:
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    return dict(re.findall(r'ctxproxy_forks_total\{cause="(\w+)"\} (\S+)', text))


def test_the_rebuilt_history_continues_the_line_after_the_compaction_call(proxy, anthropic_upstream, api_key):
    p = proxy(fresh=True, **_config(anthropic_upstream.url))
    agent = Agent(p, api_key, str(uuid.uuid4()))
    conversation, _ = _compacted(p, anthropic_upstream, agent)
    line = p.events(conversation)

    again, history = agent.turns(_rebuilt(SUMMARY)[:1], ["step 3", "step 4", "step 5"])
    assert again == conversation

    calls = p.wait_calls(conversation, 7)
    compaction = next(c for c in calls if c["purpose"] == "client_compaction")
    assert [c["purpose"] for c in calls].count("client_compaction") == 1
    branches = p.conversation(conversation)["branches"]
    assert len(branches) == 2, branches
    continued = next(b for b in branches if b["parent_id"])
    assert (continued["parent_id"], continued["fork_seq"]) == (compaction["branch_id"], 0)
    events = p.events(conversation, branch=continued["id"])
    assert [e["role"] for e in events] == [m["role"] for m in history] and FRAME in str(events[0]["message"])
    assert p.events(conversation, branch=compaction["branch_id"]) == line  # the old line is as it was
    assert _metrics(p) == {"client_compaction": "1"}

    page = httpx.get(f"{p.url}/ui/conversations/{conversation}", headers=ADMIN, timeout=10)
    assert page.status_code == 200
    boundaries = re.findall(r'<li class="boundary" data-boundary="client_compaction" data-call="([^"]+)">', page.text)
    assert boundaries == [compaction["id"]]
    assert f'href="/ui/conversations/{conversation}/calls/{compaction["id"]}"' in page.text
    assert "continues the line" in page.text and "forked after" not in page.text
    call_page = httpx.get(f"{p.url}/ui/conversations/{conversation}/calls/{compaction['id']}", headers=ADMIN)
    assert call_page.status_code == 200


@pytest.mark.parametrize("edit", ["one word changed", "shortened"])
def test_a_summary_that_only_resembles_the_recorded_one_links_nothing(proxy, anthropic_upstream, api_key, edit):
    """The same session, the same framing, a summary not exactly the recorded one: the session's
    older rule forks a branch from the start (cause `start`), not linked to the compaction; a new
    session with it is a new conversation."""
    p = proxy(fresh=True, **_config(anthropic_upstream.url))
    session = str(uuid.uuid4())
    conversation, _ = _compacted(p, anthropic_upstream, Agent(p, api_key, session))
    near = SUMMARY.replace("7431", "7432") if edit == "one word changed" else SUMMARY[: len(SUMMARY) // 2]

    assert Agent(p, api_key, session).send(_rebuilt(near))[0] == conversation
    assert _metrics(p) == {"start": "1"}
    # another session of the tenant (its history shares no message with the one just stored)
    other, _ = Agent(p, api_key, str(uuid.uuid4())).send(_rebuilt(near + "\n3. Next step: step 3."))
    assert other != conversation
    assert _metrics(p) == {"start": "1"}
    page = httpx.get(f"{p.url}/ui/conversations/{conversation}", headers=ADMIN, timeout=10)
    assert "data-boundary" not in page.text


def test_another_tenants_rebuilt_history_never_joins(proxy, anthropic_upstream, api_key):
    """Another key (tenant) with the same session id and the exact summary: its own conversation."""
    p = proxy(fresh=True, **_config(anthropic_upstream.url))
    session = str(uuid.uuid4())
    conversation, _ = _compacted(p, anthropic_upstream, Agent(p, api_key, session))

    stranger, _ = Agent(p, f"sk-test-{uuid.uuid4().hex}", session).send(_rebuilt(SUMMARY))
    assert stranger != conversation
    assert len(p.conversation(conversation)["branches"]) == 1
    assert _metrics(p) == {}
    # the session's own rebuilt history still joins its line
    assert Agent(p, api_key, session).send(_rebuilt(SUMMARY))[0] == conversation
    assert _metrics(p) == {"client_compaction": "1"}


def test_two_compactions_make_one_line_with_two_boundaries_in_order(proxy, anthropic_upstream, api_key):
    """The second compaction is a side call of the rebuilt branch, and the history rebuilt after
    it continues from that branch: three branches in a row, two boundaries, each at its call."""
    p = proxy(fresh=True, **_config(anthropic_upstream.url))
    agent = Agent(p, api_key, str(uuid.uuid4()))
    conversation, _ = _compacted(p, anthropic_upstream, agent)
    again, history = agent.turns(_rebuilt(SUMMARY)[:1], ["step 3", "step 4"])
    assert again == conversation
    second = SUMMARY.replace("steps 0 to 2", "steps 0 to 4").replace("7431-ALPHA", "7431-BRAVO")
    anthropic_upstream.push(Reply(text=f"<summary>{second}</summary>"))
    prompt = {"role": "user", "content": [{"type": "text", "text": COMPACT, "cache_control": CC}]}
    assert agent.send([*history, prompt])[0] == conversation
    assert agent.turns(_rebuilt(second)[:1], ["step 5"])[0] == conversation

    calls = p.wait_calls(conversation, 8)
    compactions = [c for c in calls if c["purpose"] == "client_compaction"]
    assert len(compactions) == 2
    branches = {b["id"]: b for b in p.conversation(conversation)["branches"]}
    assert len(branches) == 3
    first, middle = compactions[0]["branch_id"], compactions[1]["branch_id"]
    last = next(b for b in branches if b not in (first, middle))
    assert branches[first]["parent_id"] is None
    assert (branches[middle]["parent_id"], branches[middle]["fork_seq"]) == (first, 0)
    assert (branches[last]["parent_id"], branches[last]["fork_seq"]) == (middle, 0)
    assert _metrics(p) == {"client_compaction": "2"}

    page = httpx.get(f"{p.url}/ui/conversations/{conversation}", headers=ADMIN, timeout=10).text
    line = re.findall(r'data-branch="([^"]+)"|data-boundary="client_compaction" data-call="([^"]+)"', page)
    assert [a or b for a, b in line] == [first, compactions[0]["id"], middle, compactions[1]["id"], last]
    tree = page[page.index('<section id="branches">') : page.index("</section>", page.index('id="branches"'))]
    assert tree.count("<ul>") == 1  # no branch nested under another: one line
