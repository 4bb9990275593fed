"""The loop-lag sampler observes how long the event loop was held past a due timer."""

from __future__ import annotations

import asyncio
import time

from proxy.loop_lag import sample_forever
from proxy.metrics import Metrics
from tests.unit.test_ledger import parse_metrics


def _count_and_sum(metrics: Metrics) -> tuple[float, float]:
    parsed = parse_metrics(metrics.render().decode())
    empty: frozenset[tuple[str, str]] = frozenset()
    return (
        parsed.get(("ctxproxy_event_loop_lag_seconds_count", empty), 0.0),
        parsed.get(("ctxproxy_event_loop_lag_seconds_sum", empty), 0.0),
    )


def test_a_held_loop_shows_as_lag_and_the_sampler_stops_when_cancelled() -> None:
    metrics = Metrics()
    assert _count_and_sum(metrics) == (0.0, 0.0)  # nothing observed before the sampler runs

    async def run() -> None:
        sampler = asyncio.create_task(sample_forever(metrics, interval=0.01))
        await asyncio.sleep(0)  # the sampler's timer is armed, due in 10 ms
        time.sleep(0.2)  # hold the loop well past it
        await asyncio.sleep(0.05)
        sampler.cancel()
        try:
            await sampler
        except asyncio.CancelledError:
            pass
        assert sampler.cancelled()

    asyncio.run(run())
    count, total = _count_and_sum(metrics)
    assert count >= 1
    assert total >= 0.19 - 0.01  # the 200 ms hold, less the timer's own 10 ms
    text = metrics.render().decode()
    assert 'ctxproxy_event_loop_lag_seconds_bucket{le="0.1"}' in text
    assert 'ctxproxy_event_loop_lag_seconds_bucket{le="+Inf"}' in text
