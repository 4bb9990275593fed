"""Shadow mode's scripted agent (tests/e2e/test_shadow.py, tests/e2e/test_ui_shadow.py): a deploy
session whose first tool result hides a fact in its middle, and models that need it or not.

The policy's window (3,000 tokens) is far below the model's real one (gpt-4o: 128,000), so the
proxy trims that result to fit and the fact goes, while the client's own request still fits the
real window: each request gets a shadow twin carrying the fact.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.e2e import asks_shared_summary
from tests.support.proxy_process import ProxyProcess
from tests.support.upstream_server import Reply, tool_call
from tests.support.waiting import wait_until

FACT = "deploy_port=8123"
SHADOW = {"rate": 1.0, "max_usd_per_day": 100, "min_interval_s": 0}
POLICY = {"context_window": 3000, "max_output_tokens": 300, "shadow": SHADOW}
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
    for name in ("read_config", "deploy", "run_tests")
]


def summary_request(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    own = bool(messages) and str(messages[0].get("content", "")).startswith("You compress the history")
    return own or asks_shared_summary(body)


def context_of(body: dict[str, Any]) -> str:
    return json.dumps(body.get("messages") or [])


def needs_the_fact(body: dict[str, Any]) -> Reply:
    """Deploys on the port when its context holds it, else reads the config again."""
    if summary_request(body):
        return Reply(content="## Goal\nDeploy.\n## Next step\nDeploy.")
    if FACT in context_of(body):
        return Reply(tool_calls=[tool_call("deploy", {"port": 8123}, id="call_deploy")])
    return Reply(tool_calls=[tool_call("read_config", {}, id="call_read")])


def ignores_the_fact(body: dict[str, Any]) -> Reply:
    if summary_request(body):
        return Reply(content="## Goal\nDeploy.\n## Next step\nDeploy.")
    return Reply(tool_calls=[tool_call("run_tests", {}, id="call_tests")])


def agent_history(tag: str) -> list[dict[str, Any]]:
    """A deploy session whose first tool result hides the fact in its middle (about 5,000 tokens)."""
    filler = " ".join(f"line {i} of the config dump {tag}" for i in range(400))
    config = f"{filler}\n{FACT}\n{filler}"
    return [
        {"role": "system", "content": "You are a deploy agent."},
        {"role": "user", "content": f"Deploy the billing service ({tag})."},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("read_config", {}, id="call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": config},
        {"role": "assistant", "content": "Read it."},
        {"role": "user", "content": "Go ahead and deploy now."},
    ]


def shadow_pairs(p: ProxyProcess, conversation: str, n: int = 1) -> list[dict[str, Any]]:
    """The conversation's shadow records once `n` of them are stored (they run in the background)."""

    def stored() -> list[dict[str, Any]] | None:
        calls = [c for c in p.calls(conversation) if c["purpose"] == "shadow"]
        return calls if len(calls) >= n else None

    found: list[dict[str, Any]] = wait_until(stored, timeout=20, interval=0.1, what="shadow records")
    return found


def ask(p: ProxyProcess, api_key: str, messages: list[dict[str, Any]], **kw: Any) -> tuple[Any, str]:
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, tools=TOOLS, **kw
    )
    return raw.parse(), raw.headers["x-conversation-id"]
