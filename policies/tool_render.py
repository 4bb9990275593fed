"""How OpenAI models see function tools: a TypeScript namespace, rendered the published way.

Problem: a request's tool definitions are billed as input, but not as the JSON the client sent.
OpenAI renders them into the developer message as TypeScript type declarations (the harmony
format OpenAI published with its open-weight models, `openai/harmony`, `encoding.rs`:
`template_tools_section` and `json_schema_to_typescript`); counting the JSON instead overcounts
every key, quote and brace. This module renders that text so `tokens.count_tools` can count it.

Rules (a port of the published renderer; same text, so the same tokens):
- function tools (chat `{"type": "function", "function": {...}}` and Responses' flat shape) go in
  `namespace functions`; a Responses `namespace` tool (Codex's `multi_agent_v1`) is a namespace of
  its own, with its description as `//` comments; namespaces in name order;
- each tool: its description as `//` lines, then `type NAME = (_: PARAMS) => any;` or
  `type NAME = () => any;` without parameters;
- a schema: objects as `{ key?: type, }` with each property's title, description, examples and
  default as comments, `?` unless required; string enums as `"a" | "b"`; integers as `number`;
  arrays as `T[]`; type lists and `oneOf` as unions; `nullable` adds `| null`; anything else `any`.

Example::

    render_functions([{"type": "function", "function": {"name": "ls", "description": "List.",
                       "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}])
    # "# Tools\\n\\n## functions\\n\\nnamespace functions {\\n\\n// List.\\n"
    # "type ls = (_: {\\npath?: string,\\n}) => any;\\n\\n} // namespace functions"
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def _lines(text: str) -> list[str]:
    """Rust's `str::lines`: split on newlines, no trailing empty line, `\\r` before `\\n` dropped."""
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def _is_enum(schema: Mapping[str, Any]) -> bool:
    values = schema.get("enum")
    return isinstance(values, list) and bool(values)


def _default_comment(schema: Mapping[str, Any], quote_strings: bool = True) -> str | None:
    if "default" not in schema:
        return None
    default = schema["default"]
    if isinstance(default, str):
        return f'default: "{default}"' if quote_strings and not _is_enum(schema) else f"default: {default}"
    return "default: " + json.dumps(default, separators=(",", ":"), ensure_ascii=False)


def _nullable(schema: Any, text: str) -> str:
    if isinstance(schema, Mapping) and schema.get("nullable") is True and "null" not in text:
        return text + " | null"
    return text


def _variants(variants: list[Any], indent: str, skip_first_description: bool, parent: str | None) -> str:
    out = ""
    for i, variant in enumerate(variants):
        out += f"{indent} | " + _nullable(variant, typescript(variant, indent + "   "))
        comments = []
        description = variant.get("description") if isinstance(variant, Mapping) else None
        if isinstance(description, str) and not (i == 0 and skip_first_description) and description != parent:
            comments.append(description)
        default = _default_comment(variant) if isinstance(variant, Mapping) else None
        if default:
            comments.append(default)
        if comments:
            out += " // " + " ".join(comments)
        out += "\n"
    return out


def _property(key: str, value: Any, required: bool, indent: str) -> str:
    mark = "" if required else "?"
    if not isinstance(value, Mapping):
        return f"{indent}{key}{mark}: any,\n"
    out = ""
    if isinstance(value.get("title"), str):
        out += f"{indent}// {value['title']}\n{indent}//\n"
    one_of = value.get("oneOf")
    description = value.get("description") if isinstance(value.get("description"), str) else None
    if one_of is None and description is not None:
        out += f"{indent}// {description}\n"
    examples = value.get("examples")
    if isinstance(examples, list) and examples:
        out += f"{indent}// Examples:\n"
        out += "".join(f'{indent}// - "{e}"\n' for e in examples if isinstance(e, str))
    if isinstance(one_of, list):
        first = one_of[0] if one_of and isinstance(one_of[0], Mapping) else {}
        above = description is not None and first.get("description") != description
        if above:
            out += f"{indent}// {description}\n"
        default = _default_comment(value)
        if default:
            out += f"{indent}// {default}\n"
        out += f"{indent}{key}{mark}:\n" + _variants(one_of, indent, above, description) + f"{indent},\n"
        return out
    out += f"{indent}{key}{mark}: " + _nullable(value, typescript(value, indent + "    ")) + ","
    if one_of is None:
        default = _default_comment(value)
        if default:
            out += f" // {default}"
    return out + "\n"


