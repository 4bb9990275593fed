"""The proxy's own tools on one request: recall (`proxy.recall`), then long-term memory
(`proxy.memory`), each when the policy offers it and the request has room for them
(`proxy.recall.tool.room_for_tools`); answered through one detour (`proxy.recall.detour`)."""

from __future__ import annotations

from typing import Any

from .memory import tool as memory_tool
from .memory.access import Recollection
from .policy_settings import Policy
from .protocols.base import Wire
from .recall.answer import recall as recall_tool
from .recall.toolbox import ProxyTool, Toolbox
from .services import Services


def proxy_tools(
    services: Services,
    policy: Policy,
    wire: Wire,
    body: dict[str, Any],
    target: tuple[str, str],
    recall: bool,
    memory: Recollection | None,
) -> Toolbox | None:
    """The proxy's own tools this request carries, in their fixed order (recall, memory), or None."""
    route, model = target
    offered_tools: list[ProxyTool] = [recall_tool(policy.recall)] if recall else []
    if memory is not None and memory_tool.offered(policy, wire, body, services.recalls_rejected, route, model):
        offered_tools.append(memory.tool())
    return Toolbox(tuple(offered_tools), policy.recall.max_rounds) if offered_tools else None
