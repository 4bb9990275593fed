"""Qwen Code (@qwen-code/qwen-code, pinned in tests/agents/package.json), unchanged, through the
proxy on its OpenAI-compatible auth (chat completions) and its Anthropic auth: 20+ steps of its
own `run_shell_command` tool at a small window, then the launch code that only the first tool
result held; then `--continue` resumes the session with a new prompt, and the resumed request
still continues the same conversation.

Qwen Code needs Node 22 (`engines`), which the machine's Node may not be: the `node` package from
the npm registry (pinned beside it) ships a Node 22 binary, and the CLI runs under it.

Qwen Code's traffic: its system prompt is the first `system` message (chat) or `system`
(Anthropic); the first user message
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agents import harness
from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.anthropic_upstream import Reply as AnthropicReply
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.upstream_server import Reply, tool_call

pytestmark = pytest.mark.agents

MODEL = "gpt-agent-qwen"  # chat: the default gpt-* route to the session's chat upstream
ANTHROPIC_MODEL = "claude-agent-qwen"
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
TIMEOUTS = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}
CLIENT_KEY = "sk-qwen-client-key-0001"
RESUME_PROMPT = "Tell me the launch code from facts.txt once more."
MEMORY_SUBAGENT = "You are now acting as the managed memory extraction subagent"
NODE = harness.BIN / "node"
QWEN = harness.BIN / "qwen"


@dataclass
class Wire:
    """One of Qwen Code's auth types against its scripted upstream: the environment that points
    Qwen Code at the proxy, and what the upstream received and billed."""

    auth: str
    model: str
    env: dict[str, str]
    bodies: Callable[[], list[dict[str, Any]]]
    billed: Callable[[], list[int]]


def _settings(home: Path, auth: str, model: str) -> None:
    """Qwen Code's user settings: the auth type chosen, replies of 2,048 tokens at most (its
    default 16,384 leaves no room in the small window), telemetry, usage statistics and update
    checks off, its own file search instead of the vendored ripgrep binary."""
    settings = {
        "security": {"auth": {"selectedType": auth}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "disableAutoUpdate": True, "disableUpdateNag": True},
        "model": {"name": model, "generationConfig": {"samplingParams": {"max_tokens": 2048}}},
        "tools": {"useRipgrep": False},
    }
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))


def _run_qwen(home: Path, cwd: Path, wire: Wire, prompt: str, *flags: str) -> harness.AgentRun:
    assert NODE.exists() and QWEN.exists(), harness.install_hint("qwen")
    extra = {"QWEN_TELEMETRY_ENABLED": "false", "QWEN_CODE_MAX_OUTPUT_TOKENS": "2048", **wire.env}
    argv = [str(NODE), str(QWEN), "--auth-type", wire.auth, "--model", wire.model, "--yolo", *flags, prompt]
    return harness.run_agent(argv, cwd, harness.agent_env(home, extra))


def _step(body: dict[str, Any]) -> int | None:
    """The next step, or None when it is the proxy's summarizer asking."""
    return None if harness.is_summary(body) else harness.next_step(body)


def _metric(p: Any, name: str) -> dict[str, float]:
    """One counter's samples on /metrics, by their label text."""
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    return {m.group(1) or "": float(m.group(2)) for m in re.finditer(rf"^{name}(\{{.*\}})? (\S+)$", text, re.M)}


def _system(body: dict[str, Any]) -> str:
    """The system text on either wire."""
    system = body.get("system")
    if system is None:
        messages = body.get("messages") or [{}]
        system = messages[0].get("content") if messages[0].get("role") == "system" else None
    if isinstance(system, list):
        system = "".join(b.get("text", "") for b in system if isinstance(b, dict))
    return system if isinstance(system, str) else ""


