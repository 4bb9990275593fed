"""`policies.tokens.count_tools` counts every tool shape the APIs allow, by each API's published
rendering; `policies.tool_render` writes OpenAI's TypeScript exactly as OpenAI's own harmony
renderer does (checked against the `openai-harmony` package, schema feature by schema feature)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from policies.tokens import ANTHROPIC_TOOL_PROMPT, TOOLS_FRAMING, count_tools
from policies.tool_render import render_functions
from tests.support.tool_billing import harmony_tools_text, openai_tools_tokens
from tests.support.upstream_server import _encoding, count_text_tokens

ENC = _encoding()
SCHEMA = {"type": "object", "properties": {"command": {"type": "string", "description": "the command"}}}
SCHEMAS: dict[str, Any] = {
    "required and optional": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer", "description": "count"}},
        "required": ["a"],
    },
    "enums, defaults, titles, examples": {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
            "mode": {"type": "string", "default": "fast", "title": "Mode", "examples": ["fast", "slow"]},
            "retries": {"type": "number", "default": 3},
            "flags": {"type": "boolean", "default": False},
        },
    },
    "arrays and nested objects": {
        "type": "object",
        "description": "The request.",
        "properties": {
            "paths": {"type": "array", "items": {"type": "string"}},
            "any_list": {"type": "array"},
            "options": {
                "type": "object",
                "description": "nested",
                "properties": {"depth": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "object"}}},
                "required": ["depth"],
            },
        },
    },
    "type lists, nullable, no type": {
        "type": "object",
        "properties": {
            "timeout": {"type": ["integer", "null"]},
            "name": {"type": "string", "nullable": True},
            "blob": {"description": "anything"},
            "pick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "additionalProperties": False,
    },
    "oneOf at the property level": {
        "type": "object",
        "properties": {
            "target": {
                "description": "where",
                "oneOf": [
                    {"type": "string", "description": "a path"},
                    {"type": "integer", "description": "a file id", "default": 0},
                ],
            },
            "same": {
                "description": "a path",
                "oneOf": [{"type": "string", "description": "a path"}, {"type": "object", "nullable": True}],
            },
        },
        "required": ["target"],
    },
    "empty and multi-line descriptions": {"type": "object", "properties": {}},
}


def n(text: str) -> int:
    return len(ENC.encode(text, disallowed_special=()))


def chat(name: str, description: str, parameters: Any = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, "description": description}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_typescript_rendering_is_harmonys(name: str) -> None:
    tools = [
        chat("run", "Runs it.\nTwice if needed.\r\n", SCHEMAS[name]),
        chat("noop", ""),
        {"type": "function", "name": "flat", "description": "Flat shape.", "parameters": SCHEMAS[name]},
    ]
    text, tokens = harmony_tools_text(tools)
    assert text == f"<|start|>developer<|message|>{render_functions(tools)}<|end|>"
    assert count_tools(tools, ENC) == tokens == n(render_functions(tools)) + TOOLS_FRAMING


def test_namespace_tool_is_its_own_namespace_with_its_nested_tools() -> None:
    inner = [
        {"type": "function", "name": f"agent_{i}", "description": "spawn " * 50, "parameters": SCHEMA} for i in range(5)
    ]
    namespace = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.\nUse sparingly.",
        "tools": inner,
    }
    tools = [chat("exec_command", "Runs a command", SCHEMA), namespace]
    text, tokens = harmony_tools_text(tools)
    assert "namespace multi_agent_v1 {" in text and "// Use sparingly." in text
    assert count_tools(tools, ENC) == tokens
    assert count_tools(tools, ENC) - count_tools(tools[:1], ENC) > 5 * 50  # the nested bulk counts


def test_chat_and_responses_shapes_count_alike() -> None:
    flat = {"type": "function", "name": "bash", "description": "run it", "parameters": SCHEMA, "strict": False}
    assert count_tools([chat("bash", "run it", SCHEMA)], ENC) == count_tools([flat], ENC)


def test_other_openai_shapes_count_their_json() -> None:
    grammar = {"type": "grammar", "syntax": "lark", "definition": "start: " + "WORD " * 100}
    custom = {"type": "custom", "name": "apply_patch", "description": "patch", "format": grammar}
    web = {
        "type": "web_search",
        "search_context_size": "high",
        "user_location": {"type": "approximate", "city": "Paris"},
    }
    mcp = {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.test", "allowed_tools": ["a", "b"]}
    for tool in (custom, web, mcp):
        assert count_tools([tool], ENC) == n(json.dumps(tool, sort_keys=True, ensure_ascii=False))
        assert count_tools([tool], ENC) == openai_tools_tokens([tool], count_text_tokens)
    mixed = [chat("bash", "run it", SCHEMA), custom, web]
    assert count_tools(mixed, ENC) == openai_tools_tokens(mixed, count_text_tokens)


def test_anthropic_tools_are_their_json_plus_the_tool_use_prompt() -> None:
    tool = {"name": "bash", "description": "run — it", "input_schema": SCHEMA}
    marked = {**tool, "cache_control": {"type": "ephemeral"}}
    json_tokens = n(json.dumps(tool, sort_keys=True, ensure_ascii=False))
    assert count_tools([tool], ENC) == count_tools([marked], ENC) == json_tokens + 346
    assert count_tools([tool], ENC, {"type": "any"}) == json_tokens + ANTHROPIC_TOOL_PROMPT["any"] == json_tokens + 313
    assert count_tools([tool], ENC, {"type": "tool", "name": "bash"}) == json_tokens + 313
    assert count_tools([tool], ENC, {"type": "none"}) == json_tokens + 346
    server = {"type": "bash_20250124", "name": "bash"}
    assert count_tools([server], ENC) == n(json.dumps(server, sort_keys=True)) + 346
    assert count_tools([server, tool], ENC) == count_tools([server], ENC) + json_tokens  # the prompt once


def test_no_tools_cost_nothing() -> None:
    assert count_tools(None, ENC) == count_tools([], ENC) == 0


def test_image_parts_cost_openais_published_fixed_amounts() -> None:
    from policies.tokens import IMAGE_TOKENS, IMAGE_TOKENS_LOW, count_message

    url = "data:image/png;base64,iVBORw0KGgo="
    base = count_message({"role": "user", "content": [{"type": "text", "text": "look"}]}, ENC)
    parts = {
        "chat low": ({"type": "image_url", "image_url": {"url": url, "detail": "low"}}, IMAGE_TOKENS_LOW),
        "chat auto": ({"type": "image_url", "image_url": {"url": url}}, IMAGE_TOKENS),
        "responses low": ({"type": "input_image", "image_url": url, "detail": "low"}, IMAGE_TOKENS_LOW),
        "responses high": ({"type": "input_image", "image_url": url, "detail": "high"}, IMAGE_TOKENS),
        "anthropic": (
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}},
            IMAGE_TOKENS,
        ),
    }
    for name, (part, cost) in parts.items():
        message = {"role": "user", "content": [{"type": "text", "text": "look"}, part]}
        assert count_message(message, ENC) == base + cost, name
    assert IMAGE_TOKENS_LOW == 85
