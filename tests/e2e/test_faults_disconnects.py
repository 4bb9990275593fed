"""Measured row `client disconnects`: clients hanging up at random points of slow streams (all
three APIs). Each upstream request is cancelled, each call is recorded `partial`, and within 10 s
the proxy's tasks, upstream connections and file descriptors are back to their baseline.
CI profile: 200 disconnects; `CTXPROXY_LONG=1`: 1,000."""

from __future__ import annotations

import os
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.e2e.test_faults import APIS, PATHS, fault_routes, request_body
from tests.support.fault_upstream import Fault
from tests.support.measure import profile, report
from tests.support.waiting import wait_until

pytestmark = pytest.mark.soak


def load(p) -> dict[str, int]:
    ready = httpx.get(f"{p.url}/readyz", timeout=10).json()
    fds = len(os.listdir(f"/proc/{p.proc.pid}/fd"))
    return {"tasks": ready["tasks"], "in_flight": ready["in_flight"], "fds": fds}


def hang_up(p, api: str, api_key: str, marker: str, after_events: int) -> str | None:
    """Stream, read `after_events` events, hang up; returns the conversation id."""
    headers = {"Authorization": f"Bearer {api_key}", "x-api-key": api_key, "anthropic-version": "2023-06-01"}
    with httpx.stream(
        "POST", p.url + PATHS[api], json=request_body(api, marker, True), headers=headers, timeout=30
    ) as r:
        assert r.status_code == 200, r.read()[:300]
        seen = 0
        for line in r.iter_lines():
            if line == "":
                seen += 1
                if seen >= after_events:
                    break
        return r.headers.get("x-conversation-id")


def test_random_client_disconnects_mid_stream(proxy, faults, api_key):
    p = proxy(fresh=True, routes=fault_routes(faults, first_byte=30, idle=30, total=60))
    rng = random.Random(12)
    n = profile(200, 1000)
    for api in APIS:  # warm up, then take the baseline
        faults.push(Fault(text="warm"))
        httpx.post(
            p.url + PATHS[api], json=request_body(api, "warm", False), headers={"x-api-key": api_key}, timeout=30
        )
    wait_until(lambda: faults.open_connections <= 3, what="warm-up connections to settle")
    base = load(p)
    base_upstream = faults.open_connections
    cases = []
    for i in range(n):
        marker = f"hangup-{i}-{uuid.uuid4().hex[:8]}"
        faults.script(marker, Fault("slow", text="streaming slowly "))
        cases.append((rng.choice(APIS), marker, rng.randint(1, 6)))
    t0 = time.monotonic()
    with ThreadPoolExecutor(10) as pool:
        conversations = list(pool.map(lambda c: hang_up(p, c[0], api_key, c[1], c[2]), cases))
    took = time.monotonic() - t0
    try:
        faults.wait_cancelled(n, timeout=30)
    except AssertionError:
        raise AssertionError(f"{faults.cancelled} of {n} upstream requests cancelled") from None

    def settled() -> dict[str, int] | None:
        now = load(p)
        back = now["tasks"] <= base["tasks"] and now["fds"] <= base["fds"] and now["in_flight"] == 0
        return now if back and faults.open_connections <= base_upstream else None

    t1 = time.monotonic()
    after = wait_until(settled, timeout=10, what=f"tasks/fds/connections back to {base}")
    settle_s = time.monotonic() - t1
    statuses = {}
    for conv in conversations:
        assert conv
        calls = p.wait_calls(conv, 1)
        statuses[calls[-1]["status"]] = statuses.get(calls[-1]["status"], 0) + 1
    assert statuses == {"partial": n}, statuses
    assert "Traceback" not in p.stderr()
    report(
        "client disconnects",
        disconnects=n,
        upstream_cancelled=faults.cancelled,
        recorded_partial=statuses.get("partial", 0),
        baseline=base,
        after=after,
        settled_within_s=round(settle_s, 2),
        run_s=round(took, 1),
    )
