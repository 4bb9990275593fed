"""What each branch last sent upstream and had answered, for `summarizer.mode: shared` (and `auto`,
the default, where it resolves to it).

A shared summary (`proxy.shared_summary`) repeats the branch's last answered request exactly as it
went upstream, so the provider reads it from its prompt cache. `SharedPrompts` keeps that request
per branch, in memory: references to what the request already held, never written anywhere (a
restart or another replica has none, and the compaction falls back to the own summarizer).

Only a request that may be the one a compaction asks is kept: one whose projection reached
`NEAR` of its compaction trigger, or whose history did before the branch's first checkpoint (a
compaction starts beside the request that goes over it, with the one answered before). A branch
further from its trigger keeps nothing, and its older request is dropped (it is no longer the
last one). What is kept is bounded by the memory it holds
(`caches.shared_prompts_mb`), estimated as `PER_BYTE` times the bytes the request went upstream
with; the least recently answered branches go first. So 1,024 conversations in use hold nothing
while they are far from their windows, and at most the bound when all of them near it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .types import Message

CAPACITY_MB = 64.0
"""Memory the kept requests may hold (`caches.shared_prompts_mb`): about 300 of 80 kB bodies."""
PER_BYTE = 3
"""Memory a kept request holds per byte it went upstream with: its parsed body and messages
(measured 2.7 with 1,024 conversations of 500 messages in use: `python -m bench --only active`)."""
NEAR = 0.75
"""The share of the compaction trigger (`trigger_tokens`) a request's projection must reach to be kept."""


@dataclass(frozen=True)
class SharedPrompt:
    """A branch's last answered request, as it went upstream."""

    wire: str
    body: dict[str, Any]
    """the body it was encoded from (tools and settings as sent)"""
    messages: list[Message]
    """its messages as sent (the projection, or the client's own)"""
    headers: dict[str, str]
    """the upstream headers it carried (the key, the API version, the client's betas)"""
    input_tokens: int
    """what the upstream billed as its input"""
    last_seq: int
    """the newest event it holds"""
    size: int = 0
    """the bytes it went upstream with"""


def near_trigger(projection: Mapping[str, Any]) -> bool:
    """Whether a request may be the last answered before a compaction (`NEAR`), by its projection's
    record: what it sent reached `NEAR` of the trigger, or, before the branch's first checkpoint,
    what the client sent did (the first rewrite compacts whatever the trim left: `first_rewrite`)."""
    trigger = projection.get("trigger_tokens")
    if not isinstance(trigger, int) or trigger <= 0:
        return False
    first = projection.get("checkpoint_generation") is None
    sizes = (projection.get("sent_tokens"), projection.get("client_tokens") if first else None)
    return any(isinstance(size, int) and size >= NEAR * trigger for size in sizes)


class SharedPrompts:
    """The last answered requests of the branches near a compaction, within `max_mb`."""

    def __init__(self, max_mb: float = CAPACITY_MB) -> None:
        self.max_bytes = int(max_mb * 2**20)
        self.held = 0
        """the memory the kept requests hold, by `PER_BYTE`"""
        self._prompts: OrderedDict[str, SharedPrompt] = OrderedDict()

    def remember(self, branch_id: str, prompt: SharedPrompt) -> None:
        self.forget(branch_id)
        cost = prompt.size * PER_BYTE
        if cost > self.max_bytes:
            return
        self._prompts[branch_id] = prompt
        self.held += cost
        while self.held > self.max_bytes:
            _, victim = self._prompts.popitem(last=False)
            self.held -= victim.size * PER_BYTE

    def forget(self, branch_id: str) -> None:
        """The branch's request is no longer its last answered one."""
        old = self._prompts.pop(branch_id, None)
        if old is not None:
            self.held -= old.size * PER_BYTE

    def get(self, branch_id: str) -> SharedPrompt | None:
        return self._prompts.get(branch_id)

    def __len__(self) -> int:
        return len(self._prompts)

    def sizes(self) -> dict[str, int]:
        """Entries held now (`ctxproxy_cache_entries`)."""
        return {"shared_prompts": len(self._prompts)}

    def lookups(self) -> dict[tuple[str, ...], float]:
        """None counted: a miss is a `shared_fallback` (`ctxproxy_compactions_total`)."""
        return {}
