"""The inspector's browser tests' world (tests/e2e/test_ui_pages.py): the conversations a real
proxy serves, and Debian's chromium driven by playwright.

`running_scenario` starts one private proxy (own SQLite file) and drives two real conversations
with the openai SDK against the scripted upstream at a 6,000-token window:
- `demo`: an agent session with an explicit `X-Conversation-Id` and a `bash` tool, results big
  enough to be trimmed, one turn answered through a recall detour, and a summarizer that works,
  so later calls send the summary block;
- `pruned`: a session on a policy with `on_overflow: prune` whose summarizer always fails, so its
  checkpoints are failed ones and its calls drop old groups whole.

`Browser` logs every request its pages make and every script error or CSP violation.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from tests.support.e2e import asks_shared_summary
from tests.support.proxy_process import ADMIN_TOKEN, ProxyProcess, default_config, subprocess_env
from tests.support.upstream_server import Reply, UpstreamServer, tool_call
from tests.support.waiting import wait_until

MODEL = "gpt-4.1-nano"  # models with litellm prices, so every call has a cost
PRUNE_MODEL = "gpt-4.1-mini-2025-04-14"
WINDOW = 6000
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 500,
    "keep_recent_tokens": 1500,
    "summary_chunk_tokens": 2000,
    "overflow_wait": 20,
    "late_trim": 0.8,  # trimmed from the trigger on: the demo shows every form an event can take
    "summarizer": {"timeout": 5, "max_attempts": 2},
    "tool_results": {"keep_recent_groups": 2, "old_max_chars": 300, "clear_at_least": 1},
    "recall": {"enabled": "auto"},
}
RECALL_TURN = 5
"""The demo turn whose first answer is a recall detour (a search for RECALL_QUERY)."""
RECALL_QUERY = "LOG-2"
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
SUMMARY = (
    "## Goal\nShip the billing migration.\n## Constraints\nnone\n## Decisions\nnone\n## Key facts\nnone\n"
    "## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue."
)
SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
OBJECTIVE = {"role": "user", "content": "Objective: migrate billing to the new queue."}


def is_summary_request(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    own = bool(messages) and str(messages[0].get("content", "")).startswith("You compress the history")
    return own or asks_shared_summary(body)


def respond(body: dict[str, Any]) -> Reply:
    model = body.get("model")
    if is_summary_request(body):
        return Reply(status=500) if model == PRUNE_MODEL else Reply(content=SUMMARY)
    last = (body.get("messages") or [{}])[-1]
    recalled = last.get("role") == "tool" and str(last.get("tool_call_id")).startswith("call_recall")
    if model == MODEL and str(last.get("content", "")).startswith(f"step {RECALL_TURN}:"):
        return Reply(tool_calls=[tool_call("ctxproxy_recall", {"query": RECALL_QUERY}, id="call_recall_1")])
    if model == MODEL and (last.get("role") == "user" or recalled):
        n = len(body["messages"])
        call = tool_call("bash", {"command": f"cat log_{n}.txt"}, id=f"call_{n}")
        return Reply(content=None, tool_calls=[call], cached_tokens=64)
    return Reply(content=f"done with {str(last.get('content', ''))[:20]}", cached_tokens=64)


class Demo:
    """The demo agent session: one user turn = a tool call, its result, the answer."""

    def __init__(self, p: ProxyProcess, api_key: str, conversation: str) -> None:
        self.client = p.client(api_key)
        self.headers = {"X-Conversation-Id": conversation}
        self.messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
        self.turns = 0

    def turn(self) -> None:
        i = self.turns
        self.turns += 1
        self.messages.append({"role": "user", "content": f"step {i}: read the next log file. " + "context " * 150})
        answer = self.client.chat.completions.create(
            model=MODEL, messages=self.messages, tools=[BASH], extra_headers=self.headers
        )
        message = answer.choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            output = f"LOG-{i} " + "\n".join(f"line {k} of log {i}: status ok, latency {k * 7} ms" for k in range(40))
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        answer = self.client.chat.completions.create(
            model=MODEL, messages=self.messages, tools=[BASH], extra_headers=self.headers
        )
        self.messages.append(answer.choices[0].message.model_dump(exclude_none=True))


def drive_pruned(p: ProxyProcess, api_key: str) -> str:
    """Long user notes until the failing summarizer left a failed checkpoint and a call pruned."""
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Objective: keep notes."}]
    conversation = ""

    def done() -> bool:
        failed = [
            c for c in p.admin_json(f"conversations/{conversation}/checkpoints")["data"] if c["status"] == "failed"
        ]
        calls = p.admin_json(f"conversations/{conversation}/calls?limit=1000")["data"]
        return bool(failed) and any((c["projection"] or {}).get("pruned_seqs") for c in calls)

    for i in range(40):
        messages.append({"role": "user", "content": f"note {i}: " + "remember this detail " * 120})
        raw = client.chat.completions.with_raw_response.create(model=PRUNE_MODEL, messages=messages)
        conversation = raw.headers["x-conversation-id"]
        messages.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        if i > 3 and done():
            break
    wait_until(done, timeout=10, what="a failed checkpoint and a pruned call")
    return conversation


class Scenario:
    def __init__(self, p: ProxyProcess, demo: str, pruned: str, api_key: str) -> None:
        self.p = p
        self.demo = demo  # the proxy's id of the demo conversation
        self.pruned = pruned
        self.api_key = api_key

    def admin(self, path: str) -> Any:
        return self.p.admin_json(path)


class Browser:
    """One chromium for the module; every page it opens logs its requests and errors."""

    def __init__(self, base: str, shots: Path) -> None:

        executable = shutil.which("chromium")
        if executable is None:
            pytest.fail(
                "Debian's chromium is not installed: README's test command installs it (apt-get install chromium)"
            )
        self.base = base
        self.shots = shots
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.engine = sync_playwright().start()
        self.browser = self.engine.chromium.launch(executable_path=executable, args=["--no-sandbox"])

    def context(self, **kw: Any) -> Any:
        context = self.browser.new_context(**kw)
        context.set_default_timeout(10_000)
        context.on("request", lambda request: self.requests.append(request.url))
        return context

    def page(self, context: Any) -> Any:
        page = context.new_page()
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        return page

    def login(self, **kw: Any) -> tuple[Any, Any]:
        context = self.context(**kw)
        page = self.page(context)
        page.goto(f"{self.base}/ui/")
        page.fill("#token", ADMIN_TOKEN)
        page.click("form.login button")
        page.wait_for_url(f"{self.base}/ui/")
        return context, page

    def shot(self, page: Any, name: str, full_page: bool = True) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=full_page)

    def close(self) -> None:
        self.browser.close()
        self.engine.stop()


UI_TENANT = "team-ui"
"""The tenant of the keys the keys page test makes, with limits of its own (`tenants:`)."""


@contextlib.contextmanager
def running_scenario(upstream_server: UpstreamServer, closed_port: int, basetemp: Path) -> Iterator[Scenario]:
    """A private proxy (own SQLite file) with the two conversations driven to their end state."""
    config = default_config(upstream_server.base_url, closed_port)
    route = json.loads(json.dumps(config["routes"][0]))
    route.update(name="ui-prune", match={"model": PRUNE_MODEL}, policy="prune")
    config["routes"].insert(0, route)
    config["policies"] = {"default": POLICY, "prune": {**POLICY, "on_overflow": "prune"}}
    config["tenants"] = {UI_TENANT: {"tokens_per_month": 10_000_000, "requests_per_minute": 1000}}
    workdir = Path(tempfile.mkdtemp(prefix="proxy-ui-", dir=basetemp))
    p = ProxyProcess(config, workdir, subprocess_env()).start()
    upstream_server.context_windows[MODEL] = WINDOW
    upstream_server.context_windows[PRUNE_MODEL] = WINDOW
    upstream_server.responder = respond
    try:
        api_key = f"sk-ui-{uuid.uuid4().hex}"
        external = f"ui-demo-{uuid.uuid4().hex[:8]}"
        session = Demo(p, api_key, external)
        session.turn()
        demo = p.admin_json("conversations?limit=10")["data"][0]["id"]

        def active() -> list[dict[str, Any]]:
            return [c for c in p.admin_json(f"conversations/{demo}/checkpoints")["data"] if c["status"] == "active"]

        while not active() and session.turns < 40:
            session.turn()
        wait_until(active, timeout=30, what="an active checkpoint of the demo conversation")
        for _ in range(4):
            session.turn()  # these calls send the summary block
        pruned = drive_pruned(p, api_key)
        yield Scenario(p, demo, pruned, api_key)
    finally:
        upstream_server.responder = None
        upstream_server.context_windows.pop(MODEL, None)
        upstream_server.context_windows.pop(PRUNE_MODEL, None)
        p.stop()


def values(page: Any, selector: str) -> dict[str, Any]:
    """`data-field` -> parsed `data-value` of the cells under `selector`."""
    cells = page.locator(f"{selector} [data-field][data-value]")
    return {
        cells.nth(i).get_attribute("data-field"): json.loads(cells.nth(i).get_attribute("data-value"))
        for i in range(cells.count())
    }


def usage_of(scenario: Scenario, conversation: str) -> dict[str, Any]:
    totals: dict[str, Any] = scenario.admin(f"usage?conversation={conversation}")["totals"]
    return totals


def last_call(scenario: Scenario, conversation: str, where: Any) -> dict[str, Any]:
    calls = scenario.admin(f"conversations/{conversation}/calls?limit=1000")["data"]
    return [c for c in calls if c["purpose"] == "main" and c["projection"] and where(c["projection"])][-1]
