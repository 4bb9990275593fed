"""The vocabulary of the policy layer: inputs, configuration, outputs and the one error.

Problem: the proxy stores every event of a branch and must decide, per call, what is actually
sent upstream. Policies make that decision as pure functions over these values; the proxy turns
its rows into `Item`s and its route settings into a `PolicyConfig` once, at the edge.

Invariant: every value here is immutable (frozen dataclasses, tuples) and validated on
construction, so a policy can never observe a half-valid config or mutate what it was given.

Example::

    budget = Budget(context_window=16_000, max_output_tokens=2_000, fixed_tokens=300)
    budget.input_budget                  # 14_000: what messages + tools + framing may use
    PolicyConfig(trigger=0.8, target=0.5)  # compact above 11_200 tokens, aim for ~7_000
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import ne
from typing import Any

Message = Mapping[str, Any]
"""An OpenAI chat-completions message dict (role system/developer/user/assistant/tool)."""

DEFAULT_ORDER: tuple[str, ...] = ("trim_tool_results", "summary_tail", "prune_groups")
"""The pipeline `PolicyConfig.order` names by default. The steps are registered in one place,
`policies.projection.STEPS`, which checks the names (`check_order`); `LAST_STEP` must come last."""
LAST_STEP = "prune_groups"
"""The one step that guarantees the budget: every order ends with it."""

KNOWN_ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool", "function")


class SettingError(ValueError):
    """A policy setting out of bounds. The message says what was expected and what was given;
    `field` names the setting (None for a rule between settings), so a config loader can say
    where it is (`policies.default.pins.patterns: ...`). The bounds live only here: the proxy's
    config validates these dataclasses directly."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field


