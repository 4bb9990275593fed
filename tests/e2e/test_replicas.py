"""Several replicas on one Redis store: two real proxy processes, one private redis-server, one
scripted upstream.

- Conversations driven in parallel, each turn sent to the other replica than the previous one
  (the client re-sends the full history each turn, as agents do), under a small window so that
  compactions run in the background on one replica while the next turn is served by the other.
  Afterwards the stored history, branches, checkpoints and ledger must be exactly what the clients
  and the upstream saw.
- Redis stopped during traffic: every request answers 503 in OpenAI's error shape within seconds;
  after Redis comes back (AOF on, same directory) the same conversations continue.
- A replica SIGKILLed while its compaction is in flight: the other replica carries the
  conversation on, and compacts it itself once the dead replica's lease has expired.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.e2e.test_rewriting import SMALL_POLICY, SUMMARY, WINDOW, is_summary_request
from tests.support.redis_server import RedisServer
from tests.support.upstream_server import Reply, UpstreamServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "gpt-replicas"


@pytest.fixture
def replica_redis() -> Iterator[RedisServer]:
    """A private redis-server with the append-only file on, so a stop/start keeps the data
    (the tenant salt, the history, the ledger) like a production Redis must."""
    server = RedisServer(persistent=True).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def replicas(proxy, replica_redis, upstream, monkeypatch):
    """Two proxy processes on the same Redis store (own key prefix) and the same upstream."""
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    store = f"{replica_redis.url}?prefix=replicas-{uuid.uuid4().hex[:8]}:"
    # A short compaction lease, so a killed replica's lease expires within the test.
    a = proxy(fresh=True, store=store, policies={"default": SMALL_POLICY}, compaction_lease_seconds=3)
    b = proxy(fresh=True, store=store, policies={"default": SMALL_POLICY}, compaction_lease_seconds=3)
    return a, b


class SlowSummaries:
    """Responder: summaries held ``delay`` seconds (so the next turn, on the other replica, overlaps
    the compaction), every other request answered ``"ok: <last user text>"``."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.replies: list[Reply] = []

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body):
            reply = Reply(content=SUMMARY, delay_before_headers=self.delay)
            self.replies.append(reply)
            return reply
        return None

    def in_flight(self) -> bool:
        return any(not r.done.is_set() for r in list(self.replies))


def filler(conv: int, turn: int) -> str:
    # ~250 tokens per user turn: a 6k window compacts after a dozen turns
    return f"conversation {conv} turn {turn}: " + " ".join(f"w{conv}_{turn}_{k}" for k in range(80))


def chat(p: Any, api_key: str, messages: list[dict[str, Any]], stream: bool) -> tuple[str, str]:
    """One turn; returns (assistant text, conversation id)."""
    client = p.client(api_key, timeout=60)
    if stream:
        with client.chat.completions.with_streaming_response.create(model=MODEL, messages=messages, stream=True) as raw:
            conv = raw.headers["x-conversation-id"]
            text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        return text, conv
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    return raw.parse().choices[0].message.content or "", raw.headers["x-conversation-id"]


def history(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """What the store keeps as events: every message but the system prompt (stored as the pinned prefix)."""
    return [(m["role"], m["content"]) for m in messages if m["role"] != "system"]


def stored(events: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(e["role"], e["message"].get("content")) for e in events]


def reported_usage(reply: Reply) -> tuple[int, int]:
    if reply.sent_events:
        usage = [c["usage"] for c in reply.sent_chunks() if c.get("usage")][-1]
    else:
        usage = reply.sent_json()["usage"]
    return usage["prompt_tokens"], usage["completion_tokens"]


def settle(a: Any, b: Any, upstream: UpstreamServer, convs: list[str], timeout: float = 30) -> list[dict]:
    """Wait until background compactions are over and every upstream reply has its call record."""
    calls: list[dict[str, Any]] = []

    def settled() -> list[dict[str, Any]] | None:
        sent = len(upstream.replies_sent)
        calls[:] = [
            c for conv in convs for c in a.admin_json(f"conversations/{conv}/calls", params={"limit": 1000})["data"]
        ]
        if len(calls) == sent == len(upstream.chat_requests) and all(r.done.is_set() for r in upstream.replies_sent):
            time.sleep(0.5)  # nothing new started meanwhile?
            if len(upstream.replies_sent) == sent:
                return list(calls)
        return None

    try:
        return wait_until(settled, timeout=timeout, interval=0.2, what="every upstream reply to have its call record")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; {len(calls)} call records for {len(upstream.replies_sent)} upstream replies"
        ) from None


