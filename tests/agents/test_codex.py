"""Codex CLI (@openai/codex, pinned in tests/agents/package.json), unchanged, through the proxy:
`codex exec` with a config.toml model provider whose `base_url` is the proxy and
`wire_api = "responses"`, 20+ steps of its own `exec_command` tool at a 16k window, then the
launch code that only the first tool result held.

Codex's traffic (0.171): Responses API, streamed, `store: false`, no `instructions`: its system
prompt is a `developer` message item (~17 KB) plus a second one (skills), then a user
`<environment_context>` message (cwd, shell, date) before the prompt. Tools: `exec_command`,
`write_stdin`, `request_user_input`, `view_image`, a `namespace` tool (`multi_agent_v1`, nested
tools), goal tools and `web_search` -- ~4,000 tokens of definitions. Headers: `session-id`,
`thread-id` and `x-client-request-id` (all the session's id), `x-codex-window-id`,
`x-codex-turn-metadata`; `client_metadata` and `prompt_cache_key` in the body. Items come back with
their server ids and `status`. No side calls in `exec`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agents import harness
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, fcall

pytestmark = pytest.mark.agents

MODEL = "resp-codex"
WINDOW = 16_000
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 2048,
    "keep_recent_tokens": 3000,
    "summary_chunk_tokens": 4000,
    "overflow_wait": 60,
    "summarizer": {"timeout": 60, "max_attempts": 2},
}
CLIENT_KEY = "sk-codex-client-key-0001"
TIMEOUTS = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}


@pytest.fixture
def codex_upstream() -> Any:
    server = ResponsesServer(context_windows={MODEL: WINDOW}).start()
    yield server
    server.stop()


def _responder(body: dict[str, Any]) -> ResponsesReply:
    if harness.is_summary(body):
        return ResponsesReply(text=harness.summary(body))
    step = harness.next_step(body)
    if step < harness.STEPS:
        return ResponsesReply(calls=[fcall("exec_command", {"cmd": harness.step_command(step)})])
    return ResponsesReply(text=harness.answer(body))


def _codex_home(tmp_path: Path, base_url: str) -> Path:
    home = tmp_path / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "ctxproxy"\n'
        "check_for_update_on_startup = false\n"
        "[analytics]\nenabled = false\n"
        "[model_providers.ctxproxy]\n"
        'name = "ctxproxy"\n'
        f'base_url = "{base_url}"\n'
        'wire_api = "responses"\n'
        'env_key = "CTXPROXY_CLIENT_KEY"\n'
    )
    return home


def _start(proxy: Any, codex_upstream: ResponsesServer) -> Any:
    codex_upstream.responder = _responder
    route = {
        "name": "codex",
        "match": {"model": "resp-*"},
        "upstream": {"base_url": codex_upstream.base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS},
        "policy": "default",
    }
    return proxy(fresh=True, routes=[route], policies={"default": POLICY})


def _codex(p: Any, tmp_path: Path, *args: str) -> harness.AgentRun:
    codex = harness.BIN / "codex"
    assert codex.exists(), harness.install_hint("codex")
    home = tmp_path / "home"
    if not home.exists():
        _codex_home(tmp_path, p.base_url)
    cwd = tmp_path / "work"
    if not cwd.exists():
        harness.write_workspace(cwd)
    env = harness.agent_env(home, {"CODEX_HOME": str(home / ".codex"), "CTXPROXY_CLIENT_KEY": CLIENT_KEY})
    argv = [str(codex), "exec", *args]
    run = harness.run_agent(argv, cwd, env)
    harness.wait_idle(p)
    assert run.returncode == 0, run.stderr[-3000:]
    assert harness.FACT in run.stdout, (run.stdout[-3000:], run.stderr[-3000:])
    return run


def _check(p: Any, codex_upstream: ResponsesServer, name: str, answers: int) -> harness.Outcome:
    requests = [r for r in codex_upstream.requests if r.path.endswith("/responses")]
    main = [r for r in requests if not harness.is_summary(r.body)]
    assert len(main) == harness.STEPS + answers
    assert len(codex_upstream.replies_sent) == len(requests), "the upstream rejected a request"
    assert all(r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}" for r in requests)
    got = harness.outcome(p, len(requests))
    assert len(got.conversations) == 1, got.conversations
    assert len(got.branches) == 1, got.branches
    assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints
    assert all(c["status"] == "complete" for c in got.calls), [c["status"] for c in got.calls]
    billed = [r.usage for r in codex_upstream.replies_sent]
    assert got.ledger["input_total"] == sum(u["input_tokens"] for u in billed)
    assert got.ledger["output"] == sum(u["output_tokens"] for u in billed)
    # the namespace tool's nested tools are counted (as their own TypeScript namespace)
    assert harness.first_estimate_error(got) < 0.03, harness.report(name, got, len(requests))
    print(harness.report(name, got, len(requests)))
    return got


FLAGS = ("--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox")


def test_codex_exec(proxy, codex_upstream, tmp_path):
    p = _start(proxy, codex_upstream)
    _codex(p, tmp_path, *FLAGS, harness.PROMPT)
    _check(p, codex_upstream, "codex exec", 1)


def test_codex_exec_resumed(proxy, codex_upstream, tmp_path):
    """`codex exec resume --last`: Codex rebuilds the request from its rollout file (items with
    their ids and statuses) plus the new prompt: the same conversation and branch."""
    p = _start(proxy, codex_upstream)
    _codex(p, tmp_path, *FLAGS, harness.PROMPT)
    _codex(p, tmp_path, "resume", "--last", *FLAGS, "Tell me the launch code once more.")
    _check(p, codex_upstream, "codex exec resume", 2)


def test_codex_exec_to_an_upstream_that_counts_otherwise(proxy, tmp_path):
    """The same session against an upstream that counts its own way (`claude-like`: another
    encoding, other framing, 15% more) and enforces the 16k window with that count: no request
    over it by the upstream's count (an overflow it refused anyway is sent again smaller, never
    relayed to Codex), the summary commits, and the ledger is what the upstream billed."""
    server = ResponsesServer(context_windows={MODEL: WINDOW}, counting="claude-like").start()
    try:
        p = _start(proxy, server)
        _codex(p, tmp_path, *FLAGS, harness.PROMPT)
        main = [m for m in server.measured if not harness.is_summary(m.request)]
        refused = [m for m in main if m.over]
        assert len(refused) <= 1, [(m.counted, m.max_tokens) for m in refused]
        assert not any(m.over for m in server.measured if harness.is_summary(m.request))
        got = harness.outcome(p, len(server.measured))
        assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints
        assert [c["purpose"] for c in got.calls].count("overflow") == len(refused)
        billed = [r.usage for r in server.replies_sent if r.usage]
        assert got.ledger["input_total"] == sum(u["input_tokens"] for u in billed)
        print(harness.report("codex exec, claude-like upstream", got, len(server.measured)))
    finally:
        server.stop()
