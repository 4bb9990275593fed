"""The proxy's own tools on one request: which are offered, how each is declared, who answers.

Recall (`proxy.recall`) and long-term memory (`proxy.memory`) are tools the proxy offers the
model and answers itself, through one detour (`detour`, `read`, `watch`):
an answer that calls any of them is consumed, each call answered, and the request sent again.
A `Toolbox` is the set a request carries, in a fixed order (recall, then memory), so their
definitions are byte-identical on every request of a conversation; a `ProxyTool` is one of them:
its name, its definition in each wire's format, and the coroutine that answers a call.

Example: a request offered both -> `Toolbox((recall, memory), max_rounds=3)`; an answer calling
`ctxproxy_memory` is answered by the memory tool, one calling both by each in call order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.text import call_arguments, call_name, tool_calls

from .. import codec
from ..protocols.base import Wire
from ..store.base import StoredEvent
from ..types import Json, Message

Count = Callable[[str], int]
Answer = Callable[[Mapping[str, Any], Sequence[StoredEvent], Count, int | None], Awaitable[str]]
"""(the call, the branch's stored events, the route's token counter, the tokens the result may
take, None: its own maximum) -> the tool result's text"""


@dataclass(frozen=True)
class ProxyTool:
    name: str
    definition: Callable[[Wire], dict[str, Any]]
    """the tool as a wire declares tools; a function of the policy and the wire alone"""
    answer: Answer


@dataclass(frozen=True)
class Toolbox:
    tools: tuple[ProxyTool, ...]
    max_rounds: int

    @property
    def names(self) -> frozenset[str]:
        return frozenset(tool.name for tool in self.tools)

    def calls(self, message: Message | None) -> list[Mapping[str, Any]]:
        """The answer's calls of these tools, in call order (client calls beside them dropped)."""
        if message is None:
            return []
        names = self.names
        return [call for call in tool_calls(message) if call_name(call) in names]

    async def answer(
        self, call: Mapping[str, Any], events: Sequence[StoredEvent], count: Count, limit: int | None
    ) -> str:
        name = call_name(call)
        tool = next(t for t in self.tools if t.name == name)
        return await tool.answer(call, events, count, limit)

    def with_tools(self, body: Json, wire: Wire) -> Json:
        """`body` with the tools appended to its tools (a copy; the client's body is untouched)."""
        return wire.with_tools(body, [tool.definition(wire) for tool in self.tools])

    def without_tools(self, body: Json, wire: Wire) -> Json:
        """`body` without these tools; with no tool left, without the fields that need tools."""
        return wire.without_tools(body, self.names)


def arguments_of(call: Mapping[str, Any]) -> dict[str, Any] | None:
    """A tool call's arguments as a JSON object (None: not valid JSON, or not an object)."""
    try:
        arguments = codec.loads(call_arguments(call) or "{}")
    except ValueError:
        return None
    return arguments if isinstance(arguments, dict) else None
