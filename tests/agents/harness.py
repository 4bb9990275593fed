"""Drive a real agent CLI through the real proxy against a scripted model.

The scripted model (wire-agnostic, stateless: it reads the request it gets) makes the agent run
its own shell tool for `STEPS` steps: step 0 reads `facts.txt` (the launch code and filler), steps
1.. print a few KB each (`seq`). Which step comes next is read from the request: the highest
`step N row` in it is the last step whose output the agent sent back. After the last step it
answers with the launch code it finds in the request -- in a tool result still in the tail, or
in the `<conversation_summary>` the proxy injected -- so an answer with the code shows that the
fact survived compaction. Summarizer requests (the proxy's own) get a structured summary that
quotes every launch code in what it was asked to compress.

`run_agent` runs the CLI in its own HOME and working directory, with telemetry and update
checks off and every proxy variable cleared, bounded by a deadline; the process group is killed
whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.e2e import asks_shared_summary
from tests.support.waiting import wait_until

AGENTS_DIR = Path(__file__).resolve().parent
BIN = AGENTS_DIR / "node_modules" / ".bin"
FACT = "LC-48213"
FACT_PATTERN = re.compile(r"LC-\d{5}")
STEPS = 24
ROWS = 50
PROMPT = (
    "Run the shell commands the task needs, one at a time. At the end, tell me the launch code "
    "that is written in facts.txt."
)
SUMMARIZER_MARK = "You compress the history"
_STEP = re.compile(r"step (\d+) row")


def install_hint(cli: str) -> str:
    return f"{BIN / cli} is missing: run `npm ci --prefix tests/agents` (README, 'Run the whole test suite')"


def write_workspace(cwd: Path) -> None:
    cwd.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"step 0 row {i:04d}: inventory record, nothing to see here\n" for i in range(1, ROWS + 1))
    (cwd / "facts.txt").write_text(f"The launch code is {FACT}.\n{rows}")


def step_command(step: int) -> str:
    if step == 0:
        return "cat facts.txt"
    return f"seq -f 'step {step} row %04g: the quick brown fox jumps over the lazy dog' 1 {ROWS}"


def is_summary(body: dict[str, Any]) -> bool:
    """A proxy summarizer request, on any wire (its instructions are the system text)."""
    messages = body.get("messages") or []
    heads = [body.get("instructions"), body.get("system")]
    if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
        heads.append(messages[0].get("content"))
    return any(isinstance(h, str) and h.startswith(SUMMARIZER_MARK) for h in heads) or asks_shared_summary(body)


def next_step(body: dict[str, Any]) -> int:
    """The step the agent is at: one past the newest step output in the request."""
    seen = [int(n) for n in _STEP.findall(json.dumps(body))]
    return max(seen) + 1 if seen else 0


def answer(body: dict[str, Any]) -> str:
    found = sorted(set(FACT_PATTERN.findall(json.dumps(body))))
    if not found:
        return "I could not find the launch code anywhere in our conversation."
    return f"Done. The launch code is {found[0]}."


def summary(body: dict[str, Any]) -> str:
    facts = sorted(set(FACT_PATTERN.findall(json.dumps(body))))
    steps = [int(n) for n in _STEP.findall(json.dumps(body))]
    key = "\n".join(f"- launch code {f} (from facts.txt)" for f in facts) or "- none"
    return (
        "## Goal\nRun the task's shell commands, then report the launch code from facts.txt.\n"
        "## Constraints\nnone\n## Decisions\nnone\n"
        f"## Key facts\n{key}\n- steps done: up to {max(steps) if steps else 0}\n"
        "## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue with the next command."
    )


@dataclass
class AgentRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def agent_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment: own HOME, no proxy variables, telemetry and update checks off."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        # Claude Code
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # pi
        "PI_OFFLINE": "1",
        "PI_TELEMETRY": "0",
        "PI_SKIP_VERSION_CHECK": "1",
    }
    env.update(extra or {})
    return env


def run_agent(argv: list[str], cwd: Path, env: dict[str, str], deadline: float = 600.0) -> AgentRun:
    """Run the CLI to completion (stdin closed); killed with its process group at the deadline."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        raise AssertionError(
            f"{argv[0]} did not finish within {deadline:.0f} s\nstdout:\n{out.decode()[-3000:]}\n"
            f"stderr:\n{err.decode()[-3000:]}"
        ) from None
    finally:
        _kill_group(proc)
    return AgentRun(
        proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - started
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """The CLI's whole process group (shell children included), by its own id."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.poll()


@dataclass
class Outcome:
    """What the proxy stored for one agent run (a fresh proxy: everything in it is this run's)."""

    conversations: list[dict[str, Any]]
    branches: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    calls: list[dict[str, Any]]
    ledger: dict[str, Any]

    @property
    def main_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c.get("purpose") == "main"]

    @property
    def compactions(self) -> int:
        return len([c for c in self.checkpoints if c["status"] in ("active", "superseded")])


def wait_idle(p: Any, timeout: float = 90.0) -> None:
    """Wait until the proxy runs no compaction (`ctxproxy_compactions_running` 0 on /metrics): one
    the agent's last turn planned may still be summarizing when the agent is done, and its upstream
    request and call record would land after the test read the upstream's bill."""

    def idle() -> bool:
        text = httpx.get(f"{p.url}/metrics", timeout=10).text
        match = re.search(r"^ctxproxy_compactions_running (\d+)$", text, re.M)
        assert match is not None, "ctxproxy_compactions_running missing from /metrics"
        return match.group(1) == "0"

    wait_until(idle, timeout=timeout, interval=0.2, what="no compaction running")


def outcome(p: Any, expected_calls: int, timeout: float = 60.0) -> Outcome:
    """Wait until the proxy has recorded `expected_calls` calls, none pending (records are
    written after the answer), then read conversations, branches, checkpoints, calls and the
    ledger."""
    deadline = time.monotonic() + timeout
    while True:
        conversations = p.admin_json("conversations", params={"limit": 1000})["data"]
        calls = [
            c
            for conv in conversations
            for c in p.admin_json(f"conversations/{conv['id']}/calls", params={"limit": 1000})["data"]
        ]
        settled = len(calls) >= expected_calls and all(c.get("status") != "pending" for c in calls)
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    branches = [b for conv in conversations for b in p.conversation(conv["id"])["branches"]]
    checkpoints = [c for conv in conversations for c in p.admin_json(f"conversations/{conv['id']}/checkpoints")["data"]]
    return Outcome(conversations, branches, checkpoints, calls, p.admin_json("usage")["totals"])


def report(name: str, got: Outcome, upstream_requests: int) -> str:
    """One line of numbers for the run (shown with `pytest -s`)."""
    first = got.main_calls[0] if got.main_calls else {}
    estimate = (first.get("projection") or {}).get("sent_tokens") if first else None
    billed = (first.get("usage") or {}).get("input_total") if first else None
    client = sum((c.get("projection") or {}).get("client_tokens") or 0 for c in got.main_calls)
    sent = sum((c.get("projection") or {}).get("sent_tokens") or 0 for c in got.main_calls)
    return (
        f"[{name}] upstream requests {upstream_requests}, calls {len(got.calls)} "
        f"(main {len(got.main_calls)}), conversations {len(got.conversations)}, branches {len(got.branches)}, "
        f"compactions {got.compactions}, ledger input {got.ledger.get('input_total')} "
        f"output {got.ledger.get('output')}, "
        f"tokens the agent sent {client} vs sent upstream {sent} (estimates), "
        f"first request estimate {estimate} vs billed {billed}"
    )


def first_estimate_error(got: Outcome) -> float:
    """|estimate - billed| / billed for the run's first main call (the tokens.py estimate before
    any calibration; the scripted upstreams bill by the providers' published rules,
    `tests/support/tool_billing.py`): the issue asks for 3% at most."""
    first = got.main_calls[0]
    estimate = first["projection"]["sent_tokens"]
    billed = first["usage"]["input_total"]
    return float(abs(estimate - billed) / billed)


class Tmux:
    """Claude Code's interactive TUI in a private tmux server (its own socket), killed at the end."""

    def __init__(self, socket: Path, command: str) -> None:
        self.socket = str(socket)
        self._tmux("new-session", "-d", "-x", "200", "-y", "50", command)

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", self.socket, "-f", "/dev/null", *args], capture_output=True, text=True, timeout=30
        )
        return done.stdout

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-l", text)
        time.sleep(0.5)
        self._tmux("send-keys", "Enter")

    def pane(self) -> str:
        return self._tmux("capture-pane", "-p", "-S", "-5000")

    def close(self) -> None:
        self._tmux("kill-server")


