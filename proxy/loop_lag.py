"""Event-loop lag: how late the loop runs a callback that was due, sampled by one background task.

Every request, stream relay and store call of a worker shares one event loop; a step that holds
it (a long JSON parse, a projection of a large history, a synchronous store call) delays every
other request's next step by as long. The sampler sleeps `interval` seconds and observes how much
later than asked it woke up (`Metrics.loop_lag`, `ctxproxy_event_loop_lag_seconds`): on an idle
loop that is ~0, under load it is the time the loop was busy with something else when the timer
fell due. One timer wake-up per interval (ten a second by default) is all it costs.
"""

from __future__ import annotations

import asyncio
import time

from .metrics import Metrics

INTERVAL = 0.1


async def sample_forever(metrics: Metrics, interval: float = INTERVAL) -> None:
    """Observe the loop's lag every `interval` seconds until cancelled."""
    while True:
        due = time.perf_counter() + interval
        await asyncio.sleep(interval)
        metrics.loop_lag.observe((), max(0.0, time.perf_counter() - due))
