"""Two proxy replicas on a real local Redis Cluster (three primaries, three replicas; the session's
`redis_cluster`), one scripted upstream.

- Eight conversations driven in parallel, each turn on the other replica than the previous one,
  under a small window so that compactions run. Mid-run one primary (the one holding the first
  conversation) is SIGKILLed; its replica is promoted. Clients retry 503s, as agents do. Every
  turn eventually succeeds; every history is complete and ordered, one branch, one active
  checkpoint; the ledger is exactly the upstream's (the store waits for a replica's ack, and call
  records retry through the failover); the conversations' keys are on at least two primaries;
  DELETE leaves no key of theirs on any node.
- Acknowledged writes that asynchronous replication lost (the replica was cut off, then its
  primary killed) are healed by the client's next turn, which re-sends them.
- An answer whose entry in the tenant-wide identity index lives on a primary that just died
  (not its conversation's) is stored once the replica took over: the entry waits the failover
  out like the scripts.

A conversation's second turn is sent once its first answer is stored (`answer_stored`): the
answer and the stamp land after the client has the answer, and a second turn that reaches the
other replica before them matches one unstamped message; it waits for the stamp, but only
`ingest.FIRST_ANSWER_WAIT` (a commit on this loaded machine may take longer), and then founds a
new conversation (docs/storage.md, Storage and durability). Later turns need no wait: they match two or
more messages.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from proxy import identify
from proxy.store.redis.keys import Layout
from tests.e2e.test_replicas import MODEL, SlowSummaries, filler, history, reported_usage, stored, summary_count
from tests.e2e.test_rewriting import SMALL_POLICY, WINDOW
from tests.support.redis_server import RedisCluster, RedisServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

RETRY_FOR = 60.0  # a client gives up on a turn after this long of 503s


@pytest.fixture
def cluster_proxies(proxy, redis_cluster, upstream, monkeypatch):
    """Two proxy processes on the cluster (own key prefix) and one upstream; returns (a, b, prefix)."""

    def make(**store_options: str) -> tuple[Any, Any, str]:
        monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
        prefix = f"cl-{uuid.uuid4().hex[:8]}:"
        query = "&".join(f"{k}={v}" for k, v in {"prefix": prefix, **store_options}.items())
        store = f"{redis_cluster.url}/?{query}"
        a = proxy(fresh=True, store=store, policies={"default": SMALL_POLICY}, compaction_lease_seconds=3)
        b = proxy(fresh=True, store=store, policies={"default": SMALL_POLICY}, compaction_lease_seconds=3)
        return a, b, prefix

    return make


@pytest.fixture
def healthy_cluster(redis_cluster: RedisCluster) -> Iterator[RedisCluster]:
    """The session cluster, given back with every node running and three healthy primaries."""
    yield redis_cluster
    for node in redis_cluster.nodes:
        if node.proc is None:
            node.start()
    redis_cluster.wait_healthy()


def post_turn(p: Any, api_key: str, messages: list[dict[str, Any]], stream: bool) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "stream": stream}
    return p.post_chat(api_key, body, timeout=60)


def turn_retrying(p: Any, api_key: str, messages: list[dict[str, Any]], stream: bool) -> tuple[str, str, int]:
    """One turn, retried on 503 (the store failing over) like an agent's client; returns
    (assistant text, conversation id, how many 503s it took)."""
    deadline = time.monotonic() + RETRY_FOR
    refused = 0
    while True:
        r = post_turn(p, api_key, messages, stream)
        if r.status_code == 200:
            return text_of(r, stream), r.headers["x-conversation-id"], refused
        # 503: the store failing over. A 502 before any answer is the loaded test machine's
        # upstream hop (a reset connection), retried by agents alike; counted apart in the ledger.
        assert r.status_code in (502, 503), (r.status_code, r.text)
        if r.status_code == 503:
            assert r.json()["error"]["type"] == "service_unavailable", r.text
        refused += 1
        assert time.monotonic() < deadline, f"still 503 after {RETRY_FOR} s: {r.text}"
        time.sleep(0.2)


def answer_stored(p: Any, conv: str, text: str, timeout: float = 10) -> list[dict[str, Any]]:
    """Wait until `text`, a turn's answer, is the conversation's last stored event (it is written
    after the client has it; a read answered 503 during a failover counts as not yet); returns
    the events."""

    def events() -> list[dict[str, Any]] | None:
        r = p.admin(f"conversations/{conv}/events", params={"limit": 1000})
        data = r.json()["data"] if r.status_code == 200 else []
        return data if data and data[-1]["message"].get("content") == text else None

    return wait_until(events, timeout=timeout, what=f"the answer {text[:40]!r} stored")


def text_of(r: httpx.Response, stream: bool) -> str:
    if not stream:
        return r.json()["choices"][0]["message"]["content"] or ""
    parts = []
    for line in r.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            parts.extend(c["delta"].get("content") or "" for c in chunk.get("choices", []))
    return "".join(parts)


def conv_key(prefix: str, conv: str) -> str:
    return Layout(prefix).one(conv, "conv")


def members(client: Any, key: str) -> list[str]:
    """What a key holds that could name a conversation: members, fields, or its value."""
    kind = client.type(key)
    if kind == "set":
        return list(client.smembers(key))
    if kind == "zset":
        return list(client.zrange(key, 0, -1))
    if kind == "hash":
        return list(client.hkeys(key))
    return [client.get(key)] if kind == "string" else []


def test_two_replicas_survive_a_primary_killed_mid_run(cluster_proxies, healthy_cluster, upstream, api_key):
    cluster = healthy_cluster
    a, b, prefix = cluster_proxies(wait_replicas="1", wait_timeout_ms="500")
    upstream.responder = SlowSummaries(0.3)
    n_convs, n_turns, kill_after = 8, 12, 4
    first_conv: list[str] = []
    progress = threading.Event()
    done_turns = [0] * n_convs
    timings: list[tuple[int, float, float]] = []  # (conversation, turn started, turn done)
    killed: dict[str, Any] = {}
    conv_of = [""] * n_convs

    def drive(i: int) -> tuple[list[dict[str, Any]], str, int]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": f"Cluster agent {i}. Be brief."}]
        conv_ids, refused = set(), 0
        for t in range(n_turns):
            messages.append({"role": "user", "content": filler(i, t)})
            started = time.monotonic()
            text, conv, r = turn_retrying((a, b)[(t + i) % 2], api_key, messages, stream=t % 3 == 0)
            timings.append((i, started, time.monotonic()))
            assert text == f"ok: {filler(i, t)}"
            if t == 0:
                answer_stored(a, conv, text)
            refused += r
            conv_ids.add(conv)
            if not first_conv:
                first_conv.append(conv)
            conv_of[i] = conv
            messages.append({"role": "assistant", "content": text})
            done_turns[i] = t + 1
            if min(done_turns) >= kill_after:
                progress.set()
        assert len(conv_ids) == 1, f"conversation {i} split into {conv_ids}"
        return messages, conv_ids.pop(), refused

    def kill_a_primary() -> None:
        assert progress.wait(timeout=120), "the conversations never got going"
        victim = cluster.node_of(conv_key(prefix, first_conv[0]))
        killed["homed"] = {i for i, conv in enumerate(conv_of) if cluster.node_of(conv_key(prefix, conv)) is victim}
        killed["node"] = victim
        killed["at"] = time.monotonic()
        victim.kill()  # SIGKILL: its replica must take over
        wait_until(lambda: len(cluster.primaries()) == 3, timeout=30, what="a replica promoted")
        killed["promoted"] = time.monotonic()
        cluster.restart(victim)  # back, as a replica of the promoted node

    with ThreadPoolExecutor(n_convs + 1) as pool:
        killer = pool.submit(kill_a_primary)
        results = list(pool.map(drive, range(n_convs)))
        killer.result()
    victim: RedisServer = killed["node"]
    assert victim.port not in [n.port for n in cluster.primaries()]
    convs = [conv for _, conv, _ in results]
    assert len(set(convs)) == n_convs
    # The pause: from the kill to the first turn, begun after it, of a conversation on the dead primary.
    first = min(done for i, begun, done in timings if begun >= killed["at"] and i in killed["homed"])
    print(
        f"\nfailover: {sum(r for _, _, r in results)} turns answered 503 and retried; replica promoted "
        f"{killed['promoted'] - killed['at']:.2f} s after the kill; first turn on its slots done "
        f"{first - killed['at']:.2f} s after the kill"
    )

    calls = settle_ledger(a, upstream, convs)
    assert summary_count(upstream) >= n_convs, "the small window should have forced compactions"
    for k, (messages, conv, _) in enumerate(results):
        reader, other = (a, b)[k % 2], (a, b)[(k + 1) % 2]
        assert len(reader.conversation(conv)["branches"]) == 1
        events = reader.events(conv)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert stored(events) == history(messages)
        assert other.events(conv) == events
        checkpoints = reader.admin_json(f"conversations/{conv}/checkpoints")["data"]
        assert len([c for c in checkpoints if c["status"] == "active"]) == 1, checkpoints

    # the ledger: one complete call record per upstream reply, the same token sums; any other
    # record is an attempt that never got an answer (a 502 above), with no usage
    failed = [c for c in calls if c["status"] != "complete"]
    assert all(c["usage"]["input_total"] is None for c in failed), failed
    calls = [c for c in calls if c["status"] == "complete"]
    assert len(calls) == len(upstream.replies_sent) == len({c["id"] for c in calls})
    assert sum(c["usage"]["input_total"] for c in calls) == sum(reported_usage(r)[0] for r in upstream.replies_sent)
    assert sum(c["usage"]["output"] for c in calls) == sum(reported_usage(r)[1] for r in upstream.replies_sent)
    assert sum(1 for c in calls if c["purpose"] == "main") == n_convs * n_turns

    # spread: the conversations live on more than one primary
    homes = {cluster.node_of(conv_key(prefix, conv)).port for conv in convs}
    assert len(homes) >= 2, homes

    # DELETE leaves no key of theirs on any node, nor an entry naming them in a shared key
    for conv in convs:
        assert a.admin(f"conversations/{conv}", method="DELETE").status_code in (200, 204)
    leftovers = []
    for node in cluster.primaries():
        client = node.client()
        try:
            for key in client.scan_iter(match=prefix + "*", count=1000):
                if key.endswith(":tombstones"):
                    continue  # the fence that keeps a deleted conversation deleted
                content = members(client, key)
                if any(conv[2:] in key or any(conv in str(v) for v in content) for conv in convs):
                    leftovers.append((node.port, key))
        finally:
            client.close()
    assert leftovers == []


def test_writes_lost_by_async_replication_are_healed_by_the_next_turn(
    cluster_proxies, healthy_cluster, upstream, api_key
):
    cluster = healthy_cluster
    a, b, prefix = cluster_proxies()
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Healing agent."}]
    conv = ""
    for t in range(3):
        messages.append({"role": "user", "content": f"turn {t}"})
        text, conv, _ = turn_retrying((a, b)[t % 2], api_key, messages, stream=False)
        messages.append({"role": "assistant", "content": text})
        answer_stored(a, conv, text)  # with its call record, in one script
    primary = cluster.node_of(conv_key(prefix, conv))
    replica = replica_of(cluster, primary)
    assert replica.proc is not None
    # everything so far on the replica (asynchronous replication: usually, not certainly)
    wait_until(lambda: caught_up(primary, replica), what="the replica caught up with its primary")

    # Cut the replica off (stopped, its link closed), write one more acknowledged turn on the
    # primary alone, then crash the primary: the turn exists nowhere any more.
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        client = primary.client()
        try:
            client.execute_command("CLIENT", "KILL", "TYPE", "replica")
        finally:
            client.close()
        messages.append({"role": "user", "content": "turn 3, acknowledged then lost"})
        text, conv3, _ = turn_retrying(a, api_key, messages, stream=False)
        assert conv3 == conv
        messages.append({"role": "assistant", "content": text})
        assert len(answer_stored(a, conv, text)) == 8  # the turn stored on the primary alone
        primary.kill()
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    wait_until(lambda: replica.port in [n.port for n in cluster.primaries()], timeout=30, what="the replica promoted")

    def stored_now() -> list[dict[str, Any]]:
        r = a.admin(f"conversations/{conv}/events", params={"limit": 1000})
        return r.json()["data"] if r.status_code == 200 else []

    events = wait_until(stored_now, timeout=30, ignore=(httpx.HTTPError,), what="the conversation readable again")
    lost = 8 - len(events)
    assert lost == 2, f"expected the unreplicated turn (2 events) to be lost, {len(events)} events stored"
    assert stored(events) == history(messages[:-2])
    # its call record too: the ledger cannot be re-sent (wait_replicas is the remedy); any other
    # record is an attempt answered 502 (see turn_retrying), with no usage
    calls = a.calls(conv)
    assert [c["response"]["content"] for c in calls if c["status"] == "complete"] == [
        m["content"] for m in messages[2:-2:2]
    ]
    assert all(c["usage"]["input_total"] is None for c in calls if c["status"] != "complete"), calls
    print(f"\nlost by async replication: {lost} acknowledged events and 1 call record")

    # The agent's next turn re-sends the whole history, the lost turn included: it is stored again.
    messages.append({"role": "user", "content": "turn 4"})
    text, conv2, _ = turn_retrying(b, api_key, messages, stream=True)
    assert conv2 == conv
    messages.append({"role": "assistant", "content": text})
    healed = answer_stored(b, conv, text)
    assert stored(healed) == history(messages)
    assert [e["seq"] for e in healed] == list(range(1, 11))
    assert len(b.conversation(conv)["branches"]) == 1


def test_an_answer_whose_index_entry_is_on_a_failing_primary_is_stored(
    cluster_proxies, healthy_cluster, upstream, api_key
):
    """The answer's entry in the tenant-wide identity index (no hash tag: any slot) lives on
    another primary than its conversation, and that primary dies just before the turn: the
    turn's own writes succeed, its answer goes out, and the entry, written after that, waits for
    the failover like the conversation's scripts -- the answer (and the turn's stamp, in the same
    script) is stored."""
    cluster = healthy_cluster
    a, _, prefix = cluster_proxies()
    tag = uuid.uuid4().hex[:8]
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"{tag} agent"}, {"role": "user", "content": tag}]
    text, conv, _ = turn_retrying(a, api_key, messages, stream=False)
    messages.append({"role": "assistant", "content": text})
    answer_stored(a, conv, text)

    # Doomed: a primary holding neither the conversation nor the first answer's entry (read
    # before the next turn is appended); the next user message's entry is not on it either, the
    # entry of that message's answer ("ok: <it>") is.
    layout = Layout(prefix)
    salt_key = layout.plain("meta", "tenant_salt")
    client = cluster.node_of(salt_key).client()
    try:
        tenant = identify.tenant_of(api_key, bytes.fromhex(client.get(salt_key)))
    finally:
        client.close()

    def entry_node(parent: str, message: dict[str, Any]) -> tuple[str, RedisServer]:
        chained = identify.message_hash(parent, message)
        return chained, cluster.node_of(layout.identity(tenant, chained))

    chain = identify.chain(tenant, messages[1:])
    busy = {cluster.node_of(conv_key(prefix, conv)).port, entry_node(chain[-2], messages[-1])[1].port}
    doomed = next(n for n in cluster.primaries() if n.port not in busy)
    for k in itertools.count():
        user = {"role": "user", "content": f"{tag} turn 1 #{k}"}
        chained, node = entry_node(chain[-1], user)
        if (
            node is not doomed
            and entry_node(chained, {"role": "assistant", "content": f"ok: {user['content']}"})[1] is doomed
        ):
            break
    messages.append(user)

    doomed.kill()
    r = post_turn(a, api_key, messages, stream=False)
    assert r.status_code == 200, r.text  # every write before the answer is on a live primary
    answer = text_of(r, False)
    assert answer == f"ok: {user['content']}"
    messages.append({"role": "assistant", "content": answer})
    wait_until(
        lambda: doomed.port not in [n.port for n in cluster.primaries()] and len(cluster.primaries()) == 3,
        timeout=30,
        what="the doomed primary's replica promoted",
    )
    events = answer_stored(a, conv, answer, timeout=20)  # its entry written once the replica took over
    assert stored(events) == history(messages)
    assert len(a.conversation(conv)["branches"]) == 1


def settle_ledger(a: Any, upstream: Any, convs: list[str], timeout: float = 60) -> list[dict[str, Any]]:
    """Wait until background compactions are over and every upstream reply has its complete call
    record (like test_replicas' settle, counting complete records only)."""
    calls: list[dict[str, Any]] = []

    def settled() -> list[dict[str, Any]] | None:
        sent = len(upstream.replies_sent)
        calls[:] = [
            c for conv in convs for c in a.admin_json(f"conversations/{conv}/calls", params={"limit": 1000})["data"]
        ]
        complete = sum(1 for c in calls if c["status"] == "complete")
        if complete == sent and all(r.done.is_set() for r in upstream.replies_sent):
            time.sleep(0.5)  # nothing new started meanwhile?
            if len(upstream.replies_sent) == sent:
                return list(calls)
        return None

    return wait_until(settled, timeout=timeout, interval=0.2, what="every upstream reply to have its call record")


def caught_up(primary: RedisServer, replica: RedisServer) -> bool:
    """The replica has applied every write the primary had when asked."""
    offsets = []
    for node, field in ((primary, "master_repl_offset"), (replica, "slave_repl_offset")):
        client = node.client()
        try:
            offsets.append(int(client.info("replication")[field]))
        finally:
            client.close()
    return offsets[1] >= offsets[0]


def replica_of(cluster: RedisCluster, primary: RedisServer) -> RedisServer:
    client = primary.client()
    try:
        info = client.info("replication")
    finally:
        client.close()
    port = int(info["slave0"]["port"])
    return next(n for n in cluster.nodes if n.port == port)
