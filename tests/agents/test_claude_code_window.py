"""Claude Code never feels the window: through ctxproxy what it is told the context holds is the
projection, not the history it keeps, and its own auto-compaction does not start.

Claude Code (2.1.332, pinned in tests/agents/package.json) reads how full its context is from the
input usage of its newest answered request (input + cache read + cache write) plus a
bytes-per-token estimate of what it appended since. It auto-compacts at its auto-compact window
less the reply reserve (`min(max_tokens, 20,000)`) less 13,000; that window is its window for the
model (200,000 for the ids it knows) unless `CLAUDE_CODE_AUTO_COMPACT_WINDOW` lowers it (100,000 at
least). Its `/context` view shows the same figure ("28.7k/100k tokens (29%)"); it calls
`POST /v1/messages/count_tokens` for that view's parts (system prompt, each tool, skills, memory
files: 35 calls) and for large MCP results, never for its history. (`CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`
did not start a compaction in this build, even at 5%.)

The test drives the TUI with a model id it knows and an auto-compact window of 100,000, so its
threshold is 82,904 tokens; 24 steps of Bash output (150 rows each) give it about 86,000 tokens
of history, on a route whose window is 40,000. Through the proxy: no compaction request from
Claude Code reaches the upstream, `/context` shows what the proxy sends, and the answers keep the
launch code through the proxy's own summaries. The control runs the same session straight at
the upstream: it compacts (billed 84,195 before it did).

What tells the two apart is usage, which describes the projection on every wire; `count_tokens`
does not take part in this build's decision, so the test passes with `count_tokens` relayed
unchanged too.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from tests.agents import harness
from tests.support.anthropic_upstream import AnthropicUpstream, Reply

pytestmark = pytest.mark.agents

MODEL = "claude-haiku-4-5"  # a model Claude Code knows: its own window, 200,000 tokens
WINDOW = 40_000
ROWS = 150  # rows a step prints: about 2,600 tokens
MAX_OUTPUT = 4096
COMPACT_WINDOW = 100_000  # the smallest CLAUDE_CODE_AUTO_COMPACT_WINDOW it takes
THRESHOLD = COMPACT_WINDOW - MAX_OUTPUT - 13_000  # where it compacts: 82,904 tokens
CONTEXT_LINE = re.compile(r"([\d.]+)(k?)/\d+k tokens")
POLICY = {
    "context_window": WINDOW,
    "keep_recent_tokens": 3000,
    "summary_chunk_tokens": 4000,
    "overflow_wait": 60,
    "summarizer": {"timeout": 60, "max_attempts": 2},
    "tool_results": {"old_max_chars": 2000},
}
CLIENT_KEY = "sk-ant-client-key-0002"
TIMEOUTS = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}
COMPACT_MARK = "CRITICAL: Respond with TEXT ONLY"


def _last_user(body: dict[str, Any]) -> str:
    return json.dumps(next((m for m in reversed(body.get("messages") or []) if m.get("role") == "user"), {}))


def _responder(body: dict[str, Any]) -> Reply:
    if harness.is_summary(body):
        return Reply(text=harness.summary(body))
    if COMPACT_MARK in _last_user(body):  # Claude Code's own compaction: answered, and counted by the test
        facts = ", ".join(sorted(set(harness.FACT_PATTERN.findall(json.dumps(body))))) or "unknown"
        return Reply(text=f"<analysis>ok</analysis>\n<summary>Commands run; launch code: {facts}.</summary>")
    if not body.get("tools"):
        return Reply(text="Launch code lookup")
    step = harness.next_step(body)
    if step < harness.STEPS:
        command = harness.step_command(step).replace(f" 1 {harness.ROWS}", f" 1 {ROWS}")
        use = {"name": "Bash", "input": {"command": command, "description": f"step {step}"}}
        thinking = "The next command." if (body.get("thinking") or {}).get("type") == "enabled" else None
        return Reply(thinking=thinking, tool_uses=[use])
    return Reply(text=harness.answer(body))


@pytest.fixture
def claude_upstream() -> Any:
    server = AnthropicUpstream(api_key=CLIENT_KEY, context_windows={MODEL: 1_000_000})
    server.start()
    yield server
    server.stop()


SECOND = "Tell me the launch code once more."


def _claude(base_url: str, server: AnthropicUpstream, tmp_path: Any) -> str:
    """The TUI: the prompt that runs the 24 steps, `/context`, then a second prompt, each
    answered; the screen `/context` drew."""
    extra = {
        "ANTHROPIC_BASE_URL": base_url,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(MAX_OUTPUT),
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(COMPACT_WINDOW),
    }
    tmux = harness.claude_tui(tmp_path, CLIENT_KEY, MODEL, extra)

    def answered(n: int) -> bool:
        return (
            sum(1 for r in server.replies_sent if r.message and "Done. The launch code" in json.dumps(r.message)) >= n
        )

    try:
        harness.wait_screen("the prompt", lambda: "❯" in tmux.pane(), tmux, 180)
        tmux.type(harness.PROMPT)
        harness.wait_screen("the first answer", lambda: answered(1), tmux)
        time.sleep(2)
        tmux.type("/context")
        harness.wait_screen("the context view", lambda: "Free space" in tmux.pane(), tmux, 120)
        screen = tmux.pane()
        tmux.type(SECOND)
        harness.wait_screen("the second answer", lambda: answered(2), tmux)
    finally:
        tmux.close()
    return screen


def _compactions(server: AnthropicUpstream) -> list[Any]:
    """Claude Code's own compaction requests the upstream received."""
    return [r for r in server.message_requests if COMPACT_MARK in _last_user(r.body)]


