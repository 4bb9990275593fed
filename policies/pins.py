"""Which messages are pinned: kept verbatim in every projection, never only in a summary.

Problem: summaries are lossy; the objective and the user's constraints must not be (seed 004:
lossy compression touches process, never constraints).

Rules (PinsConfig):
- `first_user` (default on): the first user message of the branch — usually the objective;
- `roles`: every message of these roles (an operator decision, so any role is allowed);
- `patterns`: regexes searched in the text of user/system/developer messages only, so tool
  output cannot pin itself into every future request;
- always: a system or developer message inside the history (Anthropic's and OpenAI's
  mid-conversation system messages, Claude Code's environment turn). It is an instruction like the
  prefix (invariant 2): never summarized into data, never dropped.
- always, and never released: a message carrying the provider's own compaction of the history
  (`PROVIDER_STATE`, set by the wire: a Responses `compaction` item, an Anthropic `compaction`
  block). It is the client's checkpoint: opaque, to be sent back verbatim, and what it replaced
  is gone upstream, so ctxproxy never trims, summarizes or prunes it.

Invariant: pinning is per message, keeping is per group — the projection keeps the whole group
of a pinned message (a pinned tool result without its call would break the protocol), but only
the pinned message itself is guaranteed verbatim. Separately, the projection always keeps the
newest user message (`latest_user_seq`) even when a checkpoint covers it.

Budget rule (`release_pins`): pins must not crowd out the conversation. When the rule pins beyond
the first user message (and the newest user message, kept anyway) take more than half the input
budget together, they are kept newest first while they fit in that half; the older rest is
released: summarized, trimmed and pruned like other history, and listed in
`ProjectionRecord.released_pins`. The cut is one seq, so it moves only when a new pin arrives.

Example: PinsConfig(patterns=(r"(?i)\\bmust not\\b",)) pins "You must not touch prod" wherever
the user said it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from policies.base import Item, Message
from policies.config import PinsConfig
from policies.text import message_text

PROVIDER_STATE = "_provider_state"
"""Common-message key a wire sets (True) on a message carrying the provider's compaction."""
PATTERN_ROLES = ("user", "system", "developer")
INSTRUCTION_ROLES = ("system", "developer")
"""Roles pinned wherever they appear in the history, whatever the config says."""


def pinned_roles(config: PinsConfig) -> tuple[str, ...]:
    """The roles whose every message is pinned: the configured ones plus the instruction roles."""
    return tuple(sorted(set(config.roles) | set(INSTRUCTION_ROLES)))


def pinned_seqs(items: Sequence[Item], config: PinsConfig) -> frozenset[int]:
    """Seqs of the pinned items."""
    pinned: set[int] = set()
    if config.first_user:
        first = next((item.seq for item in items if item.message.get("role") == "user"), None)
        if first is not None:
            pinned.add(first)
    roles = set(pinned_roles(config))
    compiled = [re.compile(pattern) for pattern in config.patterns]
    for item in items:
        if matches_rules(item.message, roles, compiled):
            pinned.add(item.seq)
    return frozenset(pinned)


def release_pins(
    pinned: frozenset[int], always: frozenset[int], tokens: Callable[[int], int], limit: int
) -> tuple[frozenset[int], tuple[int, ...]]:
    """(pins kept, seqs released): the pins beyond `always` (the first user message, the newest
    user message) kept newest first while together they take at most `limit` tokens (half the
    input budget); from the first that does not fit on, every older one is released."""
    rule = sorted(pinned - always, reverse=True)
    costs = [tokens(seq) for seq in rule]
    if sum(costs) <= limit:
        return pinned, ()
    used = 0
    for position, cost in enumerate(costs):
        if used + cost > limit:
            released = rule[position:]
            return pinned.difference(released), tuple(sorted(released))
        used += cost
    return pinned, ()  # unreachable: the sum exceeded the limit


def matches_rules(message: Message, roles: set[str], compiled: Sequence[re.Pattern[str]]) -> bool:
    """Whether `message` is pinned by a role or pattern rule, or carries the provider's compaction
    (`first_user` aside)."""
    role = message.get("role")
    if role in roles or message.get(PROVIDER_STATE):
        return True
    if compiled and role in PATTERN_ROLES:
        text = message_text(message)
        return any(pattern.search(text) for pattern in compiled)
    return False


def provider_state(pinned: frozenset[int], message_of: Callable[[int], Message | None]) -> frozenset[int]:
    """The pinned seqs that carry the provider's compaction (never released)."""
    found = set()
    for seq in pinned:
        message = message_of(seq)
        if message is not None and message.get(PROVIDER_STATE):
            found.add(seq)
    return frozenset(found)


def latest_user_seq(items: Sequence[Item]) -> int | None:
    """Seq of the newest user message (invariant 3 keeps it verbatim in every projection)."""
    for item in reversed(items):
        if item.message.get("role") == "user":
            return item.seq
    return None


def pinned_items(items: Sequence[Item], config: PinsConfig) -> list[Item]:
    """The pinned user/system/developer items, oldest first: what the summarizer may quote as
    constraints (constraints come only from user and system text) and sees with event ids."""
    seqs = pinned_seqs(items, config)
    return [item for item in items if item.seq in seqs and item.message.get("role") in PATTERN_ROLES]


def pinned_texts(items: Sequence[Item], config: PinsConfig) -> list[str]:
    """Texts of `pinned_items`, oldest first."""
    return [message_text(item.message) for item in pinned_items(items, config)]
