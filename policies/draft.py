"""The working state of one projection, passed from pipeline step to pipeline step.

Problem: each step (trim, plan compaction, prune) needs the same picture — which group is where,
what each message costs now, what was already done — and must hand a new picture on.

Invariant: a `Draft` is immutable; a step returns a new one (`dataclasses.replace`). Token
totals are kept per message, so a step that rewrites one message re-counts only that one.

`build_draft` makes the first draft of a call (groups, pins and the checkpoint applied); how a
group, the summary block or a trimmed result is rendered goes through a `Renderer`, which
computes each from scratch. A caller may pass a subclass that remembers renderings between
calls; it must return what the base class would (the pipeline cannot tell the difference).

Layout of the messages a draft renders::

    prefix (system/developer, unchanged)
    head   (groups covered by the checkpoint but kept: pinned or newest user message)
    summary block (when a checkpoint covers at least one group; after the pins, so a correction
                   of a pinned value is read after the stale value it replaces)
    pruned marker (when `prune_groups` dropped groups: which events, and how to fetch them)
    tail   (uncovered groups, oldest first; the last one is the latest turn)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from policies.base import Budget, Checkpoint, Item, Message
from policies.config import PolicyConfig
from policies.groups import Group, effective_boundary, last_index, synthetic_result
from policies.history_index import HistoryIndex, index_items
from policies.outcome import CompactionPlan, TrimEntry
from policies.pins import provider_state, release_pins
from policies.summary_prompt import checkpoint_block
from policies.text import clone

CountFn = Callable[[Message], int]


@dataclass(frozen=True, slots=True)
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
    total: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(self.tokens))

    def with_message(self, position: int, message: Message, tokens: int) -> Slot:
        messages = list(self.messages)
        counts = list(self.tokens)
        messages[position] = message
        counts[position] = tokens
        return replace(self, messages=tuple(messages), tokens=tuple(counts))


@dataclass(frozen=True)
class Inputs:
    """What one projection is made from: the system/developer prefix, the branch's items, the
    active checkpoint, the budget, the policy, how messages are counted, and the recall tool the
    request offers (None: not offered)."""

    prefix: Sequence[Message]
    items: Sequence[Item]
    checkpoint: Checkpoint | None
    budget: Budget
    config: PolicyConfig
    count: CountFn
    recall_tool: str | None = None


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
    renderer: Renderer | None = None
    """how groups, summaries and trimmed results are rendered (None: `PLAIN`)"""
    released: tuple[int, ...] = ()
    """rule pins released because pins took more than half the input budget (`pins.release_pins`)"""
    recall_tool: str | None = None
    """the name of the recall tool this request offers the model (None: not offered); trim
    markers and the summary block say it can fetch what they stand for"""
    deferred: Checkpoint | None = None
    """a checkpoint not applied yet: the whole history still goes as sent (`late_trim`); it
    waits for the request that no longer fits, and no other compaction is planned meanwhile"""

    @property
    def trigger_tokens(self) -> int:
        return int(self.config.trigger * self.budget.input_budget)

    @property
    def pass_through_tokens(self) -> int:
        """Up to this, a request with no checkpoint goes as sent (`PolicyConfig.late_trim`)."""
        return pass_through_tokens(self.config, self.budget)


def pass_through_tokens(config: PolicyConfig, budget: Budget) -> int:
    """Up to this, a request with no checkpoint applied goes as sent (`PolicyConfig.late_trim`)."""
    return max(int(config.trigger * budget.input_budget), int(config.late_trim * budget.input_budget))


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
    cut_to_fit: tuple[int, ...] = ()
    """seqs of the newest turn's tool results cut so the request fits (`prune_groups`)"""
    old_groups: int = 0
    """groups trimmed as old: index below `trim_tool_results`' boundary (0: none)"""
    previous_old_groups: int = 0
    """the boundary one quantum back: where it stood before its last move (0: none)"""
    rewritten: bool = False
    """a step changed what is sent in a way the record does not list otherwise (a registered
    step that rewrites sets it; the record adds trims, prunes, the checkpoint and repairs)"""
    marker: tuple[Message, ...] = ()
    """the message that stands where `prune_groups` dropped groups (empty: none dropped)"""
    marker_tokens: int = 0
    marker_at: int = 0
    """the tail slot the marker is sent before: the first one after the first dropped group"""

    @cached_property
    def slots(self) -> tuple[Slot, ...]:
        return self.head + self.tail

    @cached_property
    def total(self) -> int:
        """Projected input tokens: fixed + prefix + every message sent."""
        fixed = self.fixed_tokens + self.prefix_tokens + self.summary_tokens + self.marker_tokens
        return fixed + sum(slot.total for slot in self.slots)

    def messages(self) -> list[dict[str, Any]]:
        """The messages to send, in order. Read-only: untouched messages are the caller's own
        objects (prefix and item messages), rewritten ones may be shared with later projections
        through a memoizing `Renderer`; serialize them, never mutate them. A message that is a
        Mapping but not a dict is copied into a dict."""
        out: list[Any] = list(self.prefix)
        for slot in self.head:
            out.extend(slot.messages)
        out.extend(self.summary)
        for index, slot in enumerate(self.tail):
            if index == self.marker_at:
                out.extend(self.marker)
            out.extend(slot.messages)
        if set(map(type, out)) - {dict}:
            out = [message if type(message) is dict else clone(message) for message in out]
        return out

    def cache_point(self) -> int | None:
        """`Projection.cache_point`: the position in `messages()` of the last tool result of a
        tail slot trimmed as old."""
        return self._last_result_below(self.old_groups)

    def previous_point(self) -> int | None:
        """`Projection.previous_point`: the cache point before the boundary's last move."""
        return self._last_result_below(self.previous_old_groups)

    def _last_result_below(self, groups: int) -> int | None:
        position = len(self.prefix) + sum(len(slot.messages) for slot in self.head) + len(self.summary)
        point = None
        for index, slot in enumerate(self.tail):
            if index == self.marker_at:
                position += len(self.marker)
            if slot.index >= groups:
                break
            for k, message in enumerate(slot.messages):
                if message.get("role") == "tool":
                    point = position + k
            position += len(slot.messages)
        return point

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


