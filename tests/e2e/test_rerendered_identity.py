"""Clients that re-render their history stay one conversation, one branch (`proxy.renderings`).

smolagents' `ToolCallingAgent` (the real one, from PyPI, through `OpenAIServerModel`) keeps its
memory as text: the answer ctxproxy stored with `tool_calls` comes back as assistant text
(`Calling tools:\\n[{'id': ..., 'function': {...}}]`) and the results as user text
(`Observation:\\n...`). Qwen Code's `--continue` re-sends its history without the date reminder
part of the first user message (its shape as raw HTTP here, with a look at the metric; the real CLI
is `tests/agents/test_qwen_code.py`). Both continue their conversation; similar but different
sessions and other tenants do not.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from smolagents import OpenAIServerModel, ToolCallingAgent, tool

from tests.support.proxy_process import ProxyProcess
from tests.support.upstream_server import Reply, tool_call

STEPS = 20


@tool
def shell(command: str) -> str:
    """Runs a shell command and returns what it printed.

    Args:
        command: the command line to run.
    """
    return f"ran {command}: row {len(command)}"


def _observations(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "user" and "Observation:" in str(m["content"]))


def _script(body: dict[str, Any]) -> Reply:
    """One shell call per step (two in parallel, ids out of order, at step 3; text beside the
    call at step 5), then the final answer."""
    step = _observations(body)
    if step >= STEPS:
        return Reply(tool_calls=[tool_call("final_answer", {"answer": f"done after {step} steps"})])
    if step == 3:
        calls = [
            tool_call("shell", {"command": "ls b"}, id=f"call_z{step}"),
            tool_call("shell", {"command": "ls a"}, id=f"call_a{step}"),
        ]
        return Reply(tool_calls=calls)
    return Reply(
        content="I will look.\n" if step == 5 else None,
        tool_calls=[tool_call("shell", {"command": f"echo step {step}"})],
    )


def _identity_counts(p: ProxyProcess, metric: str = "ctxproxy_identity_total", label: str = "how") -> dict[str, int]:
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    return {how: int(float(n)) for how, n in re.findall(metric + r"\{" + label + r'="(\w+)"\} (\S+)', text)}


def _rules(p: ProxyProcess) -> dict[tuple[str, str], int]:
    """`ctxproxy_identity_rules_total` by (rule, averted)."""
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    found = re.findall(r'ctxproxy_identity_rules_total\{rule="(\w+)",averted="(\w+)"\} (\S+)', text)
    return {(rule, averted): int(float(n)) for rule, averted, n in found}


def _lines(p: ProxyProcess) -> tuple[list[str], int]:
    conversations = [c["id"] for c in p.admin_json("conversations", params={"limit": 1000})["data"]]
    return conversations, sum(len(p.conversation(c)["branches"]) for c in conversations)


@pytest.mark.agents
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_smolagents_tool_calling_agent_is_one_conversation_one_branch(proxy, upstream, api_key, stream):
    p = proxy(fresh=True)
    upstream.responder = _script
    model = OpenAIServerModel(model_id="gpt-4o", api_base=p.base_url, api_key=api_key)
    agent = ToolCallingAgent(tools=[shell], model=model, max_steps=STEPS + 4, verbosity_level=-1, stream_outputs=stream)

    answer = agent.run("List the rows, one step at a time.")

    assert answer == f"done after {STEPS} steps"
    requests = upstream.chat_requests
    assert len(requests) == STEPS + 1
    rendered = requests[-1].body["messages"]
    assert any(m["role"] == "assistant" and "Calling tools:" in str(m["content"]) for m in rendered)
    conversations, branches = _lines(p)
    p.wait_calls(conversations[0], STEPS + 1)
    assert (len(conversations), branches) == (1, 1)
    # every request after the first continued the head the previous answer left: no lookup
    counts = _identity_counts(p)
    assert (counts.get("remembered"), counts.get("lookup"), counts.get("stale", 0)) == (STEPS, 1, 0)
    assert _identity_counts(p, "ctxproxy_forks_total", "cause") == {}
    # each of those carried the previous answer as its text rendering: a fork averted every turn
    assert _rules(p) == {("rendering", "fork"): STEPS}


def _chat(p: ProxyProcess, api_key: str, messages: list[dict[str, Any]]) -> tuple[str, str]:
    """One turn; the conversation and branch it went to."""
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": messages})
    assert r.status_code == 200, r.text
    return str(r.headers["x-conversation-id"]), str(r.headers["x-ctxproxy-branch"])


def _rendered(call_id: str, command: str) -> dict[str, Any]:
    calls = [{"id": call_id, "type": "function", "function": {"name": "shell", "arguments": {"command": command}}}]
    return {"role": "assistant", "content": [{"type": "text", "text": "Calling tools:\n" + str(calls)}]}


def test_renderings_of_other_answers_fork_and_other_tenants_stay_apart(proxy, upstream, api_key):
    """A rendering continues the branch only for the very answer stored there: one of another
    call id or other arguments is another answer (a fork from the task, as any regeneration), and
    the same history under another key is another tenant's conversation."""
    p = proxy(fresh=True)
    task = {"role": "user", "content": "New task:\nList the rows."}
    upstream.responder = lambda body: Reply(tool_calls=[tool_call("shell", {"command": "ls"}, id="call_1")])
    line = _chat(p, api_key, [task])
    upstream.responder = lambda body: Reply(content="ok")
    observation = {"role": "user", "content": "Observation:\nrow 1"}
    assert _chat(p, api_key, [task, _rendered("call_1", "ls"), observation]) == line
    forks = {
        _chat(p, api_key, [task, other, observation])
        for other in (_rendered("call_2", "ls"), _rendered("call_1", "ls -a"))
    }
    assert {conversation for conversation, _ in forks} == {line[0]}
    assert len({branch for _, branch in forks} | {line[1]}) == 3
    assert _identity_counts(p, "ctxproxy_forks_total", "cause") == {"answer": 2}
    assert _rules(p) == {("rendering", "fork"): 1}
    other_tenant = _chat(p, api_key + "-other", [task, _rendered("call_1", "ls"), observation])
    assert other_tenant[0] != line[0]
    conversations, branches = _lines(p)
    assert (len(conversations), branches) == (2, 4)


