"""The policy configuration: the settings of each step and of the pipeline, validated on construction.

Problem: a route's settings come from YAML through the proxy's config
(`proxy.policy_settings.Policy` is `PolicyConfig` plus the proxy-only settings), and a policy must
never see a half-valid one. The bounds live only here, so the proxy validates these dataclasses
directly instead of repeating them; a violated bound is a `SettingError` naming its field, which
the config loader turns into a located message (`policies.default.pins.patterns: invalid regex ...`).

Invariant: every config is frozen and holds tuples, never lists (configs stay hashable).

Example::

    PolicyConfig(trigger=0.8, target=0.5)  # compact above 80% of the input budget, aim for ~50%
    PolicyConfig(trigger=0.5, target=0.6)  # SettingError: target must be below trigger
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from policies.base import KNOWN_ROLES

DEFAULT_ORDER: tuple[str, ...] = ("trim_tool_results", "summary_tail", "prune_groups")
"""The pipeline `PolicyConfig.order` names by default. The steps are registered in one place,
`policies.projection.STEPS`, which checks the names (`check_order`); `LAST_STEP` must come last."""
LAST_STEP = "prune_groups"
"""The one step that guarantees the budget: every order ends with it."""


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

    The proxy's config (`proxy.policy_settings.Policy`) is this dataclass plus the proxy-only settings,
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