ShapeOne = Callable[[Message, Any, CountFn], tuple[tuple[dict[str, object], TrimEntry] | None, int]]
"""(tool message, its `trim_result.Shaping`, count) -> (trimmed message and its entry or None,
tokens of the trimmed message): one tool result's trimmed form, see `trim_tool_results.shape_one`"""

ShapeSlot = Callable[[Slot, bool, Sequence[Group], StepContext, ShapeOne | None], tuple[Slot, list[TrimEntry]]]
"""(slot, old, the later groups it may read, ctx, shape_one) -> the slot with its tool results
trimmed and their entries, see `trim_tool_results.shape_slot`"""


class Renderer:
    """Renders groups, summary blocks and trimmed tool results, each from scratch.

    The pipeline calls these and nothing else to render; a subclass may remember results
    between calls as long as it returns what these would (same values; the projection is
    byte-identical with or without it). Stateless: one shared instance, `PLAIN`, serves all."""

    def slot(self, index: int, group: Group, is_last: bool, keep: bool, protected: bool, count: CountFn) -> Slot:
        return render_slot(index, group, is_last, keep, protected, count)

    def summary(
        self,
        text: str,
        covered: int,
        count: CountFn,
        recall_tool: str | None = None,
        native: tuple[Message, ...] = (),
    ) -> tuple[tuple[Message, ...], int]:
        """The messages standing for a checkpoint covering through `covered` -- the provider's
        own compaction (`native`) and the summary block (none for an empty text after a native
        compaction) -- and their tokens."""
        block = checkpoint_block(text, covered, recall_tool, native)
        return block, sum(count(message) for message in block)

    def trimmed_slot(
        self, slot: Slot, old: bool, later: Sequence[Group], ctx: StepContext, shape: ShapeSlot
    ) -> tuple[Slot, Sequence[TrimEntry]]:
        """`slot` with its tool results trimmed, as old or recent, reading `later` (`shape` is
        how: the caller's rule)."""
        return shape(slot, old, later, ctx, None)


PLAIN = Renderer()


