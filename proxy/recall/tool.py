"""Whether a request gets the recall tool, and the tool in each wire's own format.

The definition is a function of the policy and the wire alone (invariant 12): every request of a
conversation carries the same bytes from the first one on. `with_tool` runs before the projection,
so the tool counts in the budget like the client's own tools.
"""

from __future__ import annotations

from typing import Any

from ..policy_settings import Policy
from ..protocols.base import Wire
from ..tool_settings import Recall
from ..types import Json
from .memory import RejectedTool

DESCRIPTION = (
    "Search this conversation's earlier history, including tool results that were trimmed "
    'and turns that were summarized. `query`: words and "quoted phrases", all must match, '
    "case-insensitive. Results are excerpts with event numbers, oldest first. Give `event` "
    "to read one stored event whole (bounded: a longer one comes back cut, its marker naming "
    "the `offset` that reads on)."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": 'Words or "quoted phrases" to find.'},
        "event": {"type": "integer", "description": "An event number to read whole."},
        "offset": {"type": "integer", "description": "With `event`: the character to read on from."},
    },
    "required": ["query"],
}


def offered(policy: Policy, wire: Wire, body: Json, rejected: RejectedTool, route: str, model: str) -> bool:
    """Whether this request gets the recall tool (`offers`)."""
    settings = policy.recall
    return offers(settings.enabled, settings.tool_name, wire, body, rejected, route, model)


def offers(
    enabled: bool | str, name: str, wire: Wire, body: Json, rejected: RejectedTool, route: str, model: str
) -> bool:
    """Whether a tool of the proxy's own named `name` goes on this request: its policy offers it
    (`enabled`; `auto`: when the client's own request carries tools), the request has room for
    the proxy's tools (`room_for_tools`) and the client declares no tool of that name."""
    if enabled is False or not room_for_tools(wire, body, rejected, route, model):
        return False
    listed = wire.declared_tools(body)
    if enabled == "auto" and not listed:
        return False
    return not any(wire.tool_name(tool) == name for tool in listed)


def room_for_tools(wire: Wire, body: Json, rejected: RejectedTool, route: str, model: str) -> bool:
    """Whether the proxy may add tools of its own to this request: the wire says the request
    leaves room for them (`Wire.room_for_tools`: a tool choice that leaves the model free to call
    them, no assistant prefill to continue), and the upstream did not reject them."""
    return (route, model) not in rejected and wire.room_for_tools(body)


def definition(wire: Wire, settings: Recall) -> dict[str, Any]:
    """The recall tool as `wire` declares tools."""
    return wire.tool_definition(settings.tool_name, DESCRIPTION, PARAMETERS)


def with_tool(body: Json, wire: Wire, settings: Recall) -> Json:
    """`body` with the recall tool appended to its tools (a copy; the client's body is untouched)."""
    return wire.with_tools(body, [definition(wire, settings)])
