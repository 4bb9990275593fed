"""The working state of one projection, passed from pipeline step to pipeline step.

Problem: each step (trim, plan compaction, prune) needs the same picture — which group is where,
what each message costs now, what was already done — and must hand a new picture on.

Invariant: a `Draft` is immutable; a step returns a new one (`dataclasses.replace`). Token
totals are kept per message, so a step that rewrites one message re-counts only that one.

Layout of the messages a draft renders::

    prefix (system/developer, unchanged)
    head   (groups covered by the checkpoint but kept: pinned or newest user message)
    summary block (when a checkpoint covers at least one group)
    tail   (uncovered groups, oldest first; the last one is the latest turn)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from policies.base import Budget, Checkpoint, CompactionPlan, Item, Message, PolicyConfig, TrimEntry
from policies.groups import Group, synthetic_result
from policies.text import clone

if TYPE_CHECKING:
    from policies.index import HistoryIndex, ProjectionCache

CountFn = Callable[[Message], int]


@dataclass(frozen=True)
class Slot:
    """One group as it will be sent. `keep`: never dropped (pinned, newest user, last group).
    `protected`: never rewritten (the newest user message's group and the in-flight last group)."""

    index: int
    group: Group
    seqs: tuple[int | None, ...]
    messages: tuple[Message, ...]
    tokens: tuple[int, ...]
    keep: bool
    protected: bool

    @cached_property
    def total(self) -> int:
        return sum(self.tokens)

    def with_message(self, position: int, message: Message, tokens: int) -> Slot:
        messages = list(self.messages)
        counts = list(self.tokens)
        messages[position] = message
        counts[position] = tokens
        return replace(self, messages=tuple(messages), tokens=tuple(counts))


@dataclass(frozen=True)
class StepContext:
    """Everything a step may read besides the draft; built once per projection."""

    items: Sequence[Item]
    groups: Sequence[Group]
    checkpoint: Checkpoint | None
    budget: Budget
    config: PolicyConfig
    count: CountFn
    pinned: frozenset[int]
    latest_user: int | None
    covered_through: int
    index: HistoryIndex | None = None
    """the items' `HistoryIndex` (groups are `index.groups`); None only for hand-built contexts"""
    cache: ProjectionCache | None = None
    """the caller's memo, if any (trimmed results are remembered there)"""

    @property
    def trigger_tokens(self) -> int:
        return int(self.config.trigger * self.budget.input_budget)


@dataclass(frozen=True)
class Draft:
    prefix: tuple[Message, ...]
    prefix_tokens: int
    fixed_tokens: int
    head: tuple[Slot, ...]
    summary: tuple[Message, ...]
    summary_tokens: int
    tail: tuple[Slot, ...]
    trimmed: tuple[TrimEntry, ...] = ()
    pruned_seqs: tuple[int, ...] = ()
    over_trigger: bool = False
    plan: CompactionPlan | None = None

    @cached_property
    def slots(self) -> tuple[Slot, ...]:
        return self.head + self.tail

    @cached_property
    def total(self) -> int:
        """Projected input tokens: fixed + prefix + every message sent."""
        return self.fixed_tokens + self.prefix_tokens + self.summary_tokens + sum(slot.total for slot in self.slots)

    def messages(self) -> list[dict[str, Any]]:
        """The messages to send, in order. Read-only: untouched messages are the caller's own
        objects (prefix and item messages), rewritten ones may be shared with later projections
        through a `ProjectionCache`; serialize them, never mutate them. A message that is a
        Mapping but not a dict is copied into a dict."""
        out: list[Any] = list(self.prefix)
        for slot in self.head:
            out.extend(slot.messages)
        out.extend(self.summary)
        for slot in self.tail:
            out.extend(slot.messages)
        if set(map(type, out)) - {dict}:
            out = [message if type(message) is dict else clone(message) for message in out]
        return out

    def sent_seqs(self) -> tuple[int, ...]:
        """Seqs of the items sent, ascending (head groups precede the summary, tail groups follow,
        all in history order)."""
        return tuple(seq for slot in self.slots for seq in slot.seqs if seq is not None)


def render_slot(index: int, group: Group, is_last: bool, keep: bool, protected: bool, count: CountFn) -> Slot:
    """`groups.render_group` as a slot (untouched items keep their own token counts)."""
    if group.missing_ids and not is_last:
        repairs = tuple(synthetic_result(tool_call_id) for tool_call_id in group.missing_ids)
        return Slot(
            index=index,
            group=group,
            seqs=group.seqs + (None,) * len(repairs),
            messages=group.messages + repairs,
            tokens=group.item_tokens + tuple(count(message) for message in repairs),
            keep=keep,
            protected=protected,
        )
    return Slot(index, group, group.seqs, group.messages, group.item_tokens, keep, protected)


def cached_slot(
    cache: ProjectionCache, index: int, group: Group, is_last: bool, keep: bool, protected: bool, count: CountFn
) -> Slot:
    """`render_slot`, the same object as last time for the same group and flags."""
    key = ("slot", id(group))
    flags = (index, is_last, keep, protected)
    memo = cache.get(key)
    if memo is not None and memo[0] is group and memo[1] == flags and memo[2] is count:
        slot: Slot = memo[3]
        return slot
    slot = render_slot(index, group, is_last, keep, protected, count)
    cache.put(key, (group, flags, count, slot))
    return slot