def wait_screen(what: str, predicate: Any, tmux: Tmux, timeout: float = 300.0) -> None:
    """Poll `predicate` until it holds; past `timeout`, fail showing the screen's last 4,000 chars."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}; the screen:\n{tmux.pane()[-4000:]}")
        time.sleep(0.5)


def claude_tui(tmp_path: Path, api_key: str, model: str, extra: dict[str, str]) -> Tmux:
    """Claude Code's TUI in tmux on a fresh workspace (`write_workspace`) and HOME, onboarding
    done, the workspace trusted, `api_key` approved; `extra` adds to its environment
    (`ANTHROPIC_BASE_URL` at least)."""
    claude = BIN / "claude"
    assert claude.exists(), install_hint("claude")
    home = tmp_path / "home"
    home.mkdir()
    cwd = tmp_path / "work"
    write_workspace(cwd)
    state = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [api_key[-20:]], "rejected": []},
        "projects": {str(cwd): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
    }
    (home / ".claude.json").write_text(json.dumps(state))
    env = agent_env(home, {"ANTHROPIC_API_KEY": api_key, "TERM": "xterm-256color", **extra})
    env.pop("CI")
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = f"cd {shlex.quote(str(cwd))} && exec env -i {assignments} {claude} --model {model} --allowedTools Bash"
    return Tmux(tmp_path / "tmux.sock", command)
