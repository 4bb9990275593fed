"""The serving process's garbage collector: young collections rare enough that a request's own
objects are gone before one runs.

CPython collects its youngest generation every 700 net container allocations. One request of
an agent body makes a few hundred (parsed messages, items, projection records), and with 16
requests in flight every young collection finds the objects of the requests still running,
traverses them and promotes them. They die a moment later in an older generation, whose
collections they trigger: a middle one every ten young ones, a full one over the whole heap
(every cached history, the model catalog) every few hundred requests. Measured with
`gc.callbacks` in a proxy under `bench/loadgen.py` at 16 clients (agent body): 0.39 ms of
collection per request at the default thresholds (~10% of its CPU; full collections of 57 ms),
0.06 ms with a young threshold of 20,000, at which the transient objects of a request are
freed by their reference counts before a collection sees them. Reference cycles are still
collected automatically, only later, so the price of the threshold is whatever a request leaves
in a cycle: it waits for the next collection, and past a young one for a full one.

So requests leave none (`tests/e2e/test_cyclic_garbage.py`: chat and Anthropic, streamed and
not, a refused upstream and a cut stream; one collection after them finds nothing). The cycles
found and broken: a `ProjectionCache` and its renderer referencing each other (every branch memo
evicted from the LRU, ~1,130 objects and ~136 kB at 100 messages, waited for a full collection:
`python -m bench`'s memory phase, 1,000 conversations of 50 turns, ended at 220 kB per
conversation at 20,000 and 142 kB at 700); a stream's shutdown watcher as an anyio task-group
child (~30 objects); aiohttp's errors kept where their tracebacks lead back to them (a refused or
cut request's frames and body). Now that phase ends at 131 kB per conversation at 20,000, 5,000
or 700 alike, and the threshold's only effect is the CPU above (16 clients, same run: 3.23 /
3.34 / 3.68 ms per request at 20,000 / 5,000 / 700).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000


def tune() -> None:
    """Raise the young generation's threshold, keeping the older generations' ratios."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