def _context_tokens(screen: str) -> float:
    """The tokens `/context` says the context holds ("28.7k/100k tokens (29%)")."""
    match = CONTEXT_LINE.search(screen)
    assert match is not None, screen[-3000:]
    return float(match.group(1)) * (1000 if match.group(2) else 1)


def test_claude_code_is_told_the_projection(proxy, claude_upstream, tmp_path):
    claude_upstream.responder = _responder
    route = {
        "name": "claude",
        "match": {"model": "claude-*", "path": "/v1/messages"},
        "upstream": {"base_url": claude_upstream.url, "timeouts": TIMEOUTS},  # the client's own key
        "policy": "default",
    }
    p = proxy(fresh=True, routes=[route], policies={"default": POLICY})
    screen = _claude(p.url, claude_upstream, tmp_path)
    harness.wait_idle(p)

    requests = claude_upstream.requests
    messages = claude_upstream.message_requests
    got = harness.outcome(p, len(messages))
    history = max((c.get("projection") or {}).get("client_tokens") or 0 for c in got.main_calls)
    sent = max((c.get("usage") or {}).get("input_total") or 0 for c in got.main_calls)
    counts = [r for r in requests if r.path.endswith("/count_tokens")]
    shown = _context_tokens(screen)
    numbers = (
        f"[claude window] threshold {THRESHOLD}, /context shows {shown:.0f}, history Claude Code held up to "
        f"{history} tokens (estimate), largest bill {sent}, count_tokens calls at the upstream {len(counts)}, "
        f"Claude Code compactions {len(_compactions(claude_upstream))}, proxy compactions {got.compactions}"
    )
    print(numbers)
    assert history > THRESHOLD, numbers  # the premise: without the proxy it would compact (the control)
    assert shown <= WINDOW, numbers  # told the projection, not the history
    assert sent <= WINDOW, numbers
    assert _compactions(claude_upstream) == [], numbers
    assert claude_upstream.rejections == [], claude_upstream.rejections[:1]
    assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints


def test_control_claude_code_compacts_straight_at_the_upstream(claude_upstream, tmp_path):
    """The same session without the proxy: told the size of its whole history, it compacts."""
    claude_upstream.responder = _responder
    _claude(claude_upstream.url, claude_upstream, tmp_path)
    usages = [r.usage for r in claude_upstream.replies_sent if r.usage]
    billed = max(u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in usages)
    compactions = _compactions(claude_upstream)
    print(f"[claude window, no proxy] threshold {THRESHOLD}, largest bill {billed}, compactions {len(compactions)}")
    assert compactions, billed
