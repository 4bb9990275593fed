"""Two proxy replicas on one PostgreSQL store: real proxy processes, the OpenAI SDK, one scripted
upstream, a private PostgreSQL.

- The replica tests of test_replicas.py, run here on PostgreSQL (their `replicas` fixture is
  this module's): parallel conversations alternating replicas while compactions run, one
  conversation interleaved with its own compaction, and a replica SIGKILLed while its summary
  call is in flight (the other compacts once the dead replica's lease has expired).
- PostgreSQL itself restarted (an immediate shutdown: every connection cut) while conversations
  run on both replicas -- the store waits the restart out (`failover_wait_ms`), clients would
  retry a 503 as agents do --, then a replica killed -9 during its summary call and restarted:
  every turn succeeds, every history is complete and ordered on one branch with one active
  checkpoint, and the ledger equals the upstream's usage: zero acknowledged events or call
  records lost; the URL's password in no log line.
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
from tests.e2e.test_rewriting import SMALL_POLICY, SUMMARY, WINDOW, is_summary_request
from tests.support.postgres_server import PostgresServer
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

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


def test_postgres_restarted_and_a_replica_killed_mid_run(proxy, own_postgres, upstream, api_key, monkeypatch):
    """Phase 1: six conversations on both replicas, PostgreSQL restarted (immediate shutdown)
    mid-run. Phase 2: one of them goes on through replica B until B's summary call is in flight
    (held upstream); B is killed -9 and restarted, and the conversation goes on through both until
    a summary made after the kill is active (the dead replica's lease expired first). Then every
    history, checkpoint and call record is checked against what the clients and upstream saw."""
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    password = "pg-secret-" + uuid.uuid4().hex  # trust authentication: carried, never checked
    # A restart on this loaded machine may take longer than the default wait: wait it out.
    a, b = _pair(proxy, own_postgres.url(password=password) + "?pool_max=4&failover_wait_ms=30000")
    upstream.responder = SlowSummaries(0.3)
    n_convs, n_turns = 6, 14
    done_turns = [0] * n_convs
    restart_at = threading.Event()

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

    def restart() -> None:
        assert restart_at.wait(timeout=180), "the conversations never got going"
        own_postgres.kill()  # immediate shutdown: no checkpoint, every connection cut
        time.sleep(1.0)
        own_postgres.start()  # recovery replays the WAL

    with ThreadPoolExecutor(n_convs + 1) as pool:
        restarter = pool.submit(restart)
        results = list(pool.map(drive, range(n_convs)))
        restarter.result()
    print(f"\nrestart: {sum(r for _, _, r in results)} turns answered 5xx and were retried")
    convs = [conv for _, conv, _ in results]
    assert len(set(convs)) == n_convs
    try:
        settle_ledger(a, upstream, convs)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_ledger_state(a, b, upstream, convs)}") from None
    assert summary_count(upstream) >= n_convs, "the small window should have forced compactions"

    # Phase 2: replica B killed -9 while its summary call is held upstream, then restarted.
    held: list[Reply] = []

    def respond(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body) and not held:
            held.append(Reply(content=SUMMARY, delay_before_headers=3600))
            return held[0]
        return None

    upstream.responder = respond
    messages, conv, _ = results[0]
    turns = n_turns
    while not held:
        assert turns < n_turns + 40, "B never started a compaction"
        messages.append({"role": "user", "content": filler(0, turns)})
        text, _conv, _r = turn_retrying(b, api_key, messages, stream=turns % 2 == 0)
        messages.append({"role": "assistant", "content": text})
        turns += 1
    b.wait_calls(conv, turns + summary_calls(a, conv))  # B's call records are in before it dies
    assert b.proc is not None
    b.proc.kill()  # SIGKILL mid-summary: its compaction lease is never released
    b.proc.wait(timeout=10)
    killed_at = time.time()
    b.proc = None
    b.start()

    def one_more_turn_then_compacted() -> bool:
        nonlocal turns
        messages.append({"role": "user", "content": filler(0, turns)})
        text, again, _r = turn_retrying((a, b)[turns % 2], api_key, messages, stream=turns % 2 == 0)
        assert again == conv and text == f"ok: {filler(0, turns)}"
        messages.append({"role": "assistant", "content": text})
        turns += 1
        time.sleep(0.5)
        checkpoints = a.admin_json(f"conversations/{conv}/checkpoints")["data"]
        return any(c["status"] == "active" and c["created_at"] > killed_at for c in checkpoints)

    wait_until(one_more_turn_then_compacted, timeout=60, interval=0, what="a compaction after B's lease expired")
    results[0] = (messages, conv, 0)

    answered = [r for r in upstream.replies_sent if r is not held[0]]  # the held one never answered
    calls = settle_answered(a, answered, convs)
    for messages, conv, _ in results:
        assert len(a.conversation(conv)["branches"]) == 1
        stored_events = a.events(conv)
        assert [e["seq"] for e in stored_events] == list(range(1, len(stored_events) + 1))
        assert stored(stored_events) == history(messages)
        assert b.events(conv) == stored_events
        checkpoints = a.admin_json(f"conversations/{conv}/checkpoints")["data"]
        assert len([c for c in checkpoints if c["status"] == "active"]) == 1, checkpoints
    # the ledger: one complete call record per answered upstream reply, the same token sums
    failed = [c for c in calls if c["status"] != "complete"]
    assert all(c["usage"]["input_total"] is None for c in failed), failed
    complete = [c for c in calls if c["status"] == "complete"]
    assert len(complete) == len(answered) == len({c["id"] for c in complete})
    assert sum(c["usage"]["input_total"] for c in complete) == sum(reported_usage(r)[0] for r in answered)
    assert sum(c["usage"]["output"] for c in complete) == sum(reported_usage(r)[1] for r in answered)
    assert sum(1 for c in complete if c["purpose"] == "main") == n_convs * n_turns + turns - n_turns
    # the store URL's password: in no log line of either replica, through the restart's errors too
    logs = a.stderr() + b.stderr()
    assert "postgresql://" in logs and password not in logs


def _ledger_state(a: Any, b: Any, upstream: Any, convs: list[str]) -> str:
    """What a ledger that did not settle holds, and the replicas' store errors, for the failure."""
    calls = [c for conv in convs for c in a.admin_json(f"conversations/{conv}/calls", params={"limit": 1000})["data"]]
    complete = sum(1 for c in calls if c["status"] == "complete")
    undone = sum(1 for r in upstream.replies_sent if not r.done.is_set())
    errors = [line for p in (a, b) for line in p.stderr().splitlines() if "store" in line.lower()][-10:]
    return (
        f"{complete} complete of {len(calls)} records, {len(upstream.replies_sent)} replies ({undone} undone): {errors}"
    )


def summary_calls(p: Any, conv: str) -> int:
    return sum(1 for c in p.calls(conv) if c["purpose"] != "main")


def settle_answered(a: Any, answered: list[Reply], convs: list[str], timeout: float = 60) -> list[dict[str, Any]]:
    """Wait until every reply of `answered` is done and has its complete call record."""
    calls: list[dict[str, Any]] = []

    def settled() -> bool:
        calls[:] = [
            c for conv in convs for c in a.admin_json(f"conversations/{conv}/calls", params={"limit": 1000})["data"]
        ]
        complete = sum(1 for c in calls if c["status"] == "complete")
        return complete == len(answered) and all(r.done.is_set() for r in answered)

    wait_until(settled, timeout=timeout, interval=0.2, what="every answered upstream reply to have its call record")
    return calls
