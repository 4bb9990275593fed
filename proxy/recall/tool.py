"""Whether a request gets the recall tool, and the tool in each wire's own format.

The definition is a function of the policy and the wire alone (invariant 12): every request of a
conversation carries the same bytes from the first one on. `with_tool` runs before the projection,
so the tool counts in the budget like the client's own tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import Policy
from ..tool_settings import Recall
from ..types import Json
from .memory import RejectedTool

WIRES = frozenset({"openai_chat", "anthropic", "openai_responses", "gemini"})
DESCRIPTION = (
    "Search this conversation's earlier history, including tool results that were trimmed "
    'and turns that were summarized. `query`: words and "quoted phrases", all must match, '
    "case-insensitive. Results are excerpts with event numbers, oldest first. Give `event` "
    "to read one stored event whole (bounded)."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": 'Words or "quoted phrases" to find.'},
        "event": {"type": "integer", "description": "An event number to read whole."},
    },
    "required": ["query"],
}
_OPEN_CHOICES = (None, "auto", "required", {"type": "auto"}, {"type": "any"})
"""`tool_choice` values that leave the model free to call recall. Not: `none` (OpenAI's string,
Anthropic's `{"type": "none"}`), a forced tool (`{"type": "function", ...}`, Anthropic
`{"type": "tool", ...}`) or an allowed list the recall tool is not on."""


def offered(policy: Policy, wire: str, body: Json, rejected: RejectedTool, route: str, model: str) -> bool:
    """Whether this request gets the recall tool (`offers`)."""
    settings = policy.recall
    return offers(settings.enabled, settings.tool_name, wire, body, rejected, route, model)


def offers(
    enabled: bool | str, name: str, wire: str, body: Json, rejected: RejectedTool, route: str, model: str
) -> bool:
    """Whether a tool of the proxy's own named `name` goes on this request: its policy offers it
    (`enabled`; `auto`: when the client's own request carries tools), the request has room for
    the proxy's tools (`room_for_tools`) and the client declares no tool of that name."""
    if enabled is False or not room_for_tools(wire, body, rejected, route, model):
        return False
    listed = client_tools(body)
    if enabled == "auto" and not listed:
        return False
    return not any(tool_name(tool) == name for tool in listed)


def room_for_tools(wire: str, body: Json, rejected: RejectedTool, route: str, model: str) -> bool:
    """Whether the proxy may add tools of its own to this request: a wire it knows, a
    `tool_choice` that leaves the model free to call them, no assistant prefill to continue, an
    upstream that did not reject them."""
    if wire not in WIRES or (route, model) in rejected:
        return False
    return body.get("tool_choice") in _OPEN_CHOICES and _room_for_a_turn(wire, body)


def client_tools(body: Json) -> list[Any]:
    tools = body.get("tools")
    return tools if isinstance(tools, list) else []


def _room_for_a_turn(wire: str, body: Json) -> bool:
    """An Anthropic request that ends with an assistant turn asks the model to continue that turn
    (a prefill): a detour cannot append a turn after it."""
    messages = body.get("messages")
    if wire != "anthropic" or not isinstance(messages, list) or not messages:
        return True
    last = messages[-1]
    return not (isinstance(last, Mapping) and last.get("role") == "assistant")


def definition(wire: str, settings: Recall) -> dict[str, Any]:
    """The recall tool as `wire` declares tools."""
    return declared(wire, settings.tool_name, DESCRIPTION, PARAMETERS)


def declared(wire: str, name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """A function tool of the proxy's own as `wire` declares tools."""
    if wire == "anthropic":
        return {"name": name, "description": description, "input_schema": parameters}
    if wire == "gemini":  # a Tool of its own, its schema as JSON Schema (as Gemini CLI declares its tools)
        return {
            "functionDeclarations": [{"name": name, "description": description, "parametersJsonSchema": parameters}]
        }
    if wire == "openai_responses":
        # strict: false -- Responses defaults to strict schemas, which forbid optional properties
        return {"type": "function", "name": name, "description": description, "parameters": parameters, "strict": False}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def with_tool(body: Json, wire: str, settings: Recall) -> Json:
    """`body` with the recall tool appended to its tools (a copy; the client's body is untouched)."""
    return {**body, "tools": [*(body.get("tools") or []), definition(wire, settings)]}


def tool_name(tool: Any) -> str | None:
    """A declared tool's name in any wire's shape (chat nests it under `function`)."""
    if not isinstance(tool, Mapping):
        return None
    function = tool.get("function")
    declarations = tool.get("functionDeclarations")
    if isinstance(declarations, list) and len(declarations) == 1:  # Gemini's Tool of one function
        function = declarations[0]
    named = function if isinstance(function, Mapping) else tool
    name = named.get("name")
    return name if isinstance(name, str) else None