def _as_tuple(obj: object, name: str) -> None:
    """Accept lists from config loaders but store tuples, so configs stay hashable and frozen."""
    value = getattr(obj, name)
    if isinstance(value, list):
        object.__setattr__(obj, name, tuple(value))
    elif not isinstance(value, tuple):
        raise SettingError(name, f"{name} must be a tuple of strings, got {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class Item:
    """One stored event of the current branch. `seq` is 1-based, ascending and unique;
    `tokens` is what `message` costs, precomputed (and cached) by the caller."""

    seq: int
    message: Message
    tokens: int


@dataclass(frozen=True)
class Checkpoint:
    """The active summary of a branch: it stands for every item with seq <= covered_through_seq."""

    generation: int
    covered_through_seq: int
    summary: str
    tokens: int
    native: tuple[Message, ...] = ()
    """The provider's own compaction of the covered events (opaque messages the wire sends back
    verbatim), standing before the summary block; `summary` is then empty or what ctxproxy's own
    summarizer added after it."""


@dataclass(frozen=True)
class Budget:
    """Token limits of one upstream call. `fixed_tokens` = tool definitions + request framing
    (reply priming etc.); messages are counted separately."""

    context_window: int
    max_output_tokens: int
    fixed_tokens: int = 0
    summarizer: Budget | None = None
    """the summarizer model's own limits (its window, its reply reserve, its framing); None: the
    summarizer shares this budget"""
    summary_max_tokens: int | None = None
    """the longest summary a compaction may commit (None: not known); planning keeps room for a
    summary this large, so the projection after the commit lands near `target`"""
    nominal_input: int | None = None
    """the input the model's window holds in its own tokens (window less the reply reserve), when
    `input_budget` is in another unit (an estimate corrected for the upstream's count, which
    moves as it is learned); it sizes what follows the window's size rather than fitting it (how
    many recent groups keep their results whole), so learning never moves a trim boundary back"""

    def __post_init__(self) -> None:
        if self.context_window <= 0:
            raise ValueError(f"context_window must be > 0, got {self.context_window}")
        if not 0 <= self.max_output_tokens < self.context_window:
            raise ValueError(
                f"max_output_tokens must be >= 0 and below context_window "
                f"({self.context_window}), got {self.max_output_tokens}"
            )
        if self.fixed_tokens < 0:
            raise ValueError(f"fixed_tokens must be >= 0, got {self.fixed_tokens}")
        if self.summary_max_tokens is not None and self.summary_max_tokens < 0:
            raise ValueError(f"summary_max_tokens must be >= 0, got {self.summary_max_tokens}")

    @property
    def input_budget(self) -> int:
        """Tokens the request may use: the window minus the output reserved for the reply."""
        return self.context_window - self.max_output_tokens

    @property
    def sizing(self) -> int:
        """What sizes window-dependent settings: `nominal_input`, else `input_budget`."""
        return self.nominal_input or self.input_budget


RULE_ACTIONS = ("keep", "trim", "type-aware")


@dataclass(frozen=True)
class ToolRule:
    """A per-tool rule of `ToolResultsConfig.rules` (`policies.tool_rules`): results of the
    tools whose name matches the glob `tool` are kept whole (`keep`), cut head + tail (`trim`) or
    trimmed repeats first, then by content (`type-aware`, what tools no rule names get);
    `max_chars` caps them once old instead of `old_max_chars`; `keep_last_n` treats only the
    tool's n newest results as recent, older ones as old even among the recent groups."""

    tool: str
    action: str = "type-aware"
    max_chars: int | None = None
    keep_last_n: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool:
            raise SettingError("tool", "tool must be a tool name or a glob such as 'mcp__*'")
        if self.action not in RULE_ACTIONS:
            raise SettingError("action", f"action must be one of {RULE_ACTIONS}, got {self.action!r}")
        if self.max_chars is not None and self.max_chars < 0:
            raise SettingError("max_chars", f"max_chars must be >= 0, got {self.max_chars}")
        if self.keep_last_n is not None and self.keep_last_n < 1:
            raise SettingError("keep_last_n", f"keep_last_n must be >= 1, got {self.keep_last_n}")
        if self.action == "keep" and (self.max_chars is not None or self.keep_last_n is not None):
            raise SettingError(
                "action", "a kept tool's results are never trimmed: max_chars and keep_last_n do not apply"
            )


@dataclass(frozen=True)
class ToolResultsConfig:
    """Settings of `trim_tool_results` (see that module for the batching rule); `rules`: per-tool
    rules, the first whose glob matches a tool's name applies (`exclude_tools` are `keep` rules
    ahead of them)."""

    keep_recent_groups: int = 4
    recent_max_chars: int = 8000
    old_max_chars: int = 400
    head_ratio: float = 0.5
    exclude_tools: tuple[str, ...] = ()
    clear_at_least: int = 4
    rules: tuple[ToolRule, ...] = ()

    def __post_init__(self) -> None:
        _as_tuple(self, "exclude_tools")
        if isinstance(self.rules, list):
            object.__setattr__(self, "rules", tuple(self.rules))
        for rule in self.rules:
            if not isinstance(rule, ToolRule):
                raise SettingError("rules", f"rules must hold ToolRule values, got {type(rule).__name__}")
        if self.keep_recent_groups < 0:
            raise SettingError("keep_recent_groups", f"keep_recent_groups must be >= 0, got {self.keep_recent_groups}")
        if self.old_max_chars < 0:
            raise SettingError("old_max_chars", f"old_max_chars must be >= 0, got {self.old_max_chars}")
        if self.recent_max_chars < 100:
            raise SettingError("recent_max_chars", f"recent_max_chars must be >= 100, got {self.recent_max_chars}")
        if self.recent_max_chars < self.old_max_chars:
            raise SettingError(
                "recent_max_chars",
                f"recent_max_chars ({self.recent_max_chars}) must be >= old_max_chars "
                f"({self.old_max_chars}): recent results are capped higher than old ones",
            )
        if not 0.0 <= self.head_ratio <= 1.0:
            raise SettingError("head_ratio", f"head_ratio must be within [0, 1], got {self.head_ratio}")
        if self.clear_at_least < 1:
            raise SettingError("clear_at_least", f"clear_at_least must be >= 1, got {self.clear_at_least}")


@dataclass(frozen=True)
class PinsConfig:
    """Which messages are kept verbatim forever. `roles` pins every message of a role;
    `patterns` are regexes searched in the text of user/system/developer messages only
    (tool output must not be able to pin itself)."""

    first_user: bool = True
    roles: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _as_tuple(self, "roles")
        _as_tuple(self, "patterns")
        for role in self.roles:
            if role not in KNOWN_ROLES:
                raise SettingError("roles", f"pins.roles: unknown role {role!r}; expected one of {KNOWN_ROLES}")
        for pattern in self.patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise SettingError("patterns", f"pins.patterns: invalid regex {pattern!r}: {exc}") from None


@dataclass(frozen=True)
class PolicyConfig:
    """Per-route policy settings. `trigger` and `target` are fractions of `Budget.input_budget`.

    The proxy's config (`proxy.config.Policy`) is this dataclass plus the proxy-only settings,
    validated by pydantic from the YAML keys of the same names; the bounds below are the only ones."""

    trigger: float = 0.8
    target: float = 0.5
    keep_recent_tokens: int = 20000
    tool_results: ToolResultsConfig = field(default_factory=ToolResultsConfig)
    pins: PinsConfig = field(default_factory=PinsConfig)
    summary_chunk_tokens: int = 24000
    order: tuple[str, ...] = DEFAULT_ORDER
    late_trim: float = 1.0
    """A request whose history has not been summarized yet goes as sent (no trim) up to this
    share of the input budget, not only up to the trigger; the default, the whole budget: a
    conversation is left exactly as the client sent it for as long as it fits. The first trim
    rewrites everything after the first old result, which a prompt cache bills once in full
    (Anthropic: 1.25x) and which pays back only over the requests that follow, so a session that
    ends before it would have overflowed is cheapest untouched, without a summarizer call either:
    the first request that no longer fits is trimmed, and plans a compaction if it is still over
    the trigger. At or below the trigger, trimming and a new checkpoint apply from the trigger
    (fewer stale tool results in front of the model, at that price)."""
    first_rewrite: str = "compact"
    """The first request that no longer goes as sent rewrites the cached prefix anyway: `compact`
    makes that the compaction (planned under the trigger too, waited for), so the prefix is written
    once, not by a trim and again by the summary; `trim` compacts from the trigger on."""

    def __post_init__(self) -> None:
        _as_tuple(self, "order")
        if not 0.0 < self.trigger <= 1.0:
            raise SettingError("trigger", f"trigger must be within (0, 1], got {self.trigger}")
        if not 0.0 < self.late_trim <= 1.0:
            raise SettingError("late_trim", f"late_trim must be within (0, 1], got {self.late_trim}")
        if self.first_rewrite not in ("compact", "trim"):
            raise SettingError("first_rewrite", f"must be 'compact' or 'trim', got {self.first_rewrite!r}")
        if not self.target > 0.0:
            raise SettingError("target", f"target must be > 0, got {self.target}")
        if not self.target < self.trigger:  # compaction must land well below the point that triggers it
            raise SettingError(None, f"target ({self.target}) must be below trigger ({self.trigger})")
        if self.keep_recent_tokens < 0:
            raise SettingError("keep_recent_tokens", f"keep_recent_tokens must be >= 0, got {self.keep_recent_tokens}")
        if self.summary_chunk_tokens < 256:
            raise SettingError(
                "summary_chunk_tokens", f"summary_chunk_tokens must be >= 256, got {self.summary_chunk_tokens}"
            )
        if len(set(self.order)) != len(self.order):
            raise SettingError("order", f"order: steps must not repeat, got {self.order}")
        if not self.order or self.order[-1] != LAST_STEP:
            raise SettingError(
                "order", f"order must end with {LAST_STEP!r} (the step that enforces the budget), got {self.order}"
            )


@dataclass(frozen=True)
class TrimEntry:
    """One tool result shortened in the projection (the raw event is untouched)."""

    seq: int
    tool_call_id: str
    original_chars: int
    kept_chars: int
    how: str = "head+tail"
    """what shortened it: `head+tail`, `repeat`, `near-repeat` or a content kind (`test output`...)"""

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "tool_call_id": self.tool_call_id,
            "original_chars": self.original_chars,
            "kept_chars": self.kept_chars,
            "how": self.how,
        }


