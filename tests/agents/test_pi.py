"""pi (@mariozechner/pi-coding-agent, pinned in tests/agents/package.json), unchanged, through the
proxy: a custom provider whose `baseUrl` is the proxy, 20+ steps of its own `bash` tool with a few
KB each at a 16k window, then the launch code that only the first tool result held.

pi's traffic: the system prompt (with the date and the working directory) is the first `system`
message (chat), `instructions`-free `developer`/system input (Responses) or `system` (Anthropic);
it sends its newest prompt as a one-text-block content, re-stringifies tool-call arguments
compactly (`{"command":"ls"}`), streams every call with usage, and sends no session header. It has
no side calls. Its own compaction is off here in effect: it compacts when its context passes
contextWindow - 16384 tokens, and the usage it sees is what the proxy sent, far below that.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.agents import harness
from tests.upstream_server import Reply, tool_call

MODEL = "gpt-agent-pi"
WINDOW = 16_000
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 2048,
    "keep_recent_tokens": 4000,
    "summary_chunk_tokens": 6000,
    "overflow_wait": 60,
    "summarizer": {"timeout": 60, "max_attempts": 2},
    # older tool results keep 2,000 chars (default 400): the history then outgrows the window
    # within the run and the proxy compacts it, which is what this test is about
    "tool_results": {"old_max_chars": 2000},
}
CLIENT_KEY = "sk-pi-client-key-0001"


def _pi_home(tmp_path: Path, base_url: str, api: str) -> Path:
    home = tmp_path / "home"
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    models = {
        "providers": {
            "ctxproxy": {
                "baseUrl": base_url,
                "api": api,
                "apiKey": CLIENT_KEY,
                "models": [{"id": MODEL, "contextWindow": 128_000, "maxTokens": 2048}],
            }
        }
    }
    (agent_dir / "models.json").write_text(json.dumps(models))
    (agent_dir / "settings.json").write_text(json.dumps({"enableInstallTelemetry": False}))
    return home


def _run_pi(tmp_path: Path, base_url: str, api: str) -> harness.AgentRun:
    pi = harness.BIN / "pi"
    assert pi.exists(), harness.install_hint("pi")
    home = _pi_home(tmp_path, base_url, api)
    cwd = tmp_path / "work"
    harness.write_workspace(cwd)
    argv = [str(pi), "--offline", "-p", "--no-session", "--provider", "ctxproxy", "--model", MODEL, harness.PROMPT]
    return harness.run_agent(argv, cwd, harness.agent_env(home))


def _chat_responder(body: dict[str, Any]) -> Reply:
    if harness.is_summary(body):
        return Reply(content=harness.summary(body))
    step = harness.next_step(body)
    if step < harness.STEPS:
        return Reply(tool_calls=[tool_call("bash", {"command": harness.step_command(step)})])
    return Reply(content=harness.answer(body))


def test_pi_chat_completions(proxy, upstream, monkeypatch, tmp_path):
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    upstream.responder = _chat_responder
    p = proxy(fresh=True, policies={"default": POLICY})
    run = _run_pi(tmp_path, p.base_url, "openai-completions")
    assert run.returncode == 0, run.stderr[-3000:]
    assert harness.FACT in run.stdout, run.stdout[-3000:]

    requests = upstream.chat_requests
    main = [r for r in requests if not harness.is_summary(r.body)]
    assert len(main) == harness.STEPS + 1  # one request per step, then the answer
    assert len(upstream.replies_sent) == len(requests), "the upstream rejected a request"
    got = harness.outcome(p, len(requests))
    assert len(got.conversations) == 1, got.conversations
    assert len(got.branches) == 1, got.branches
    assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints
    assert all(c["status"] == "complete" for c in got.calls), [c["status"] for c in got.calls]
    billed = [r.sent_usage for r in upstream.replies_sent]
    assert got.ledger["input_total"] == sum(u["prompt_tokens"] for u in billed)
    assert got.ledger["output"] == sum(u["completion_tokens"] for u in billed)
    # the scripted chat upstream bills tools as their whole JSON (keys included), which the
    # estimate (names, descriptions, schemas) undercounts by ~15 tokens a tool: 4.7% here
    assert harness.first_estimate_error(got) < 0.06, harness.report("pi", got, len(requests))
    print(harness.report("pi openai-completions", got, len(requests)))
