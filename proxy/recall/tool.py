"""Whether a request gets the recall tool, and the tool in each wire's own format.

The definition is a function of the policy and the wire alone (invariant 12): every request of a
conversation carries the same bytes from the first one on. `with_tool` runs before the projection,
so the tool counts in the budget like the client's own tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import Policy, Recall
from ..types import Json
from .memory import RejectedTool

WIRES = frozenset({"openai_chat", "anthropic", "openai_responses"})
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
    """Whether this request gets the recall tool: the policy offers it (`auto`: the client's own
    request carries tools), the client's `tool_choice` leaves the model free to call it, the
    upstream did not reject it."""
    settings = policy.recall
    if settings.enabled is False or wire not in WIRES or (route, model) in rejected:
        return False
    if body.get("tool_choice") not in _OPEN_CHOICES:
        return False
    tools = body.get("tools")
    listed = tools if isinstance(tools, list) else []
    if settings.enabled == "auto" and not listed:
        return False
    return _room_for_a_turn(wire, body) and not any(tool_name(tool) == settings.tool_name for tool in listed)


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
    if wire == "anthropic":
        return {"name": settings.tool_name, "description": DESCRIPTION, "input_schema": PARAMETERS}
    if wire == "openai_responses":
        # strict: false -- Responses defaults to strict schemas, which forbid the optional `event`
        return {
            "type": "function",
            "name": settings.tool_name,
            "description": DESCRIPTION,
            "parameters": PARAMETERS,
            "strict": False,
        }
    return {
        "type": "function",
        "function": {"name": settings.tool_name, "description": DESCRIPTION, "parameters": PARAMETERS},
    }


def with_tool(body: Json, wire: str, settings: Recall) -> Json:
    """`body` with the recall tool appended to its tools (a copy; the client's body is untouched)."""
    return {**body, "tools": [*(body.get("tools") or []), definition(wire, settings)]}


def without_tool(body: Json, settings: Recall) -> Json:
    """`body` without the recall tool; with no tool left, without the fields that need tools."""
    tools = [tool for tool in body.get("tools") or [] if tool_name(tool) != settings.tool_name]
    out = {key: value for key, value in body.items() if key not in ("tools", "tool_choice", "parallel_tool_calls")}
    if tools:
        out["tools"] = tools
        for key in ("tool_choice", "parallel_tool_calls"):
            if key in body:
                out[key] = body[key]
    return out


def tool_name(tool: Any) -> str | None:
    """A declared tool's name in any wire's shape (chat nests it under `function`)."""
    if not isinstance(tool, Mapping):
        return None
    function = tool.get("function")
    named = function if isinstance(function, Mapping) else tool
    name = named.get("name")
    return name if isinstance(name, str) else None
