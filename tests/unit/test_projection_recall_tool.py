"""The projection is told the recall tool's name when the request's tools hold it, in any wire's shape."""

from __future__ import annotations

from proxy.policy_settings import Policy
from proxy.projector import recall_tool
from proxy.tool_settings import Recall

CHAT = {"type": "function", "function": {"name": "ctxproxy_recall", "parameters": {}}}
ANTHROPIC = {"name": "ctxproxy_recall", "input_schema": {"type": "object"}}
RESPONSES = {"type": "function", "name": "ctxproxy_recall", "parameters": {}}
BASH = {"type": "function", "function": {"name": "bash", "parameters": {}}}


def test_named_in_every_wires_tool_shape() -> None:
    policy = Policy(recall=Recall(enabled="auto"))
    for tool in (CHAT, ANTHROPIC, RESPONSES):
        assert recall_tool(policy, {"tools": [BASH, tool]}) == "ctxproxy_recall"


def test_none_without_the_tool_or_with_recall_off() -> None:
    assert recall_tool(Policy(recall=Recall(enabled=True)), {"tools": [BASH]}) is None
    assert recall_tool(Policy(recall=Recall(enabled=True)), {}) is None
    off = Policy(recall=Recall(enabled=False))
    assert recall_tool(off, {"tools": [CHAT]}) is None  # recall off: a client tool of that name is not ours


def test_the_policy_names_the_tool() -> None:
    policy = Policy(recall=Recall(enabled=True, tool_name="history_search"))
    tool = {"type": "function", "function": {"name": "history_search"}}
    assert recall_tool(policy, {"tools": [tool]}) == "history_search"
    assert recall_tool(policy, {"tools": [CHAT]}) is None
