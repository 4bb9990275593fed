"""Memoization of the pure projection, per branch: same result, less work.

`policies.projection.project` is a pure function of (prefix, items, checkpoint, budget, config,
count) and knows nothing of this package. `project_cached(cache, inputs)` returns exactly what it
returns (byte-identical, property-tested) while reusing what the branch's `ProjectionCache`
remembers from earlier calls:

- `cache` — `ProjectionCache` (the previous `HistoryIndex`, a bounded memo of renderings) and
  `MemoRenderer`, the `draft.Renderer` that consults it;
- `tail` — `TailState`, the previous call's rendered tail as flat, cuttable lists;
- `incremental` — the fast path (previous rendering + what is new) and `project_cached`.

A cache is plain mutable state with no lock: its owner keeps one per branch and serializes
calls on it (the proxy's `Projector` does both).
"""

from __future__ import annotations

from policies.memo.cache import MemoRenderer, ProjectionCache
from policies.memo.incremental import project_cached, project_incremental
from policies.memo.tail import TailState

__all__ = ["MemoRenderer", "ProjectionCache", "TailState", "project_cached", "project_incremental"]