def _reminder(day: str) -> dict[str, str]:
    return {"type": "text", "text": f"<system-reminder>\nToday's date is {day}.\n</system-reminder>"}


def test_qwen_code_continue_without_its_date_reminder_is_the_same_conversation(proxy, upstream, api_key):
    """Qwen Code's resume shape: the history byte for byte, but the first user message without
    the transient date reminder part it had when it was first sent."""
    p = proxy(fresh=True)
    upstream.responder = lambda body: Reply(content=f"answer {len(body['messages'])}")
    system = {"role": "system", "content": "You are Qwen Code."}
    prompt = {"type": "text", "text": "Read the README."}
    history: list[dict[str, Any]] = [
        system,
        {"role": "user", "content": [_reminder("Friday, December 4, 2026"), prompt]},
    ]
    first, _ = _chat(p, api_key, history)
    for n in range(3):
        history += [
            {"role": "assistant", "content": f"answer {len(history)}"},
            {"role": "user", "content": f"go on {n}"},
        ]
        assert _chat(p, api_key, history)[0] == first
    resumed = [system, {"role": "user", "content": [prompt]}, *history[2:]]
    resumed += [{"role": "assistant", "content": f"answer {len(history)}"}, {"role": "user", "content": "resumed"}]
    assert _chat(p, api_key, resumed)[0] == first
    assert _rules(p) == {("transient", "conversation"): 1}  # the resume, a lookup
    # the date reminder is transient, the prompt is not: another prompt is another conversation
    other = [system, {"role": "user", "content": [{"type": "text", "text": "Read the LICENSE."}]}, *resumed[2:]]
    assert _chat(p, api_key, other)[0] != first
    conversations, branches = _lines(p)
    assert (len(conversations), branches) == (2, 2)
    assert _rules(p) == {("transient", "conversation"): 1}
