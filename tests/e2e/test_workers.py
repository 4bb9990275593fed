"""`ctxproxy serve --workers 2` on one SQLite file: both worker processes serve turns of the same
conversations, whose stored history stays one ordered branch, and compaction stays single-flight
per branch across the processes (the store's lease): a summary is never asked for while another
one of the same conversation is still in flight, even when the next turns land on the other
worker."""

from __future__ import annotations

import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_replicas import chat, filler, history, settle, stored
from tests.e2e.test_rewriting import SMALL_POLICY, SUMMARY, WINDOW, is_summary_request
from tests.support.proxy_process import ProxyProcess, deep_merge, default_config, subprocess_env
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "gpt-workers"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def _workers(pid: int) -> list[int]:
    """The spawned worker processes of the supervisor `pid` (not multiprocessing's resource tracker)."""
    children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return [c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


class Summaries:
    """Responder: summaries held 0.8 s; counts, per conversation, summaries asked for while
    another of the same conversation was still in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight: dict[str, list[Reply]] = {}
        self.overlaps = 0
        self.count = 0

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        if not is_summary_request(body):
            return None
        key = _conversation_of(body)
        reply = Reply(content=SUMMARY, delay_before_headers=0.8)
        with self.lock:
            running = [r for r in self.in_flight.get(key, []) if not r.done.is_set()]
            self.overlaps += bool(running)
            self.in_flight[key] = [*running, reply]
            self.count += 1
        return reply


def _conversation_of(body: dict[str, Any]) -> str:
    """Which driven conversation a summary request is about (its text names it)."""
    text = " ".join(str(m.get("content", "")) for m in body["messages"])
    for i in range(10):
        if f"conversation {i} turn" in text:
            return str(i)
    return "?"


@pytest.fixture
def two_workers(upstream, closed_port, monkeypatch, tmp_path_factory):
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    config = deep_merge(default_config(upstream.base_url, closed_port), {"policies": {"default": SMALL_POLICY}})
    workdir = Path(tempfile.mkdtemp(prefix="workers-", dir=tmp_path_factory.getbasetemp()))
    p = ProxyProcess(config, workdir, subprocess_env(), args=["--workers", "2"]).start(timeout=120)
    try:
        # healthz answers once one worker is up; wait for the other one too
        wait_until(
            lambda: p.stderr().count("Application startup complete.") >= 2, timeout=120, what="both workers to start"
        )
        yield p
    finally:
        p.stop()


def test_two_workers_one_history_and_single_flight_compaction(two_workers, upstream, api_key):
    p = two_workers
    assert p.proc is not None
    workers = _workers(p.proc.pid)
    assert len(workers) == 2, workers
    cpu_before = {w: _cpu_seconds(w) for w in workers}
    upstream.responder = summaries = Summaries()
    n_convs, n_turns = 3, 20

    def drive(i: int) -> tuple[list[dict[str, Any]], str]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": f"You are worker agent {i}."}]
        ids = set()
        for t in range(n_turns):
            messages.append({"role": "user", "content": filler(i, t)})
            text, conv = chat(p, api_key, messages, stream=t % 3 == 0)  # a new connection every turn
            assert text == f"ok: {filler(i, t)}"
            ids.add(conv)
            messages.append({"role": "assistant", "content": text})
        assert len(ids) == 1, f"conversation {i} split into {ids}"
        return messages, ids.pop()

    with ThreadPoolExecutor(n_convs) as pool:
        results = list(pool.map(drive, range(n_convs)))
    convs = [conv for _, conv in results]
    calls = settle(p, p, upstream, convs)

    # both processes did part of the work (each turn costs a worker milliseconds of CPU)
    used = {w: _cpu_seconds(w) - cpu_before[w] for w in workers}
    assert all(v >= 0.05 for v in used.values()), f"CPU seconds per worker during the run: {used}"
    assert summaries.count >= n_convs, "the small window should have forced compactions"
    assert summaries.overlaps == 0, f"{summaries.overlaps} summaries overlapped another of the same conversation"
    for messages, conv in results:
        assert len(p.conversation(conv)["branches"]) == 1
        events = p.events(conv)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert stored(events) == history(messages)
        checkpoints = p.admin_json(f"conversations/{conv}/checkpoints")["data"]
        assert sum(c["status"] == "active" for c in checkpoints) == 1, checkpoints
        committed = sorted((c["generation"], c["covered_through_seq"]) for c in checkpoints if c["status"] != "failed")
        assert [g for g, _ in committed] == sorted({g for g, _ in committed}), "a generation committed twice"
        assert [s for _, s in committed] == sorted(s for _, s in committed), "a boundary went backwards"
    assert len(calls) == len(upstream.replies_sent)
    assert sum(1 for c in calls if c["purpose"] == "main") == n_convs * n_turns