@dataclass(frozen=True)
class Layout:
    """Where a draft's groups stand before any step runs: the context the steps share, the newest
    group, the group of the newest user message, the groups kept whatever the steps do (pinned,
    newest user message, newest group) and the first group the checkpoint does not cover."""

    ctx: StepContext
    last: int
    latest_group: int
    keep: frozenset[int]
    first_uncovered: int


def layout(inputs: Inputs, index: HistoryIndex, renderer: Renderer, prefix_tokens: int = 0) -> Layout:
    """The setup `build_draft` and the memo's incremental path share. With `late_trim` above the
    trigger, a checkpoint is deferred (`StepContext.deferred`) while the whole history, as sent,
    is within `pass_through_tokens` (a branch that forked from a compacted one): the checkpoint is
    used once the request first stops fitting."""
    checkpoint, budget, config = inputs.checkpoint, inputs.budget, inputs.config
    deferred = None
    as_sent = budget.fixed_tokens + prefix_tokens + index.total_tokens
    if checkpoint is not None and config.late_trim > config.trigger and as_sent <= pass_through_tokens(config, budget):
        deferred, checkpoint = checkpoint, None
    groups = index.groups
    latest_user = index.last_user
    first = index.first_user if config.pins.first_user else None
    ruled = index.pinned(config.pins)
    always = frozenset(seq for seq in (first, latest_user) if seq is not None) | provider_state(ruled, index.message_of)
    pinned, released = release_pins(ruled, always, index.tokens_of_one, budget.sizing // 2)
    covered = effective_boundary(groups, checkpoint)
    ctx = StepContext(
        items=inputs.items,
        groups=groups,
        checkpoint=checkpoint,
        budget=budget,
        config=config,
        count=inputs.count,
        pinned=pinned,
        latest_user=latest_user,
        covered_through=covered,
        index=index,
        renderer=renderer,
        released=released,
        recall_tool=inputs.recall_tool,
        deferred=deferred,
    )
    last = last_index(groups)
    latest_group = index.group_of(latest_user) if latest_user is not None else -1
    keep = frozenset({index.group_of(seq) for seq in pinned} | {latest_group, last})
    return Layout(ctx, last, latest_group, keep, index.first_uncovered(covered))


def build_draft(
    inputs: Inputs, *, index: HistoryIndex | None = None, renderer: Renderer | None = None
) -> tuple[Draft, StepContext]:
    """Groups, pins and the checkpoint applied; no step run yet.

    Work is proportional to what is sent (plus one index pass over the items, or over what
    `index` — this call's index of `items`, when the caller has it — did not resume): covered
    groups are skipped by bisection, only the kept ones (pinned, newest user message) are
    looked up."""
    prefix, count, recall_tool = inputs.prefix, inputs.count, inputs.recall_tool
    if index is None:
        index = index_items(inputs.items)
    renderer = renderer if renderer is not None else PLAIN
    prefix_tokens = sum(count(message) for message in prefix)
    shape = layout(inputs, index, renderer, prefix_tokens)
    ctx, groups, covered = shape.ctx, index.groups, shape.ctx.covered_through
    checkpoint = ctx.checkpoint
    last, latest_group, keep_groups, first_uncovered = shape.last, shape.latest_group, shape.keep, shape.first_uncovered
    head = [
        render_slot(i, groups[i], i == last, True, i == last or i == latest_group, count)
        for i in sorted(keep_groups)
        if 0 <= i < first_uncovered and groups[i].kind != "orphan"
    ]
    slot = renderer.slot
    tail = [
        slot(i, group, i == last, i in keep_groups, i == last or i == latest_group, count)
        for i, group in enumerate(groups[first_uncovered:], first_uncovered)
        if group.kind != "orphan"
    ]
    summary: tuple[Message, ...] = ()
    summary_tokens = 0
    if checkpoint is not None and covered > 0:
        summary, summary_tokens = renderer.summary(checkpoint.summary, covered, count, recall_tool, checkpoint.native)
    draft = Draft(
        prefix=tuple(prefix),
        prefix_tokens=prefix_tokens,
        fixed_tokens=inputs.budget.fixed_tokens,
        head=tuple(head),
        summary=summary,
        summary_tokens=summary_tokens,
        tail=tuple(tail),
    )
    return draft, ctx
