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
collected automatically, only later: at most 20,000 more container objects wait for it.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000


def tune() -> None:
    """Raise the young generation's threshold, keeping the older generations' ratios."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