def typescript(schema: Any, indent: str = "") -> str:
    """The TypeScript type of a JSON schema, as the published renderer writes it."""
    if not isinstance(schema, Mapping):
        return "any"
    one_of = schema.get("oneOf")
    if isinstance(one_of, list):
        return "\n" + _variants(one_of, indent, False, None).rstrip("\n")
    kind = schema.get("type")
    if isinstance(kind, list):
        names = ["number" if k == "integer" else k for k in kind if isinstance(k, str)]
        if names:
            return " | ".join(names)
    if not isinstance(kind, str):
        return "any"
    if kind == "object":
        out = f"{indent}// {schema['description']}\n" if isinstance(schema.get("description"), str) else ""
        out += "{\n"
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            required = schema.get("required")
            required_names = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
            for key, value in properties.items():
                out += _property(str(key), value, key in required_names, indent)
        return out + f"{indent}}}"
    if kind == "string":
        values = schema.get("enum")
        quoted = [f'"{v}"' for v in values if isinstance(v, str)] if isinstance(values, list) else []
        return " | ".join(quoted) if quoted else "string"
    if kind in ("number", "integer"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "array":
        return typescript(schema["items"], indent) + "[]" if "items" in schema else "Array<any>"
    return "any"


def _declaration(tool: Mapping[str, Any]) -> list[str]:
    description = tool.get("description")
    out = [f"// {line}" for line in _lines(description if isinstance(description, str) else "")]
    name = tool.get("name", "")
    parameters = tool.get("parameters")
    if parameters is None:
        out.append(f"type {name} = () => any;\n")
    else:
        out.append(f"type {name} = (_: {typescript(parameters)}) => any;\n")
    return out


def _namespace(name: str, description: str | None, tools: Sequence[Mapping[str, Any]]) -> str:
    out = [f"## {name}\n"]
    for line in _lines(description or ""):
        out.append(f"// {line}" if tools else line)
    if tools:
        out.append(f"namespace {name} {{\n")
        for tool in tools:
            out.extend(_declaration(tool))
        out.append(f"}} // namespace {name}")
    return "\n".join(out)


def function_of(tool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The function definition of a chat or Responses function tool (None for other shapes,
    Anthropic's `input_schema` tools included)."""
    if tool.get("type", "function") != "function" or "input_schema" in tool:
        return None
    function = tool.get("function", tool)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        return None
    return function


def render_functions(tools: Sequence[Mapping[str, Any]]) -> str:
    """The tools section for the function and namespace tools in `tools` ("" when none); other
    shapes (custom, server and MCP tools) are not part of it."""
    namespaces: dict[str, tuple[str | None, list[Mapping[str, Any]]]] = {}
    for tool in tools:
        function = function_of(tool)
        if function is not None:
            namespaces.setdefault("functions", (None, []))[1].append(function)
        elif tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            nested = [f for f in (function_of(t) for t in tool.get("tools") or () if isinstance(t, Mapping)) if f]
            description = tool.get("description")
            namespaces[tool["name"]] = (description if isinstance(description, str) else None, nested)
    if not namespaces:
        return ""
    sections = ["# Tools"] + [_namespace(name, *namespaces[name]) for name in sorted(namespaces)]
    return "\n\n".join(sections)


__all__ = ["function_of", "render_functions", "typescript"]