@dataclass(frozen=True)
class CompactionPlan:
    """Summarize items from_seq..through_seq, chunk by chunk (rolling), then commit a checkpoint
    with covered_through_seq = through_seq. Chunks hold whole groups; an item whose text had to be
    cut so the summarizer request fits is a new `Item` with the same seq and the cut message."""

    from_seq: int
    through_seq: int
    chunks: tuple[tuple[Item, ...], ...]
    reason: str
    released_pins: tuple[int, ...] = ()
    """pins released by the projection that planned this (`pins.release_pins`): the summarizer
    sees them as history, not among the messages kept verbatim"""
    summary_room: int | None = None
    """the longest summary the projection after the commit has room for (it lands halfway
    between target and trigger); None: not known. A summary over `Budget.summary_max_tokens` but
    within it is kept (recorded as long); a longer one is cut to it"""
    wait: bool = False
    """the request that planned it waits for the commit (`PolicyConfig.first_rewrite`)"""

    def to_dict(self) -> dict[str, Any]:
        return {
            "from_seq": self.from_seq,
            "through_seq": self.through_seq,
            "chunks": [
                {
                    "first_seq": chunk[0].seq,
                    "last_seq": chunk[-1].seq,
                    "items": len(chunk),
                    "tokens": sum(item.tokens for item in chunk),
                }
                for chunk in self.chunks
                if chunk
            ],
            "reason": self.reason,
            "released_pins": compact_ranges(self.released_pins),
            "summary_room": self.summary_room,
            "wait": self.wait,
        }


