"""Pure context policies: what each upstream call sees, computed from the stored branch.

No I/O, no clock, no randomness; `tokens` is the only module that touches tiktoken and the
environment. Entry point: `policies.projection.project`; `policies.memo.project_cached` is the
same function memoized per branch (the core never imports the memo).
"""

from __future__ import annotations

from policies.base import Budget, Checkpoint, ContextOverflow, Item
from policies.config import PinsConfig, PolicyConfig, SettingError, ToolResultsConfig, ToolRule
from policies.outcome import CompactionPlan, Projection, ProjectionRecord, TrimEntry
from policies.projection import STEPS, project

__all__ = [
    "STEPS",
    "Budget",
    "Checkpoint",
    "CompactionPlan",
    "ContextOverflow",
    "Item",
    "PinsConfig",
    "PolicyConfig",
    "Projection",
    "ProjectionRecord",
    "SettingError",
    "ToolResultsConfig",
    "ToolRule",
    "TrimEntry",
    "project",
]
