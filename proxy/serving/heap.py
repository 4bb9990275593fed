"""The serving process's garbage collector: young collections rare enough that a request's own
objects are gone before one runs.

CPython collects its youngest generation every 700 net container allocations. One request of
an agent body makes a few hundred (parsed messages, items, projection records), and with many
requests in flight every young collection finds the objects of the requests still running,
traverses them and promotes them. They die a moment later in an older generation, whose
collections they trigger: a middle one every ten young ones, a full one over the whole heap
(every cached history, the model catalog) every few hundred requests. At `YOUNG_THRESHOLD` the
transient objects of a request are freed by their reference counts before a collection sees
them, so the collector's share of a request's CPU becomes small. Reference cycles are still
collected automatically, only later, so the price of the threshold is whatever a request leaves
in a cycle: it waits for the next collection, and past a young one for a full one.

So requests leave none, and the threshold costs no memory (`tests/e2e/test_cyclic_garbage.py`:
chat and Anthropic, streamed and not, a refused upstream and a cut stream; one collection after
them finds nothing). The cycles kept out: a `ProjectionCache` and its renderer referencing each
other (the renderer is made on access, so an evicted branch memo is freed at once); a stream's
shutdown watcher as an anyio task-group child (it is a plain task); aiohttp's errors kept where
their tracebacks lead back to them (a refused or cut request's frames and body: the upstream hop
drops those tracebacks at its boundary). The numbers behind the threshold are in
`bench/optimisations.md`.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000


def tune() -> None:
    """Raise the young generation's threshold, keeping the older generations' ratios."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
