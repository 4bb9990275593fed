"""smolagents (`ToolCallingAgent` + `OpenAIServerModel`, from PyPI, the `[test]` extra) through the
proxy at a small window: 24 real shell steps of a few KB each (`harness.step_command`, run in the
workspace), then the launch code that only the first result held, streamed and not.

smolagents keeps its memory as text: each answer comes back as assistant text (`Calling
tools:\\n[...]`) and its results as user text (`Observation:\\n...`), so the proxy's tool-result
rules never apply and the history outgrows the window through its text: the proxy summarizes it.
The answer's rendering is the stored answer for identity (docs/identity.md), so the run is one
conversation, one branch, with a committed checkpoint, and every rendering averts a fork
(`ctxproxy_identity_rules_total`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from smolagents import OpenAIServerModel, ToolCallingAgent, tool

from tests.agents import harness
from tests.support.upstream_server import Reply, tool_call

pytestmark = pytest.mark.agents

MODEL = "gpt-agent-smolagents"
WINDOW = 16_000
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 2048,
    "keep_recent_tokens": 4000,
    "summary_chunk_tokens": 6000,
    "overflow_wait": 60,
    "summarizer": {"timeout": 60, "max_attempts": 2},
}


def _shell_in(cwd: Path) -> Any:
    @tool
    def shell(command: str) -> str:
        """Runs a shell command in the task's working directory and returns what it printed.

        Args:
            command: the command line to run.
        """
        done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr

    return shell


def _respond(body: dict[str, Any]) -> Reply:
    if harness.is_summary(body):
        return Reply(content=harness.summary(body))
    step = harness.next_step(body)
    if step < harness.STEPS:
        return Reply(tool_calls=[tool_call("shell", {"command": harness.step_command(step)})])
    return Reply(tool_calls=[tool_call("final_answer", {"answer": harness.answer(body)})])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_smolagents_small_window(proxy, upstream, monkeypatch, tmp_path, api_key, stream):
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    upstream.responder = _respond
    p = proxy(fresh=True, policies={"default": POLICY})
    cwd = tmp_path / "work"
    harness.write_workspace(cwd)
    model = OpenAIServerModel(model_id=MODEL, api_base=p.base_url, api_key=api_key)
    agent = ToolCallingAgent(
        tools=[_shell_in(cwd)], model=model, max_steps=harness.STEPS + 4, verbosity_level=-1, stream_outputs=stream
    )

    answer = agent.run(harness.PROMPT)
    harness.wait_idle(p)

    assert harness.FACT in str(answer), answer
    bodies = [r.body for r in upstream.chat_requests]
    main = [b for b in bodies if not harness.is_summary(b)]
    assert len(main) == harness.STEPS + 1  # one request per step, then the answer
    assert len(bodies) > len(main), "the history never outgrew the window"
    billed = [r.sent_usage["prompt_tokens"] for r in upstream.replies_sent if r.sent_usage]
    assert len(billed) == len(bodies), "the upstream rejected a request"
    got = harness.outcome(p, len(bodies))
    print(harness.report(f"smolagents {'streamed' if stream else 'plain'}", got, len(bodies)))
    assert len(got.conversations) == 1, got.conversations
    assert len(got.branches) == 1, got.branches
    assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints
    assert all(c["status"] == "complete" for c in got.calls), [c["status"] for c in got.calls]
    assert got.ledger["input_total"] == sum(billed)
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    assert not re.search(r"^ctxproxy_forks_total", text, re.M)
    averted = re.search(r'^ctxproxy_identity_rules_total\{rule="rendering",averted="fork"\} (\S+)$', text, re.M)
    assert averted is not None and float(averted.group(1)) == harness.STEPS
