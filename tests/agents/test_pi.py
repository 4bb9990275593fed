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

import pytest

from tests.agents import harness
from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.anthropic_upstream import Reply as AnthropicReply
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, fcall
from tests.support.upstream_server import Reply, tool_call

pytestmark = pytest.mark.agents

MODEL = "gpt-agent-pi"  # chat: the default gpt-* route to the session's chat upstream
RESPONSES_MODEL = "resp-agent-pi"
ANTHROPIC_MODEL = "claude-agent-pi"
TIMEOUTS = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}
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


def _pi_home(tmp_path: Path, base_url: str, api: str, model: str) -> Path:
    home = tmp_path / "home"
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    models = {
        "providers": {
            "ctxproxy": {
                "baseUrl": base_url,
                "api": api,
                "apiKey": CLIENT_KEY,
                "models": [{"id": model, "contextWindow": 128_000, "maxTokens": 2048}],
            }
        }
    }
    (agent_dir / "models.json").write_text(json.dumps(models))
    (agent_dir / "settings.json").write_text(json.dumps({"enableInstallTelemetry": False}))
    return home


def _run_pi(tmp_path: Path, base_url: str, api: str, model: str) -> harness.AgentRun:
    pi = harness.BIN / "pi"
    assert pi.exists(), harness.install_hint("pi")
    home = _pi_home(tmp_path, base_url, api, model)
    cwd = tmp_path / "work"
    harness.write_workspace(cwd)
    argv = [str(pi), "--offline", "-p", "--no-session", "--provider", "ctxproxy", "--model", model, harness.PROMPT]
    return harness.run_agent(argv, cwd, harness.agent_env(home))


def _check(p: Any, name: str, run: harness.AgentRun, bodies: list[dict[str, Any]], billed: list[int]) -> None:
    """The issue's assertions for one run: the agent finished with the fact, every step was one
    upstream request and none was rejected (`billed` has one entry per answered request), one
    conversation, one branch, a committed checkpoint, the ledger equal to the upstream's bill."""
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert harness.FACT in run.stdout, run.stdout[-3000:]
    main = [b for b in bodies if not harness.is_summary(b)]
    assert len(main) == harness.STEPS + 1  # one request per step, then the answer
    assert len(billed) == len(bodies), "the upstream rejected a request"
    got = harness.outcome(p, len(bodies))
    assert len(got.conversations) == 1, got.conversations
    assert len(got.branches) == 1, got.branches
    assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints
    assert all(c["status"] == "complete" for c in got.calls), [c["status"] for c in got.calls]
    assert got.ledger["input_total"] == sum(billed)
    assert harness.first_estimate_error(got) < 0.03, harness.report(name, got, len(bodies))
    print(harness.report(name, got, len(bodies)))


def _step(body: dict[str, Any]) -> int | None:
    """The next step, or None when it is the proxy's summarizer asking."""
    return None if harness.is_summary(body) else harness.next_step(body)


def test_pi_openai_completions(proxy, upstream, monkeypatch, tmp_path):
    def respond(body: dict[str, Any]) -> Reply:
        step = _step(body)
        if step is None:
            return Reply(content=harness.summary(body))
        if step < harness.STEPS:
            return Reply(tool_calls=[tool_call("bash", {"command": harness.step_command(step)})])
        return Reply(content=harness.answer(body))

    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    upstream.responder = respond
    p = proxy(fresh=True, policies={"default": POLICY})
    run = _run_pi(tmp_path, p.base_url, "openai-completions", MODEL)
    harness.wait_idle(p)
    requests = upstream.chat_requests
    billed = [r.sent_usage["prompt_tokens"] for r in upstream.replies_sent if r.sent_usage]
    _check(p, "pi openai-completions", run, [r.body for r in requests], billed)


@pytest.fixture
def responses_upstream() -> Any:
    server = ResponsesServer(context_windows={RESPONSES_MODEL: WINDOW}).start()
    yield server
    server.stop()


def test_pi_openai_responses(proxy, responses_upstream, tmp_path):
    def respond(body: dict[str, Any]) -> ResponsesReply:
        step = _step(body)
        if step is None:
            return ResponsesReply(text=harness.summary(body))
        if step < harness.STEPS:
            return ResponsesReply(calls=[fcall("bash", {"command": harness.step_command(step)})])
        return ResponsesReply(text=harness.answer(body))

    responses_upstream.responder = respond
    route = {
        "name": "responses",
        "match": {"model": "resp-*"},
        "upstream": {"base_url": responses_upstream.base_url, "timeouts": TIMEOUTS},  # the client's key
        "policy": "default",
    }
    p = proxy(fresh=True, routes=[route], policies={"default": POLICY})
    run = _run_pi(tmp_path, p.base_url, "openai-responses", RESPONSES_MODEL)
    harness.wait_idle(p)
    requests = [r for r in responses_upstream.requests if r.path.endswith("/responses")]
    billed = [r.usage["input_tokens"] for r in responses_upstream.replies_sent]
    _check(p, "pi openai-responses", run, [r.body for r in requests], billed)


@pytest.fixture
def anthropic_upstream() -> Any:
    server = AnthropicUpstream(api_key=CLIENT_KEY, context_windows={ANTHROPIC_MODEL: WINDOW})
    server.start()
    yield server
    server.stop()


def test_pi_anthropic_messages(proxy, anthropic_upstream, tmp_path):
    def respond(body: dict[str, Any]) -> AnthropicReply:
        step = _step(body)
        if step is None:
            return AnthropicReply(text=harness.summary(body))
        if step < harness.STEPS:
            return AnthropicReply(tool_uses=[{"name": "bash", "input": {"command": harness.step_command(step)}}])
        return AnthropicReply(text=harness.answer(body))

    anthropic_upstream.responder = respond
    route = {
        "name": "anthropic",
        "match": {"model": "claude-*", "path": "/v1/messages"},
        "upstream": {"base_url": anthropic_upstream.url, "timeouts": TIMEOUTS},  # the client's key
        "policy": "default",
    }
    p = proxy(fresh=True, routes=[route], policies={"default": POLICY})
    run = _run_pi(tmp_path, p.url, "anthropic-messages", ANTHROPIC_MODEL)
    harness.wait_idle(p)
    assert anthropic_upstream.rejections == [], anthropic_upstream.rejections[:1]
    requests = anthropic_upstream.message_requests
    billed = [
        u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
        for u in (r.usage for r in anthropic_upstream.replies_sent)
    ]
    _check(p, "pi anthropic-messages", run, [r.body for r in requests], billed)
