"""Per-tool rules: how the results of one tool are trimmed (`ToolResultsConfig.rules`).

Problem: some tools' results must stay whole (a subagent's report), some are worth little once
superseded (the last directory listing is the one that counts), some are worth more than the
default cap. A rule names tools by glob and says how their results are treated.

Rules: `exclude_tools` first (each a `keep`), then `rules` in order; the first whose glob
(`fnmatch`, case-sensitive) matches the tool's name applies; a tool no rule names is
`type-aware` with the policy's caps. A result under its cap is never touched.

Example::

    config = ToolResultsConfig(rules=(ToolRule("Read", keep_last_n=2), ToolRule("mcp__*", "trim", 1000)))
    treatment(config, "Read")      # Treatment("type-aware", old_cap=400, recent_cap=8000, keep_last_n=2)
    treatment(config, "mcp__gh")   # Treatment("trim", old_cap=1000, recent_cap=8000, keep_last_n=None)
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache

from policies.config import ToolResultsConfig, ToolRule


@dataclass(frozen=True, slots=True)
class Treatment:
    action: str
    """`keep`, `trim` (head + tail) or `type-aware` (repeats, then by content)"""
    old_cap: int
    """the cap of an old result (and of a superseded one, `keep_last_n`)"""
    recent_cap: int
    keep_last_n: int | None = None


def rule_for(config: ToolResultsConfig, tool: str) -> ToolRule | None:
    """The rule that applies to `tool` (None: the defaults)."""
    if tool in config.exclude_tools:
        return ToolRule(tool, "keep")
    return next((rule for rule in config.rules if fnmatchcase(tool, rule.tool)), None)


@lru_cache(maxsize=4096)
def treatment(config: ToolResultsConfig, tool: str) -> Treatment:
    """How `tool`'s results are trimmed under `config`."""
    rule = rule_for(config, tool)
    if rule is None:
        return Treatment("type-aware", config.old_max_chars, config.recent_max_chars)
    old = config.old_max_chars if rule.max_chars is None else rule.max_chars
    return Treatment(rule.action, old, max(config.recent_max_chars, old), rule.keep_last_n)


@lru_cache(maxsize=256)
def floor_cap(config: ToolResultsConfig, old: bool) -> int:
    """The smallest cap any result of an old (or recent) group can get: a result no longer than
    this is left alone without looking its tool up (the hot path on long histories)."""
    caps = [config.old_max_chars if old else config.recent_max_chars]
    for rule in config.rules:
        if rule.max_chars is not None and (old or rule.keep_last_n is not None):
            caps.append(rule.max_chars)
        elif rule.keep_last_n is not None:
            caps.append(config.old_max_chars)
    return min(caps)