def test_parallel_conversations_alternating_replicas(replicas, upstream, api_key):
    a, b = replicas
    upstream.responder = SlowSummaries(0.4)
    n_convs, n_turns = 4, 22

    def drive(i: int) -> tuple[list[dict[str, Any]], str]:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": f"You are agent number {i}. Be brief."},
        ]
        conv_ids = set()
        for t in range(n_turns):
            messages.append({"role": "user", "content": filler(i, t)})
            # alternate replicas; odd conversations start on B; every third turn streams
            p = (a, b)[(t + i) % 2]
            text, conv = chat(p, api_key, messages, stream=t % 3 == 0)
            assert text == f"ok: {filler(i, t)}"
            conv_ids.add(conv)
            messages.append({"role": "assistant", "content": text})
        assert len(conv_ids) == 1, f"conversation {i} split into {conv_ids}"
        return messages, conv_ids.pop()

    with ThreadPoolExecutor(n_convs) as pool:
        results = list(pool.map(drive, range(n_convs)))
    convs = [conv for _, conv in results]
    assert len(set(convs)) == n_convs

    calls = settle(a, b, upstream, convs)
    assert summary_count(upstream) >= n_convs, "the small window should have forced compactions"

    for k, (messages, conv) in enumerate(results):
        reader = (a, b)[k % 2]
        other = (a, b)[(k + 1) % 2]
        # every conversation: one branch, the complete history in order, seen alike from both replicas
        branches = reader.conversation(conv)["branches"]
        assert len(branches) == 1, branches
        events = reader.events(conv)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert stored(events) == history(messages)
        assert other.events(conv) == events
        checkpoints = reader.admin_json(f"conversations/{conv}/checkpoints")["data"]
        active = [c for c in checkpoints if c["status"] == "active"]
        assert len(active) == 1, checkpoints

    # the ledger: exactly one call record per upstream reply, and the same token sums
    assert len(calls) == len(upstream.replies_sent)
    assert len({c["id"] for c in calls}) == len(calls)
    prompt = sum(reported_usage(r)[0] for r in upstream.replies_sent)
    completion = sum(reported_usage(r)[1] for r in upstream.replies_sent)
    assert sum(c["usage"]["input_total"] for c in calls) == prompt
    assert sum(c["usage"]["output"] for c in calls) == completion
    assert sum(1 for c in calls if c["purpose"] == "main") == n_convs * n_turns


def summary_count(upstream: UpstreamServer) -> int:
    return sum(1 for r in upstream.chat_requests if is_summary_request(r.body))


def test_one_conversation_interleaved_with_its_own_compaction(replicas, upstream, api_key):
    """A compaction started by one replica is still running (its summary held upstream) while the
    next turns of the same conversation stream through the other replica."""
    a, b = replicas
    upstream.responder = summaries = SlowSummaries(1.0)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Interleaving agent."}]
    overlapped = 0
    convs = set()
    for t in range(22):
        messages.append({"role": "user", "content": filler(99, t)})
        p = (a, b)[t % 2]
        overlapped += summaries.in_flight()
        text, conv = chat(p, api_key, messages, stream=True)
        convs.add(conv)
        messages.append({"role": "assistant", "content": text})
    assert len(convs) == 1
    conv = convs.pop()
    calls = settle(a, b, upstream, [conv])
    assert overlapped >= 1, "no turn overlapped a compaction"
    events = b.events(conv)
    assert stored(events) == history(messages)
    assert len(a.conversation(conv)["branches"]) == 1
    active = [c for c in a.admin_json(f"conversations/{conv}/checkpoints")["data"] if c["status"] == "active"]
    assert len(active) == 1
    assert len(calls) == len(upstream.replies_sent)


def assert_openai_503(r: httpx.Response) -> None:
    assert r.status_code == 503, (r.status_code, r.text)
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and isinstance(err["message"], str)
    assert err["type"] == "service_unavailable", err


