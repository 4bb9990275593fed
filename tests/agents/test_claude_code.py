"""Claude Code (@anthropic-ai/claude-code, pinned in tests/agents/package.json), unchanged, through
the proxy: `ANTHROPIC_BASE_URL` is the proxy, `claude -p` with `--allowedTools Bash` (root may not
use --dangerously-skip-permissions), 20+ steps of its own Bash tool, then the launch code that
only the first tool result held. `CLAUDE_CODE_MAX_OUTPUT_TOKENS` lowers its max_tokens (32,000 by
default) so that the window can be the smallest its real prefix fits in.

Claude Code's traffic (2.1.332, `-p`): Anthropic Messages, streamed, `x-claude-code-session-id`
on every request (the same id as `metadata.user_id.session_id`), `anthropic-beta` with
context-management, interleaved thinking, effort and, on the first try, mid-conversation system
turns; `thinking: adaptive`, `context_management` edits, `output_config.effort`. The system
prompt is `system` text blocks (a billing-header line first, cache_control on two of them),
~11,400 tokens with the tool definitions (Agent, Bash, Edit, Read, Skill, ToolSearch,
Workflow, ...). The environment (cwd, platform, deferred tools, agents, skills) is a
`{"role": "system"}` message right after the first user message (the API's mid-conversation
system messages; the proxy accepts and pins it; an API that refused it would get the request again
with the environment folded into the first user message). The newest message carries
`cache_control` (the tool result block or the prompt); the next request re-sends it without. No
side calls in `-p` mode here.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.agents import harness
from tests.support.anthropic_upstream import AnthropicUpstream, Reply
from tests.support.proxy_process import ADMIN_TOKEN

pytestmark = pytest.mark.agents

MODEL = "claude-agent-test"
WINDOW = 24_000  # Claude Code's prefix is ~11,400 tokens; 4,096 reserved for the answer
MAX_OUTPUT = 4096
POLICY = {
    "context_window": WINDOW,
    "keep_recent_tokens": 3000,
    "summary_chunk_tokens": 4000,
    "overflow_wait": 60,
    "summarizer": {"timeout": 60, "max_attempts": 2},
    "tool_results": {"old_max_chars": 2000},
}
CLIENT_KEY = "sk-ant-client-key-0001"
TIMEOUTS = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}


@pytest.fixture
def claude_upstream() -> Any:
    server = AnthropicUpstream(api_key=CLIENT_KEY, context_windows={MODEL: WINDOW})
    server.start()
    yield server
    server.stop()


def _responder(body: dict[str, Any]) -> Reply:
    if harness.is_summary(body):
        return Reply(text=harness.summary(body))
    if not body.get("tools"):
        return Reply(text="Launch code lookup")  # a side call (title): not part of the loop
    step = harness.next_step(body)
    if step < harness.STEPS:
        command = harness.step_command(step)
        return Reply(tool_uses=[{"name": "Bash", "input": {"command": command, "description": f"step {step}"}}])
    return Reply(text=harness.answer(body))


def _start(proxy: Any, claude_upstream: AnthropicUpstream) -> Any:
    claude_upstream.responder = _responder
    route = {
        "name": "claude",
        "match": {"model": "claude-*", "path": "/v1/messages"},
        "upstream": {"base_url": claude_upstream.url, "timeouts": TIMEOUTS},  # the client's own key
        "policy": "default",
    }
    return proxy(fresh=True, routes=[route], policies={"default": POLICY})


def _claude(p: Any, tmp_path: Any, *args: str) -> harness.AgentRun:
    claude = harness.BIN / "claude"
    assert claude.exists(), harness.install_hint("claude")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cwd = tmp_path / "work"
    if not cwd.exists():
        harness.write_workspace(cwd)
    env = harness.agent_env(
        home,
        {
            "ANTHROPIC_BASE_URL": p.url,
            "ANTHROPIC_API_KEY": CLIENT_KEY,
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(MAX_OUTPUT),
        },
    )
    argv = [str(claude), "-p", "--model", MODEL, "--allowedTools", "Bash", *args]
    run = harness.run_agent(argv, cwd, env)
    harness.wait_idle(p)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert harness.FACT in run.stdout, (run.stdout[-3000:], run.stderr[-3000:])
    return run


def _check(p: Any, claude_upstream: AnthropicUpstream, name: str, answers: int) -> harness.Outcome:
    requests = claude_upstream.message_requests
    main = [r for r in requests if r.body.get("tools") and not harness.is_summary(r.body)]
    assert len(main) == harness.STEPS + answers, len(main)
    assert claude_upstream.rejections == [], claude_upstream.rejections[:1]
    # its environment turn went upstream as the system message it is, on every request (pinned
    # through compaction): the proxy accepted it, so Claude Code never fell back to a user block
    for r in main:
        turn = r.body["messages"][1]
        assert turn["role"] == "system" and "# Environment" in json.dumps(turn), turn
    got = harness.outcome(p, len(requests))
    assert len(got.conversations) == 1, got.conversations
    assert len(got.branches) == 1, got.branches
    assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints
    assert all(c["status"] == "complete" for c in got.calls), [c["status"] for c in got.calls]
    billed = [r.usage for r in claude_upstream.replies_sent]
    total = sum(
        u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
        for u in billed
    )
    assert got.ledger["input_total"] == total
    assert got.ledger["output"] == sum(u["output_tokens"] for u in billed)
    assert harness.first_estimate_error(got) < 0.03, harness.report(name, got, len(requests))
    print(harness.report(name, got, len(requests)))
    return got


def test_claude_code_print_mode(proxy, claude_upstream, tmp_path):
    p = _start(proxy, claude_upstream)
    _claude(p, tmp_path, "--", harness.PROMPT)
    _check(p, claude_upstream, "claude -p", 1)


def test_claude_code_resumed(proxy, claude_upstream, tmp_path):
    """`claude -p --resume ID`: the session's history comes back from Claude Code's own
    transcript, re-serialized (its newest prompt was a block with cache_control, now a string),
    plus the new prompt: the same conversation and branch."""
    p = _start(proxy, claude_upstream)
    session = "6f1c2a4e-0b7d-4c1e-9a53-2d8e7f4b1c90"
    _claude(p, tmp_path, "--session-id", session, "--", harness.PROMPT)
    _claude(p, tmp_path, "--resume", session, "--", "Tell me the launch code once more.")
    _check(p, claude_upstream, "claude -p --resume", 2)


COMPACT_MARK = "CRITICAL: Respond with TEXT ONLY"
CONTINUED_MARK = "continued from a previous conversation"
SECOND = "Tell me the launch code once more."
THIRD = "What was the launch code?"


def test_claude_code_interactive_compact(proxy, claude_upstream, tmp_path):
    """The TUI in a real terminal: a prompt that runs the 24 steps, a second prompt, Claude Code's
    own `/compact` (it rebuilds its history from its summary: nothing matches any more), a third
    prompt. The session header keeps the session one conversation; the answers keep the fact."""
    answers: list[tuple[str, str]] = []

    def respond(body: dict[str, Any]) -> Reply:
        text = json.dumps(body)
        if harness.is_summary(body):
            return Reply(text=harness.summary(body))
        if not body.get("tools"):
            return Reply(text="Launch code lookup")
        # the newest user turn (a mid-conversation system message may come after it)
        last = json.dumps(next(m for m in reversed(body["messages"]) if m["role"] == "user"))
        if COMPACT_MARK in last:
            facts = ", ".join(sorted(set(harness.FACT_PATTERN.findall(text)))) or "unknown"
            summary = (
                f"<analysis>ok</analysis>\n<summary>The user ran the task's commands; launch code: {facts}.</summary>"
            )
            answers.append(("compact", summary))
            return Reply(text=summary)
        step = harness.next_step(body)
        if CONTINUED_MARK not in text and step < harness.STEPS:
            command = harness.step_command(step)
            return Reply(tool_uses=[{"name": "Bash", "input": {"command": command, "description": f"step {step}"}}])
        reply = harness.answer(body)
        answers.append((last, reply))
        return Reply(text=reply)

    p = _start(proxy, claude_upstream)
    claude_upstream.responder = respond
    extra = {"ANTHROPIC_BASE_URL": p.url, "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(MAX_OUTPUT)}
    tmux = harness.claude_tui(tmp_path, CLIENT_KEY, MODEL, extra)
    try:
        harness.wait_screen("the prompt", lambda: "❯" in tmux.pane(), tmux, 180)
        tmux.type(harness.PROMPT)
        harness.wait_screen(
            "the first answer", lambda: len(answers) >= 1 and "Done. The launch code" in tmux.pane(), tmux
        )
        tmux.type(SECOND)
        harness.wait_screen("the second answer", lambda: any(SECOND in q for q, _ in answers), tmux)
        harness.wait_screen("the screen", lambda: tmux.pane().count("Done. The launch code") >= 2, tmux, 120)
        tmux.type("/compact")
        harness.wait_screen(
            "the compaction", lambda: any(q == "compact" for q, _ in answers) and "Compacted" in tmux.pane(), tmux
        )
        tmux.type(THIRD)
        harness.wait_screen("the third answer", lambda: any(THIRD in q for q, _ in answers), tmux)
    finally:
        tmux.close()

    assert all(harness.FACT in a for _, a in answers), answers
    assert claude_upstream.rejections == [], claude_upstream.rejections[:1]
    requests = claude_upstream.message_requests
    got = harness.outcome(p, len(requests))
    # Claude Code sent no title or classification call here (CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC):
    # one conversation, whose branches are: the main line and the history rebuilt after /compact,
    # linked by x-claude-code-session-id; the /compact request is the line's side call, not a turn
    assert len(got.conversations) == 1, got.conversations
    assert len(got.branches) == 2, got.branches
    assert [c["purpose"] for c in got.calls].count("client_compaction") == 1, got.calls
    assert {b["fork_seq"] for b in got.branches if b["parent_id"]} == {0}
    # the rebuilt history carries the compaction's summary: the line's next branch after that call
    # (`proxy.rebuilt`), one boundary on the inspector's conversation page, counted by its cause
    compaction = next(c for c in got.calls if c["purpose"] == "client_compaction")
    assert [b["parent_id"] for b in got.branches if b["parent_id"]] == [compaction["branch_id"]]
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    page = httpx.get(f"{p.url}/ui/conversations/{got.conversations[0]['id']}", headers=admin, timeout=10).text
    assert page.count('data-boundary="client_compaction"') == 1
    assert f'data-call="{compaction["id"]}"' in page
    metrics = httpx.get(f"{p.url}/metrics", timeout=10).text
    assert 'ctxproxy_forks_total{cause="client_compaction"} 1' in metrics
    assert 'cause="start"' not in metrics
    assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints
    assert all(c["status"] == "complete" for c in got.calls), [c["status"] for c in got.calls]
    print(harness.report("claude interactive", got, len(requests)))