def _run_then_continue(p: Any, wire: Wire, tmp_path: Path) -> None:
    """The issue's assertions: 24 steps, then the launch code; one conversation, one branch, a
    committed checkpoint, the ledger equal to the upstream's bill; `--continue` then continues
    that conversation and branch with nothing summarized again."""
    home, cwd = tmp_path / "home", tmp_path / "work"
    _settings(home, wire.auth, wire.model)
    harness.write_workspace(cwd)

    run = _run_qwen(home, cwd, wire, harness.PROMPT)
    harness.wait_idle(p)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-6000:])
    assert harness.FACT in run.stdout, run.stdout[-3000:]
    bodies = wire.bodies()
    main = [b for b in bodies if not harness.is_summary(b)]
    # One request per step, then the answer. A step is asked again only after Qwen Code's shell tool
    # gave its output back empty: on a loaded machine its pseudo-terminal can lose a short
    # command's output, and the scripted model, seeing no output of the step, asks for it again.
    steps = [harness.next_step(b) for b in main]
    again = [i for i in range(1, len(steps)) if steps[i] == steps[i - 1]]
    assert sorted(set(steps)) == list(range(harness.STEPS + 1)), steps
    assert len(main) == harness.STEPS + 1 + len(again), steps
    assert all("Output: (empty)" in json.dumps(main[i]["messages"][-1]) for i in again), again
    billed = wire.billed()
    assert len(billed) == len(bodies), "the upstream rejected a request"
    first = harness.outcome(p, len(bodies))
    print(harness.report(f"qwen code {wire.auth}", first, len(bodies)))
    assert len(first.conversations) == 1, first.conversations
    assert len(first.branches) == 1, first.branches
    assert any(c["status"] == "active" for c in first.checkpoints), first.checkpoints
    assert all(c["status"] == "complete" for c in first.calls), [c["status"] for c in first.calls]
    assert first.ledger["input_total"] == sum(billed)
    # every turn after the first continued the head the previous answer left, no lookup (on the
    # Messages API Qwen Code moves its cache marker, so this is found by chain hash)
    assert _metric(p, "ctxproxy_identity_total").get('{how="remembered"}', 0) >= harness.STEPS - 1
    assert harness.first_estimate_error(first) < 0.03, harness.report("qwen code", first, len(bodies))
    line = first.conversations[0]["id"]
    summaries = len(bodies) - len(main)

    resumed = _run_qwen(home, cwd, wire, RESUME_PROMPT, "--continue")
    harness.wait_idle(p)
    assert resumed.returncode == 0, (resumed.stdout[-3000:], resumed.stderr[-6000:])
    assert harness.FACT in resumed.stdout, resumed.stdout[-3000:]
    bodies = wire.bodies()
    memory = [b for b in bodies if _system(b).startswith(MEMORY_SUBAGENT)]
    got = harness.outcome(p, len(bodies))
    print(harness.report(f"qwen code {wire.auth} --continue", got, len(bodies)))
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


def test_qwen_code_openai_then_continue(proxy, upstream, monkeypatch, tmp_path):
    def respond(body: dict[str, Any]) -> Reply:
        step = _step(body)
        if step is None:
            return Reply(content=harness.summary(body))
        if step < harness.STEPS:
            return Reply(tool_calls=[tool_call("run_shell_command", {"command": harness.step_command(step)})])
        return Reply(content=harness.answer(body))

    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    upstream.responder = respond
    p = proxy(fresh=True, policies={"default": POLICY})
    env = {"OPENAI_BASE_URL": p.base_url, "OPENAI_API_KEY": CLIENT_KEY, "OPENAI_MODEL": MODEL}

    def billed() -> list[int]:
        return [r.sent_usage["prompt_tokens"] for r in upstream.replies_sent if r.sent_usage]

    _run_then_continue(
        p, Wire("openai", MODEL, env, lambda: [r.body for r in upstream.chat_requests], billed), tmp_path
    )


@pytest.fixture
def anthropic_upstream() -> Any:
    server = AnthropicUpstream(api_key=UPSTREAM_KEY, context_windows={ANTHROPIC_MODEL: WINDOW})
    server.start()
    yield server
    server.stop()


def test_qwen_code_anthropic_then_continue(proxy, anthropic_upstream, tmp_path):
    def respond(body: dict[str, Any]) -> AnthropicReply:
        step = _step(body)
        if step is None:
            return AnthropicReply(text=harness.summary(body))
        # Qwen Code asks for thinking: its answers carry a block, which it sends back with them
        thinking = "The next command." if (body.get("thinking") or {}).get("type") == "enabled" else None
        if step < harness.STEPS:
            command = {"command": harness.step_command(step)}
            return AnthropicReply(thinking=thinking, tool_uses=[{"name": "run_shell_command", "input": command}])
        return AnthropicReply(thinking=thinking, text=harness.answer(body))

    anthropic_upstream.responder = respond
    route = {
        "name": "anthropic",
        "match": {"model": "claude-*", "path": "/v1/messages"},
        # the operator's key: Qwen Code sends its key as `Authorization: Bearer` to any host but
        # Anthropic's, which Anthropic's API takes for an OAuth token, not an API key
        "upstream": {"base_url": anthropic_upstream.url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
        "policy": "default",
    }
    p = proxy(fresh=True, routes=[route], policies={"default": POLICY})
    env = {"ANTHROPIC_BASE_URL": p.url, "ANTHROPIC_API_KEY": CLIENT_KEY, "ANTHROPIC_MODEL": ANTHROPIC_MODEL}

    def billed() -> list[int]:
        assert anthropic_upstream.rejections == [], anthropic_upstream.rejections[:1]
        return [
            u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
            for u in (r.usage for r in anthropic_upstream.replies_sent)
        ]

    bodies = lambda: [r.body for r in anthropic_upstream.message_requests]  # noqa: E731
    _run_then_continue(p, Wire("anthropic", ANTHROPIC_MODEL, env, bodies, billed), tmp_path)