def test_redis_outage_503_then_conversations_continue(replicas, replica_redis, upstream, api_key):
    a, b = replicas
    histories = [[{"role": "system", "content": f"Outage agent {i}."}] for i in range(3)]
    conv_ids: list[str] = [""] * 3

    def turn(i: int, p: Any, t: int) -> str:
        histories[i].append({"role": "user", "content": f"agent {i} turn {t}"})
        text, conv = chat(p, api_key, histories[i], stream=t % 2 == 0)
        histories[i].append({"role": "assistant", "content": text})
        return conv

    for t in range(3):
        for i in range(3):
            conv_ids[i] = turn(i, (a, b)[(i + t) % 2], t)

    replica_redis.stop()
    upstream_before = len(upstream.chat_requests)
    for t in range(2):
        for i, p in enumerate((a, b, a)):
            body = {
                "model": MODEL,
                "messages": histories[i] + [{"role": "user", "content": "during outage"}],
                "stream": t == 1,
            }
            started = time.monotonic()
            r = p.post_chat(api_key, body, timeout=30)
            elapsed = time.monotonic() - started
            assert elapsed < 15, f"the 503 took {elapsed:.1f} s: the proxy waited on the stopped Redis"
            assert_openai_503(r)
    assert httpx.get(f"{a.url}/healthz", timeout=5).status_code == 503
    # nothing reached the upstream while the history could not be stored
    assert len(upstream.chat_requests) == upstream_before

    replica_redis.start()
    for t in range(3, 6):
        for i in range(3):
            assert turn(i, (a, b)[(i + t) % 2], t) == conv_ids[i]
    for i in range(3):
        events = a.events(conv_ids[i])
        assert stored(events) == history(histories[i])
        assert len(b.conversation(conv_ids[i])["branches"]) == 1


def test_replica_killed_during_its_compaction(replicas, upstream, api_key):
    """kill -9 of the replica whose compaction is in flight (its summary held upstream): the other
    replica carries the conversation on; nothing is lost or duplicated, and the conversation ends
    with exactly one active checkpoint."""
    a, b = replicas
    summaries: list[Reply] = []

    def respond(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body):
            # the first summary (A's) is held until the test is over; later ones answer at once
            reply = Reply(content=SUMMARY, delay_before_headers=60 if not summaries else 0)
            summaries.append(reply)
            return reply
        return None

    upstream.responder = respond
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Agent surviving a crash."}]
    conv = None
    t = 0
    while not summaries:
        assert t < 40, "A never started a compaction"
        messages.append({"role": "user", "content": filler(7, t)})
        text, conv = chat(a, api_key, messages, stream=t % 2 == 0)
        messages.append({"role": "assistant", "content": text})
        t += 1
    a.wait_calls(conv, t)  # A's call records are in before it dies
    assert a.proc is not None
    a.proc.kill()  # SIGKILL: no shutdown, the compaction's lease (if any) is never released
    a.proc.wait(timeout=10)

    # B carries on at once; its own compaction can start only once A's lease has expired (the
    # lease TTL, 3 s here: a SIGKILLed replica never releases it), so keep the agent going until then.
    checkpoints: list[dict[str, Any]] = []

    def one_more_turn_then_active() -> list[dict[str, Any]]:
        nonlocal t
        messages.append({"role": "user", "content": filler(7, t)})
        text, conv2 = chat(b, api_key, messages, stream=t % 2 == 0)
        assert conv2 == conv and text == f"ok: {filler(7, t)}"
        messages.append({"role": "assistant", "content": text})
        t += 1
        time.sleep(0.5)
        checkpoints[:] = b.admin_json(f"conversations/{conv}/checkpoints")["data"]
        return [c for c in checkpoints if c["status"] == "active"]

    active = wait_until(one_more_turn_then_active, timeout=30, interval=0, what="B to compact after A's lease expired")
    assert len(active) == 1, checkpoints
    events = b.events(conv)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert stored(events) == history(messages)
    assert len(b.conversation(conv)["branches"]) == 1
    mains = [c for c in b.calls(conv) if c["purpose"] == "main"]
    assert len(mains) == t
    assert len(summaries) >= 2  # A's (lost with it) and B's
