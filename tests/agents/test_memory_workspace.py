"""Long-term memory's project key from the agents' own workspace signal (docs/memory.md): the
pinned pi and Codex CLIs, unchanged, through a route with memory on and only the `workspace`
source. Each agent's request names the project its working directory is, with nothing set on the
agent; the scripted model saves a fact with the memory tool in the first run, and a second run in
the same directory (a new conversation) is injected it.

Claude Code's signal (`Primary working directory: /path` in its environment section) is checked
against its system prompt's format in tests/unit/test_memory.py; its TUI harness is the heavy one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agents import harness
from tests.agents.test_codex import CLIENT_KEY as CODEX_KEY
from tests.agents.test_codex import _codex_home
from tests.agents.test_pi import _pi_home
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, fcall
from tests.support.upstream_server import Reply, tool_call

pytestmark = pytest.mark.agents

MEMORY = {"enabled": True, "scopes": ["project"], "project": {"sources": ["workspace"]}}
POLICY = {"context_window": 128_000, "max_output_tokens": 2048, "memory": MEMORY}
FACT = "release train: tuesday-7"
TIMEOUTS = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}


def _saves_then_answers(body: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The model: save the fact once (no memory result yet), then answer with what it sees."""
    text = json.dumps(body)
    if "ctxproxy_memory" not in text:
        return "no memory tool", None
    if "memory_results" not in text and FACT not in text:
        return "", {"action": "save", "text": FACT}
    return ("remembered: " + FACT) if FACT in text else "nothing remembered", None


def _scopes(p: Any) -> list[list[str]]:
    conversations = p.admin_json("conversations", params={"limit": 10})["data"]
    return [
        (c["projection"] or {}).get("memory", {}).get("scopes")
        for conv in conversations
        for c in p.calls(conv["id"])
        if c["purpose"] == "main"
    ]


def test_pi_states_its_working_directory(proxy, upstream, tmp_path):
    def respond(body: dict[str, Any]) -> Reply:
        text, save = _saves_then_answers(body)
        return Reply(tool_calls=[tool_call("ctxproxy_memory", save)]) if save else Reply(content=text)

    upstream.responder = respond
    p = proxy(fresh=True, policies={"default": POLICY})
    cwd = tmp_path / "work"
    harness.write_workspace(cwd)
    for run in range(2):
        home = _pi_home(tmp_path / str(run), p.base_url, "openai-completions", "gpt-agent-pi")
        argv = [str(harness.BIN / "pi"), "--offline", "-p", "--no-session", "--provider", "ctxproxy"]
        done = harness.run_agent([*argv, "--model", "gpt-agent-pi", f"Hello ({run})."], cwd, harness.agent_env(home))
        assert done.returncode == 0, done.stderr[-3000:]
        harness.wait_idle(p)
    assert "remembered: " + FACT in done.stdout, done.stdout[-2000:]
    assert {tuple(s or ()) for s in _scopes(p)} == {(f"project:{cwd}",)}


def test_codex_states_its_working_directory(proxy, tmp_path):
    server = ResponsesServer().start()
    try:

        def respond(body: dict[str, Any]) -> ResponsesReply:
            text, save = _saves_then_answers(body)
            return ResponsesReply(calls=[fcall("ctxproxy_memory", save)]) if save else ResponsesReply(text=text)

        server.responder = respond
        route = {
            "name": "codex",
            "match": {"model": "resp-*"},
            "upstream": {"base_url": server.base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
            "policy": "default",
        }
        p = proxy(fresh=True, routes=[route], policies={"default": POLICY})
        home = _codex_home(tmp_path, p.base_url)
        cwd = Path(tmp_path / "work")
        harness.write_workspace(cwd)
        env = harness.agent_env(home, {"CODEX_HOME": str(home / ".codex"), "CTXPROXY_CLIENT_KEY": CODEX_KEY})
        flags = ("--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox")
        for run in range(2):
            done = harness.run_agent([str(harness.BIN / "codex"), "exec", *flags, f"Hello ({run})."], cwd, env)
            assert done.returncode == 0, done.stderr[-3000:]
            harness.wait_idle(p)
        assert "remembered: " + FACT in done.stdout, done.stdout[-2000:]
        assert {tuple(s or ()) for s in _scopes(p)} == {(f"project:{cwd}",)}
    finally:
        server.stop()
