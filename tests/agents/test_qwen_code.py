"""Qwen Code (@qwen-code/qwen-code, pinned in tests/agents/package.json), unchanged, through the
proxy on its OpenAI-compatible auth: 20+ steps of its own `run_shell_command` tool at a small
window, then the launch code that only the first tool result held; then `--continue` resumes the
session with a new prompt, and the resumed request still continues the same conversation.

Qwen Code needs Node 22 (`engines`), which the machine's Node may not be: the `node` package from
the npm registry (pinned beside it) ships a Node 22 binary, and the CLI runs under it.

Qwen Code's traffic: its system prompt is the first `system` message; the first user message
carries its startup environment and a short `<system-reminder>` stating today's date as separate
text parts; it streams every call and sends no session header. On `--continue` it re-sends its
recorded history byte for byte except that the first user message lost the date reminder part:
the transient rule (`transient_parts`, docs/identity.md) makes that message the stored
one, so the resume is the same conversation and branch, not a second conversation summarized
again from scratch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agents import harness
from tests.support.upstream_server import Reply, tool_call

pytestmark = pytest.mark.agents

MODEL = "gpt-agent-qwen"  # the default gpt-* route to the session's chat upstream
WINDOW = 32_000  # Qwen Code's prefix (system prompt and tools) is ~13,600 tokens
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 2048,
    "keep_recent_tokens": 4000,
    "summary_chunk_tokens": 6000,
    "overflow_wait": 60,
    "summarizer": {"timeout": 60, "max_attempts": 2},
    "tool_results": {"old_max_chars": 2000},  # the history outgrows the window within the run
}
CLIENT_KEY = "sk-qwen-client-key-0001"
RESUME_PROMPT = "Tell me the launch code from facts.txt once more."
MEMORY_SUBAGENT = "You are now acting as the managed memory extraction subagent"
NODE = harness.BIN / "node"
QWEN = harness.BIN / "qwen"


def _settings(home: Path) -> None:
    """Qwen Code's user settings: OpenAI auth chosen, replies of 2,048 tokens at most (its default
    16,384 leaves no room in the small window), telemetry, usage statistics and update checks
    off, its own file search instead of the vendored ripgrep binary."""
    settings = {
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "disableAutoUpdate": True, "disableUpdateNag": True},
        "model": {"name": MODEL, "generationConfig": {"samplingParams": {"max_tokens": 2048}}},
        "tools": {"useRipgrep": False},
    }
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))


def _run_qwen(home: Path, cwd: Path, base_url: str, prompt: str, *flags: str) -> harness.AgentRun:
    assert NODE.exists() and QWEN.exists(), harness.install_hint("qwen")
    env = harness.agent_env(
        home,
        {
            "OPENAI_BASE_URL": base_url,
            "OPENAI_API_KEY": CLIENT_KEY,
            "OPENAI_MODEL": MODEL,
            "QWEN_TELEMETRY_ENABLED": "false",
            "QWEN_CODE_MAX_OUTPUT_TOKENS": "2048",
        },
    )
    argv = [str(NODE), str(QWEN), "--auth-type", "openai", "--model", MODEL, "--yolo", *flags, prompt]
    return harness.run_agent(argv, cwd, env)


def _respond(body: dict[str, Any]) -> Reply:
    if harness.is_summary(body):
        return Reply(content=harness.summary(body))
    step = harness.next_step(body)
    if step < harness.STEPS:
        return Reply(tool_calls=[tool_call("run_shell_command", {"command": harness.step_command(step)})])
    return Reply(content=harness.answer(body))


def _metric(p: Any, name: str) -> dict[str, float]:
    """One counter's samples on /metrics, by their label text."""
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    return {m.group(1) or "": float(m.group(2)) for m in re.finditer(rf"^{name}(\{{.*\}})? (\S+)$", text, re.M)}


def test_qwen_code_openai_then_continue(proxy, upstream, monkeypatch, tmp_path):
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    upstream.responder = _respond
    p = proxy(fresh=True, policies={"default": POLICY})
    home, cwd = tmp_path / "home", tmp_path / "work"
    _settings(home)
    harness.write_workspace(cwd)

    run = _run_qwen(home, cwd, p.base_url, harness.PROMPT)
    harness.wait_idle(p)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-6000:])
    assert harness.FACT in run.stdout, run.stdout[-3000:]
    bodies = [r.body for r in upstream.chat_requests]
    main = [b for b in bodies if not harness.is_summary(b)]
    assert len(main) == harness.STEPS + 1, len(main)  # one request per step, then the answer
    billed = [r.sent_usage["prompt_tokens"] for r in upstream.replies_sent if r.sent_usage]
    assert len(billed) == len(bodies), "the upstream rejected a request"
    first = harness.outcome(p, len(bodies))
    print(harness.report("qwen code", first, len(bodies)))
    assert len(first.conversations) == 1, first.conversations
    assert len(first.branches) == 1, first.branches
    assert any(c["status"] == "active" for c in first.checkpoints), first.checkpoints
    assert all(c["status"] == "complete" for c in first.calls), [c["status"] for c in first.calls]
    assert first.ledger["input_total"] == sum(billed)
    assert harness.first_estimate_error(first) < 0.03, harness.report("qwen code", first, len(bodies))

    line = first.conversations[0]["id"]
    summaries = len(bodies) - len(main)

    resumed = _run_qwen(home, cwd, p.base_url, RESUME_PROMPT, "--continue")
    harness.wait_idle(p)
    assert resumed.returncode == 0, (resumed.stdout[-3000:], resumed.stderr[-6000:])
    assert harness.FACT in resumed.stdout, resumed.stdout[-3000:]
    bodies = [r.body for r in upstream.chat_requests]
    memory = [b for b in bodies if _system(b).startswith(MEMORY_SUBAGENT)]
    got = harness.outcome(p, len(bodies))
    print(harness.report("qwen code --continue", got, len(bodies)))
    rules = _metric(p, "ctxproxy_identity_rules_total")
    print("forks", _metric(p, "ctxproxy_forks_total"), "identity", _metric(p, "ctxproxy_identity_total"), rules)
    # the resumed session is the same conversation and branch: its request carries the recorded
    # history without the first message's date reminder, and nothing is summarized again
    calls = p.admin_json(f"conversations/{line}/calls", params={"limit": 1000})["data"]
    assert len([c for c in calls if c["purpose"] == "main"]) == len(main) + 1
    assert len(p.conversation(line)["branches"]) == 1, p.conversation(line)["branches"]
    assert len([b for b in bodies if harness.is_summary(b)]) == summaries
    assert rules == {'{rule="transient",averted="conversation"}': 1.0}, rules
    assert _metric(p, "ctxproxy_forks_total") == {}
    # every other conversation is Qwen Code's managed-memory subagent: its own system prompt and
    # tools, fed a window of the recent history that starts mid-line (a side call of the session
    # by docs/identity.md's rule, so its own conversation)
    assert len(got.conversations) == 1 + len(memory), got.conversations
    assert len(memory) <= 1 and len(bodies) == len(main) + summaries + 1 + len(memory)


def _system(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    content = messages[0].get("content") if messages[0].get("role") == "system" else None
    return content if isinstance(content, str) else ""
