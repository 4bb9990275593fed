"""Gemini CLI (@google/gemini-cli, pinned in tests/agents/package.json), unchanged, through the
proxy: `GOOGLE_GEMINI_BASE_URL` is the proxy, 20+ steps of its own `run_shell_command` tool with a
few KB each at a small window, then the launch code that only the first tool result held.

Gemini CLI's traffic: every call is `:streamGenerateContent?alt=sse` with its key in
`x-goog-api-key`; the system prompt is `systemInstruction` (about 5k tokens) and its ~20 tools
(another 5k) come on every request; the first user content carries a `<session_context>` text
(the date, the working directory) before the prompt. It asks for thoughts (`includeThoughts`),
keeps only the signed parts of the model's turns in its history, and numbers each call it
re-sends (`functionCall.id`, echoed on its `functionResponse`). Its own chat compression runs at
half the model's window (a million tokens for gemini-2.5-flash), far above what the proxy sends.

Settings (its own HOME): the API-key auth method, telemetry, usage statistics and update checks
off; `GEMINI_CLI_TRUST_WORKSPACE` trusts the working directory (else `--yolo` falls back to asking)
and `GEMINI_CLI_NO_RELAUNCH` keeps it one process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agents import harness
from tests.support.e2e import asks_shared_summary
from tests.support.gemini_upstream import GeminiUpstream, Reply
from tests.support.proxy_process import UPSTREAM_KEY

pytestmark = pytest.mark.agents

MODEL = "gemini-2.5-flash"
CLIENT_KEY = "gemini-cli-client-key-0001"
TIMEOUTS = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}
WINDOW = 24_000
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 2048,
    "keep_recent_tokens": 4000,
    "summary_chunk_tokens": 6000,
    "overflow_wait": 60,
    "summarizer": {"timeout": 60, "max_attempts": 2},
    "tool_results": {"old_max_chars": 2000},
}


def _is_summary(body: dict[str, Any]) -> bool:
    """The proxy's summarizer call: its instructions are the system instruction, or (a shared
    summary, the default mode's) its ask is the last content."""
    system = body.get("systemInstruction") or {}
    texts = [p.get("text", "") for p in system.get("parts") or []]
    own = any(isinstance(t, str) and t.startswith(harness.SUMMARIZER_MARK) for t in texts)
    return own or asks_shared_summary(body)


def _respond(body: dict[str, Any]) -> Reply:
    if _is_summary(body):
        return Reply(text=harness.summary(body))
    step = harness.next_step(body)
    if step < harness.STEPS:
        command = harness.step_command(step)
        return Reply(thought=f"Step {step}.", calls=[{"name": "run_shell_command", "args": {"command": command}}])
    return Reply(text=harness.answer(body))


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return home


@pytest.fixture
def gemini_upstream() -> Any:
    server = GeminiUpstream(api_key=UPSTREAM_KEY, context_windows={MODEL: WINDOW})
    server.start()
    yield server
    server.stop()


def test_gemini_cli(proxy, gemini_upstream, tmp_path):
    gemini = harness.BIN / "gemini"
    assert gemini.exists(), harness.install_hint("gemini")
    gemini_upstream.responder = _respond
    route = {
        "name": "gemini",
        "match": {"model": "gemini-*", "path": "/v1beta/models"},
        "upstream": {"base_url": gemini_upstream.url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
        "policy": "default",
    }
    p = proxy(fresh=True, routes=[route], policies={"default": POLICY})
    cwd = tmp_path / "work"
    harness.write_workspace(cwd)
    env = harness.agent_env(
        _home(tmp_path),
        {
            "GEMINI_API_KEY": CLIENT_KEY,
            "GOOGLE_GEMINI_BASE_URL": p.url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "GEMINI_CLI_NO_RELAUNCH": "true",
        },
    )
    argv = [str(gemini), "--model", MODEL, "--yolo", "--prompt", harness.PROMPT]
    run = harness.run_agent(argv, cwd, env)
    harness.wait_idle(p)

    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert harness.FACT in run.stdout, run.stdout[-3000:]
    assert gemini_upstream.rejections == [], gemini_upstream.rejections[:1]
    requests = gemini_upstream.model_requests
    bodies = [r.body for r in requests]
    main = [b for b in bodies if not _is_summary(b)]
    assert len(main) == harness.STEPS + 1  # one request per step, then the answer
    assert all(r.headers["x-goog-api-key"] == UPSTREAM_KEY and r.query in ("", "alt=sse") for r in requests)
    assert all("ctxproxy_recall" in json.dumps(b["tools"][-1]) for b in main)  # recall offered, last
    billed = [r.usage for r in gemini_upstream.replies_sent if r.usage]
    assert len(billed) == len(bodies), "the upstream rejected a request"
    got = harness.outcome(p, len(bodies))
    assert len(got.conversations) == 1, got.conversations
    assert len(got.branches) == 1, got.branches
    assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints
    assert all(c["status"] == "complete" for c in got.calls), [c["status"] for c in got.calls]
    assert got.ledger["input_total"] == sum(u["promptTokenCount"] for u in billed)
    assert got.ledger["output"] == sum(u["candidatesTokenCount"] + u.get("thoughtsTokenCount", 0) for u in billed)
    print(harness.report("gemini cli", got, len(bodies)))
    # calibrated from the bills: after the first call, the proxy's prediction of the upstream's own
    # count (cl100k, other framing, 8% more than tiktoken o200k) is within 1% of what it billed
    for call in got.main_calls[1:]:
        predicted, billed_input = call["projection"]["predicted_tokens"], call["usage"]["input_total"]
        assert abs(predicted - billed_input) / billed_input < 0.01, (predicted, billed_input)
