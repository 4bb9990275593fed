"""One request's long-term memory: its scopes, the block injected into its projection, its tool.

`recollect` decides, once per request, whether memory applies (the policy's `memory.enabled`, a
rewriting request, at least one scope) and builds a `Recollection`. The projection asks it for
the block (`block`, `proxy.outgoing`): the memories listed at the branch's instant -- when the
branch was created, or when its active checkpoint was committed, whichever is later -- so the
block is byte-identical on every request between two checkpoints, whatever is saved meanwhile;
a memory forgotten or deleted leaves it at once (an operator's or the user's decision overrides
the cache). The tool (`tool`) answers the model's calls through the detour (`proxy.recall`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import StoreError
from ..policy_settings import Policy
from ..recall.toolbox import Count, ProxyTool, arguments_of
from ..store.base import Store, StoredCheckpoint, StoredEvent
from ..store.memories import Memory
from ..types import Message
from . import actions, render
from .scopes import Scopes, scopes_of
from .tool import definition

MIN_RESULT_TOKENS = 64
NO_ROOM = "Error: the context window has no room left for memory results in this answer."


@dataclass
class Recollection:
    actor: actions.Actor
    memories: list[Memory] | None = None
    since: float | None = None
    """when the request's branch was created (read once)"""
    injected: list[str] = field(default_factory=list)
    """ids of the memories in the block last rendered (for the call record)"""

    async def block(self, checkpoint: StoredCheckpoint | None, count: Count) -> Message | None:
        """The user-role block after the prefix, or None (nothing listed, injection off)."""
        settings = self.actor.settings
        if settings.inject_tokens <= 0:
            return None
        if self.memories is None:
            self.memories = await self.actor.store.scope_memories(self.actor.tenant, self.actor.scopes.names)
        if not self.memories:
            return None
        instant = max(await self._since(), checkpoint.created_at if checkpoint is not None else 0.0)
        text = render.block(
            self.memories,
            instant,
            self.actor.scopes.names,
            settings.tool_name,
            settings.inject_tokens,
            count,
            settings.unconfirmed == "heading",
        )
        self.injected = [m.id for m in self.memories if m.id in (text or "")]
        return {"role": "user", "content": text} if text else None

    async def _since(self) -> float:
        """When the request's branch was created; now for a request that continues no stored
        branch (a count for a conversation a call would start)."""
        if self.since is None:
            actor = self.actor
            branches = await actor.store.list_branches(actor.conversation_id) if actor.conversation_id else []
            mine = next((b for b in branches if b.id == actor.branch_id), None)
            self.since = mine.created_at if mine is not None else actor.clock()
        return self.since

    def tool(self) -> ProxyTool:
        settings = self.actor.settings
        return ProxyTool(settings.tool_name, lambda wire: definition(wire, settings), self.answer)

    async def answer(
        self, call: Mapping[str, Any], events: Sequence[StoredEvent], count: Count, limit: int | None
    ) -> str:
        """The tool result for one call, within `limit` tokens (at most `max_result_tokens`)."""
        maximum = self.actor.settings.max_result_tokens
        limit = maximum if limit is None else min(limit, maximum)
        if limit < MIN_RESULT_TOKENS:
            return NO_ROOM
        arguments = arguments_of(call)
        if arguments is None:
            return "Error: the arguments must be a JSON object with a string `action`."
        try:
            return await actions.act(self.actor, arguments, events, count, limit)
        except StoreError as exc:
            return f"Error: the memory store is unavailable now ({exc}); go on without it."


def recollect(
    policy: Policy,
    store: Store,
    tenant: str,
    client: str | None,
    headers: Mapping[str, str],
    where: tuple[str | None, str | None],
    prefix: Sequence[Message],
    history: Sequence[Message],
) -> Recollection | None:
    """The request's memory, None when it has none (off, or no scope: see `scopes_of`)."""
    settings = policy.memory
    if settings.enabled is False:
        return None
    scopes: Scopes = scopes_of(settings, client, headers, prefix, history)
    if not scopes:
        return None
    conversation_id, branch_id = where
    return Recollection(actions.Actor(store, settings, tenant, scopes, conversation_id, branch_id, tuple(prefix)))