def compact_ranges(seqs: Sequence[int]) -> list[list[int]]:
    """[1, 2, 3, 7] -> [[1, 3], [7, 7]]: compact JSON for long histories. (A range ends where
    the next seq is not the previous one plus one; found with C-level iteration, the Python
    work is per range, not per seq.)"""
    ordered = sorted(seqs)
    if not ordered:
        return []
    successors = map(_PLUS_ONE, ordered)
    breaks = list(compress(range(1, len(ordered)), map(ne, ordered[1:], successors)))
    starts = [ordered[0], *(ordered[i] for i in breaks)]
    ends = [*(ordered[i - 1] for i in breaks), ordered[-1]]
    return [[start, end] for start, end in zip(starts, ends, strict=True)]


_PLUS_ONE = (1).__add__


@dataclass(frozen=True)
class ProjectionRecord:
    """What the projection did, for the call record and "print what is actually sent".

    `client_tokens` is what the client's full history would cost, `sent_tokens` what is sent
    (both include `Budget.fixed_tokens`). `covered_through_seq` is the effective boundary (0 if
    no checkpoint applies; then `checkpoint_generation` is None too). Every item seq is accounted
    for exactly once: covered, in `sent_seqs`, in `pruned_seqs` (dropped by `prune_groups`) or in
    `orphan_seqs` (tool results without a call, never sent) — except `pinned_seqs`: items covered
    by the checkpoint yet still sent verbatim (pinned messages, the newest user message, and the
    rest of their groups). `repaired` lists (assistant seq, tool_call_id) given a synthetic result.
    """

    client_tokens: int
    sent_tokens: int
    checkpoint_generation: int | None
    covered_through_seq: int
    trimmed: tuple[TrimEntry, ...]
    pruned_seqs: tuple[int, ...]
    over_trigger: bool
    compaction: CompactionPlan | None
    sent_seqs: tuple[int, ...] = ()
    pinned_seqs: tuple[int, ...] = ()
    orphan_seqs: tuple[int, ...] = ()
    repaired: tuple[tuple[int, str], ...] = ()
    input_budget: int = 0
    trigger_tokens: int = 0
    cut_to_fit: tuple[int, ...] = ()
    """seqs of the newest turn's tool results cut head + tail because the request could not fit
    otherwise (their entries are in `trimmed` too)"""
    released_pins: tuple[int, ...] = ()
    """seqs pinned by a rule yet treated like other history (summarized, trimmed, pruned): the
    rule pins beyond the first user message took more than half the input budget, so the oldest
    of them were released (`pins.release_pins`)"""
    deferred_generation: int | None = None
    """a committed checkpoint not applied yet: the history still fits as sent (`late_trim`)"""
    rewritten: bool = False
    """what is sent differs from the client's history (a checkpoint applied, results trimmed or
    cut, groups pruned, orphans dropped, calls repaired, or a step that marked its draft): the
    proxy sends the projection; else the client's own bytes"""
    sent_ranges: tuple[tuple[int, ...], tuple[tuple[int, int], ...]] | None = field(
        default=None, compare=False, repr=False
    )
    """(a `sent_seqs` tuple, its ranges) when the projection already had them; `to_dict` uses
    them only while `sent_seqs` is that very tuple (a `replace()` of it recomputes)"""

    def to_dict(self) -> dict[str, Any]:
        hint = self.sent_ranges
        if hint is not None and hint[0] is self.sent_seqs:
            sent = [[start, end] for start, end in hint[1]]
        else:
            sent = compact_ranges(self.sent_seqs)
        return {
            "client_tokens": self.client_tokens,
            "sent_tokens": self.sent_tokens,
            "input_budget": self.input_budget,
            "trigger_tokens": self.trigger_tokens,
            "checkpoint_generation": self.checkpoint_generation,
            "covered_through_seq": self.covered_through_seq,
            "trimmed": [entry.to_dict() for entry in self.trimmed],
            "pruned_seqs": list(self.pruned_seqs),
            "over_trigger": self.over_trigger,
            "compaction": self.compaction.to_dict() if self.compaction else None,
            "sent_seqs": sent,
            "pinned_seqs": list(self.pinned_seqs),
            "orphan_seqs": list(self.orphan_seqs),
            "repaired": [{"seq": seq, "tool_call_id": tid} for seq, tid in self.repaired],
            "cut_to_fit": list(self.cut_to_fit),
            "released_pins": compact_ranges(self.released_pins),
            "deferred_generation": self.deferred_generation,
        }

    def summary_dict(self) -> dict[str, Any]:
        """The compact form kept with every call record: counts and ranges instead of per-event
        lists, so a record's size does not grow with the history (`to_dict` has the details)."""
        return {
            "client_tokens": self.client_tokens,
            "sent_tokens": self.sent_tokens,
            "input_budget": self.input_budget,
            "trigger_tokens": self.trigger_tokens,
            "checkpoint_generation": self.checkpoint_generation,
            "covered_through_seq": self.covered_through_seq,
            "trimmed": len(self.trimmed),
            "trimmed_chars": [
                sum(entry.original_chars for entry in self.trimmed),
                sum(entry.kept_chars for entry in self.trimmed),
            ],
            "pruned_seqs": compact_ranges(self.pruned_seqs),
            "over_trigger": self.over_trigger,
            "compaction": self.compaction.to_dict() if self.compaction else None,
            "sent": len(self.sent_seqs),
            "pinned_seqs": list(self.pinned_seqs),
            "orphans": len(self.orphan_seqs),
            "repaired": len(self.repaired),
            "cut_to_fit": list(self.cut_to_fit),
            "released_pins": compact_ranges(self.released_pins),
            "deferred_generation": self.deferred_generation,
        }


