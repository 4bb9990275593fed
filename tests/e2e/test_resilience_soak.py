"""Soak: a real proxy on a Redis store under sustained load -- 30% of the requests failing (upstream
500s, 400s, streams cut mid-way), half of them streamed, agents continuing their conversations --
after a warm-up, then a store outage under the same load (redis-server stopped, restarted with
its data), then recovery.

Measured: the proxy process's RSS growth after the warm-up (<= 20 MB), its open file descriptors
and threads back to their level (no connection or task pile-up), every request during the outage
answered at once with 503 in OpenAI's error shape, and requests succeeding again afterwards.
CI: 1,500 requests and a 10 s outage; ``CTXPROXY_LONG=1``: 5,000 requests and 30 s.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from proxy.config import Caches
from tests.support.redis_server import RedisServer
from tests.support.resilience import counter, profile, redis_prefix
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.soak

MODEL = "gpt-soak"
REQUESTS = profile(1500, 5000)
WARM_UP = 400
OUTAGE = profile(10, 30)
CLIENTS = 8
SLOTS = 1
RSS_LIMIT_MB = 20
CACHES = ("token_counts", "projection_branches", "projection_memo_entries", "calibrations")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.fixture
def soak_proxy(proxy):
    server = RedisServer(persistent=True).start()
    try:
        p = proxy(fresh=True, store=f"{server.url}?prefix={redis_prefix()}")
        yield p, server
    finally:
        server.close()


def respond(body: dict[str, Any]) -> Reply:
    rng = random.Random(str(body.get("messages")))
    roll = rng.random()
    if roll < 0.15:
        return Reply(status=500)
    if roll < 0.22:
        return Reply(status=400)
    if roll < 0.30 and body.get("stream"):
        return Reply(drop_after_chunks=1)
    if roll < 0.30:
        return Reply(status=503)
    return Reply(chunks=4)


class Agents:
    """``CLIENTS`` threads, each an agent continuing its conversation (a new one every 10 turns)."""

    def __init__(self, url: str, api_key: str) -> None:
        self.url, self.api_key = url, api_key
        self.lock = threading.Lock()
        self.statuses: dict[int, int] = {}
        self.bad_outage: list[str] = []
        self.outage = threading.Event()

    def run(self, n: int) -> None:
        per = n // CLIENTS
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(lambda i: self._agent(i, per), range(CLIENTS)))

    def _agent(self, i: int, n: int) -> None:
        # Each agent works in SLOTS conversations, rewinding one to its start every 10 turns (a
        # fork); a streamed answer is not sent back either, so the next request forks too: the
        # run makes thousands of branches. The proxy runs the default `caches:` bounds: the warm-up
        # makes ~200 branches, so their memos (256 at most, ~15 kB each here) are full soon after;
        # token counts and calibrations stay below their bounds. The end state is printed from /metrics.
        messages: list[dict[str, Any]] = []
        with httpx.Client(base_url=self.url, timeout=30) as client:
            for k in range(n):
                if k % 10 == 0:
                    slot = (k // 10) % SLOTS
                    messages = [{"role": "system", "content": f"Soak agent {i} slot {slot}."}]
                step = "" if k % 10 == 0 else uuid.uuid4().hex  # the start is the same every time
                messages.append({"role": "user", "content": f"agent {i} step {k % 10} {step} " + "x" * 200})
                self.one(client, messages, stream=k % 2 == 0)

    def one(self, client: httpx.Client, messages: list[dict[str, Any]], stream: bool) -> int:
        body = {"model": MODEL, "messages": messages, "stream": stream}
        headers = {"Authorization": f"Bearer {self.api_key}"}
        outage = self.outage.is_set()
        started = time.monotonic()
        try:
            with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                data = r.read()
                status = r.status_code
        except httpx.HTTPError as exc:
            status, data = -1, repr(exc).encode()
        elapsed = time.monotonic() - started
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if outage and self.outage.is_set() and status != 200:
                shaped = status == 503 and b'"type": "service_unavailable"' in data
                if not shaped or elapsed > 10:
                    self.bad_outage.append(f"{status} {elapsed:.1f}s {data[:200]!r}")
        if status == 200 and not stream:
            messages.append({"role": "assistant", "content": f"ok: {messages[-1]['content']}"})
        return status


def test_soak_then_store_outage(soak_proxy, upstream, api_key):
    p, server = soak_proxy
    assert p.proc is not None
    pid = p.proc.pid
    upstream.responder = respond
    agents = Agents(p.url, api_key)

    agents.run(WARM_UP)
    base_rss, base_fds, base_threads = rss_mb(pid), fds(pid), threads(pid)
    agents.run(REQUESTS)
    after_load = rss_mb(pid)
    failing = sum(v for k, v in agents.statuses.items() if k != 200)
    total = sum(agents.statuses.values())
    assert 0.2 < failing / total < 0.4, agents.statuses

    # the outage, under load: a background load keeps running while Redis is down
    stop_load = threading.Event()

    def background() -> None:
        while not stop_load.is_set():
            agents.run(CLIENTS * 4)

    loader = threading.Thread(target=background, daemon=True)
    loader.start()
    time.sleep(1)
    before = dict(agents.statuses)
    server.stop()
    agents.outage.set()  # a request started from now on finds the store down
    time.sleep(OUTAGE)  # the load runs meanwhile; that is the test
    agents.outage.clear()
    during_503 = agents.statuses.get(503, 0) - before.get(503, 0)
    server.start()
    with httpx.Client(base_url=p.url, timeout=30) as client:
        wait_until(
            lambda: agents.one(client, [{"role": "user", "content": f"back {uuid.uuid4().hex}"}], False) == 200,
            timeout=30,
            what="requests to succeed after the outage",
        )
    stop_load.set()
    loader.join(timeout=120)
    assert agents.bad_outage == [], agents.bad_outage[:5]
    assert during_503 >= CLIENTS, f"only {during_503} requests answered 503 during the outage"
    agents.run(WARM_UP)  # recovered load
    assert httpx.get(f"{p.url}/healthz", timeout=5).status_code == 200

    def settled() -> bool:
        return fds(pid) <= base_fds + 5 and threads(pid) <= base_threads + 2

    wait_until(settled, timeout=15, what="file descriptors and threads back to their level")
    final_rss = rss_mb(pid)
    growth = max(after_load, final_rss) - base_rss
    main_calls = counter(p.url, "ctxproxy_requests_total")
    caches = {c: counter(p.url, "ctxproxy_cache_entries", cache=c) for c in CACHES}
    print(
        f"soak: {total} requests + outage {OUTAGE} s ({during_503} answered 503), statuses {agents.statuses}, "
        f"RSS {base_rss:.1f} -> {after_load:.1f} -> {final_rss:.1f} MB (growth {growth:.1f} MB), "
        f"fds {base_fds} -> {fds(pid)}, threads {base_threads} -> {threads(pid)}, main calls recorded {main_calls:g}, "
        f"cache entries {caches}"
    )
    assert growth <= RSS_LIMIT_MB, f"RSS grew {growth:.1f} MB after the warm-up"
    bounds = Caches()
    assert caches["token_counts"] <= bounds.token_counts, caches
    assert caches["projection_branches"] <= bounds.projection_branches, caches
    assert caches["calibrations"] <= bounds.calibrations, caches
