"""Two proxy replicas on one PostgreSQL store: real proxy processes, the OpenAI SDK, one scripted
upstream, a private PostgreSQL.

- The replica tests of test_replicas.py, run here on PostgreSQL (their `replicas` fixture is
  this module's): parallel conversations alternating replicas while compactions run, one
  conversation interleaved with its own compaction, and a replica SIGKILLed while its summary
  call is in flight (the other compacts once the dead replica's lease has expired).
- PostgreSQL itself restarted (an immediate shutdown: every connection cut) while conversations
  run on both replicas: the store waits the restart out (`failover_wait_ms`), clients would
  retry a 503 as agents do; every turn succeeds, every history is complete and ordered on one
  branch with one active checkpoint, and the ledger equals the upstream's usage: zero
  acknowledged events or call records lost; the URL's password in no log line.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.test_cluster import answer_stored, settle_ledger, turn_retrying
from tests.e2e.test_replicas import (
    MODEL,
    SlowSummaries,
    filler,
    history,
    reported_usage,
    stored,
    summary_count,
    test_one_conversation_interleaved_with_its_own_compaction,
    test_parallel_conversations_alternating_replicas,
    test_replica_killed_during_its_compaction,
)
from tests.e2e.test_rewriting import SMALL_POLICY, WINDOW
from tests.support.postgres_server import PostgresServer

pytestmark = pytest.mark.slow

__all__ = [  # run here on PostgreSQL, through this module's `replicas`
    "test_one_conversation_interleaved_with_its_own_compaction",
    "test_parallel_conversations_alternating_replicas",
    "test_replica_killed_during_its_compaction",
]


def _pair(proxy: Any, url: str) -> tuple[Any, Any]:
    """Two proxy processes on the store `url`, with a short compaction lease (a killed replica's
    lease expires within the test)."""
    options = {"policies": {"default": SMALL_POLICY}, "compaction_lease_seconds": 3}
    return proxy(fresh=True, store=url, **options), proxy(fresh=True, store=url, **options)


@pytest.fixture
def replicas(proxy, postgres_server: PostgresServer, upstream, monkeypatch) -> Iterator[tuple[Any, Any]]:
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    schema = f"replicas_{uuid.uuid4().hex[:8]}"
    yield _pair(proxy, postgres_server.url(password="not-checked") + f"?schema={schema}&pool_max=4")
    postgres_server.drop_schemas(schema)


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.close()


def test_postgres_restarted_mid_run(proxy, own_postgres, upstream, api_key, monkeypatch):
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    password = "pg-secret-" + uuid.uuid4().hex  # trust authentication: carried, never checked
    a, b = _pair(proxy, own_postgres.url(password=password) + "?pool_max=4")
    upstream.responder = SlowSummaries(0.3)
    n_convs, n_turns = 6, 14
    done_turns = [0] * n_convs
    restart_at = threading.Event()
    events: dict[str, float] = {}

    def drive(i: int) -> tuple[list[dict[str, Any]], str, int]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": f"Postgres agent {i}. Be brief."}]
        conv_ids, refused = set(), 0
        for t in range(n_turns):
            messages.append({"role": "user", "content": filler(i, t)})
            text, conv, r = turn_retrying((a, b)[(t + i) % 2], api_key, messages, stream=t % 3 == 0)
            assert text == f"ok: {filler(i, t)}"
            if t == 0:
                answer_stored(a, conv, text)
            refused += r
            conv_ids.add(conv)
            messages.append({"role": "assistant", "content": text})
            done_turns[i] = t + 1
            if min(done_turns) >= 4:
                restart_at.set()
        assert len(conv_ids) == 1, f"conversation {i} split into {conv_ids}"
        return messages, conv_ids.pop(), refused

    def disrupt() -> None:
        assert restart_at.wait(timeout=180), "the conversations never got going"
        own_postgres.kill()  # immediate shutdown: no checkpoint, every connection cut
        events["down"] = time.monotonic()
        time.sleep(1.0)
        own_postgres.start()  # recovery replays the WAL
        events["up"] = time.monotonic()

    with ThreadPoolExecutor(n_convs + 1) as pool:
        disruptor = pool.submit(disrupt)
        results = list(pool.map(drive, range(n_convs)))
        disruptor.result()
    print(f"\nrestart: {sum(r for _, _, r in results)} turns answered 5xx and were retried")
    convs = [conv for _, conv, _ in results]
    assert len(set(convs)) == n_convs

    calls = settle_ledger(a, upstream, convs)
    assert summary_count(upstream) >= n_convs, "the small window should have forced compactions"
    for messages, conv, _ in results:
        assert len(a.conversation(conv)["branches"]) == 1
        stored_events = a.events(conv)
        assert [e["seq"] for e in stored_events] == list(range(1, len(stored_events) + 1))
        assert stored(stored_events) == history(messages)
        assert b.events(conv) == stored_events
        checkpoints = a.admin_json(f"conversations/{conv}/checkpoints")["data"]
        assert len([c for c in checkpoints if c["status"] == "active"]) == 1, checkpoints
    # the ledger: one complete call record per upstream reply, the same token sums
    failed = [c for c in calls if c["status"] != "complete"]
    assert all(c["usage"]["input_total"] is None for c in failed), failed
    complete = [c for c in calls if c["status"] == "complete"]
    assert len(complete) == len(upstream.replies_sent) == len({c["id"] for c in complete})
    assert sum(c["usage"]["input_total"] for c in complete) == sum(reported_usage(r)[0] for r in upstream.replies_sent)
    assert sum(c["usage"]["output"] for c in complete) == sum(reported_usage(r)[1] for r in upstream.replies_sent)
    assert sum(1 for c in complete if c["purpose"] == "main") == n_convs * n_turns
    # the store URL's password: in no log line of either replica, through the restart's errors too
    assert "postgresql://" in a.stderr() + b.stderr()  # the banner names the store (masked)
    assert password not in a.stderr() + b.stderr()