@dataclass(frozen=True)
class Projection:
    """The messages to send and the record of how they were made. `messages` is a fresh list of
    read-only dicts: untouched messages are the caller's own objects, rewritten ones (trimmed,
    repaired, the summary block) may be shared with other projections through a memoizing
    `draft.Renderer`. Serialize them; never mutate them.

    `cache_point`: index in `messages` of the last tool result of the groups trimmed as old
    (`trim_tool_results`' boundary), None when none is sent. Everything up to it keeps its bytes
    until the boundary next moves, so a prompt cache entry ending there is read on that move,
    when everything after it changes (the Anthropic wire puts a breakpoint there).
    `previous_point`: where `cache_point` was before the boundary's last move (None: nowhere
    sent). The move's request reads the cache entry that ended there; a cache that looks for it
    only a few blocks back from the new point (Anthropic: 20) needs a breakpoint on it too."""

    messages: list[dict[str, Any]]
    record: ProjectionRecord
    cache_point: int | None = None
    previous_point: int | None = None


class ContextOverflow(Exception):
    """Even the irreducible request (prefix, pins, summary, latest turn) exceeds the input budget.
    The proxy maps this to a 400 `context_length_exceeded` in the client API's error shape."""

    def __init__(
        self,
        needed_tokens: int,
        input_budget: int,
        context_window: int,
        max_output_tokens: int,
        detail: str = "",
    ) -> None:
        self.needed_tokens = needed_tokens
        self.input_budget = input_budget
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.detail = detail
        message = (
            f"context length exceeded: even after dropping all unpinned history the request needs "
            f"{needed_tokens:,} tokens; the model allows {input_budget:,} input tokens "
            f"(window {context_window:,} − max output {max_output_tokens:,}). "
            "Shorten the latest message or tool result, lower max_tokens, or start a new conversation."
        )
        if detail:
            message += f" ({detail})"
        super().__init__(message)
