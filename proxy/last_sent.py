"""What each branch last sent upstream and had answered, for `summarizer.mode: shared`.

A shared summary (`proxy.shared_summary`) repeats the branch's last answered request exactly as it
went upstream, so the provider reads it from its prompt cache. `SharedPrompts` keeps that request
per branch, in memory, for policies in that mode only, and only for the newest `capacity`
branches: references to what the request already held, never written anywhere (a restart or
another replica has none, and the compaction falls back to the own summarizer).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .types import Message

CAPACITY = 512
"""Branches whose last answered request is kept (the newest; a compaction of an older one falls back)."""


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


class SharedPrompts:
    """The newest `capacity` branches' last answered requests."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._prompts: OrderedDict[str, SharedPrompt] = OrderedDict()

    def remember(self, branch_id: str, prompt: SharedPrompt) -> None:
        self._prompts[branch_id] = prompt
        self._prompts.move_to_end(branch_id)
        while len(self._prompts) > self.capacity:
            self._prompts.popitem(last=False)

    def get(self, branch_id: str) -> SharedPrompt | None:
        return self._prompts.get(branch_id)
