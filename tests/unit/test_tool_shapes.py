"""`policies.tokens.count_tools` counts every tool shape the APIs allow."""

from __future__ import annotations

import json
from typing import Any

from policies.tokens import TOKENS_PER_TOOL, TOOLS_FRAMING, count_tools
from tests.support.upstream_server import _encoding

ENC = _encoding()
SCHEMA = {"type": "object", "properties": {"command": {"type": "string", "description": "the command"}}}


def n(text: str) -> int:
    return len(ENC.encode(text, disallowed_special=()))


def one(tool: dict[str, Any]) -> int:
    return count_tools([tool], ENC) - TOOLS_FRAMING


def test_chat_responses_and_anthropic_function_tools_count_alike() -> None:
    chat = {"type": "function", "function": {"name": "bash", "description": "run it", "parameters": SCHEMA}}
    flat = {"type": "function", "name": "bash", "description": "run it", "parameters": SCHEMA, "strict": False}
    anthropic = {
        "name": "bash",
        "description": "run it",
        "input_schema": SCHEMA,
        "cache_control": {"type": "ephemeral"},
    }
    expected = TOKENS_PER_TOOL + n("bash") + n("run it") + n(json.dumps(SCHEMA, sort_keys=True))
    assert one(chat) == one(flat) == one(anthropic) == expected


def test_namespace_tool_counts_its_nested_tools() -> None:
    inner = [
        {"type": "function", "name": f"agent_{i}", "description": "spawn " * 50, "parameters": SCHEMA} for i in range(5)
    ]
    namespace = {"type": "namespace", "name": "multi_agent_v1", "description": "agents", "tools": inner}
    nested = sum(one(t) for t in inner)
    assert one(namespace) == TOKENS_PER_TOOL + n("multi_agent_v1") + n("agents") + nested
    assert nested > 5 * 50  # the bulk of it


def test_custom_server_and_mcp_tools_count_their_configuration() -> None:
    grammar = {"type": "grammar", "syntax": "lark", "definition": "start: " + "WORD " * 100}
    custom = {"type": "custom", "name": "apply_patch", "description": "patch", "format": grammar}
    assert one(custom) >= n(json.dumps({"format": grammar}, sort_keys=True))
    web = {
        "type": "web_search",
        "search_context_size": "high",
        "user_location": {"type": "approximate", "city": "Paris"},
    }
    assert one(web) > TOKENS_PER_TOOL + 10
    mcp = {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.test", "allowed_tools": ["a", "b"]}
    assert one(mcp) > TOKENS_PER_TOOL + 10


def test_codex_tools_within_a_few_percent_of_their_json() -> None:
    """The scripted upstreams bill tool definitions as their JSON; so does a real API, about."""
    inner = [
        {"type": "function", "name": f"t{i}", "description": "does things " * 20, "parameters": SCHEMA}
        for i in range(8)
    ]
    tools = [
        {"type": "function", "name": "exec_command", "description": "Runs a command", "parameters": SCHEMA},
        {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents", "tools": inner},
        {"type": "web_search"},
    ]
    billed = n(json.dumps(tools, sort_keys=True))
    assert abs(count_tools(tools, ENC) - billed) / billed < 0.15
