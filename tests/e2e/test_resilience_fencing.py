"""Fenced compaction: two real proxy processes on one store (a shared SQLite file, or Redis), the
compaction lease holder SIGSTOPped past its lease while its summary is in flight, then resumed.

Replica A starts a compaction (its summary request held by the upstream) and is SIGSTOPped. B
serves the next turns; once A's lease (2 s) has expired B takes the lease over and starts its own
compaction, whose summary is held too. A is SIGCONTed while B's job is still running: A's
candidate has the right parent generation and source range, so only the fencing token can
refuse it. Then B commits. Measured: stale commits (checkpoints holding A's marked summary) = 0,
checkpoint boundaries going backwards = 0, one active checkpoint per branch.

Turns sent to A name model ``gpt-fence-a`` and turns to B ``gpt-fence-b`` (the model is not part
of a conversation's identity), so the upstream can tell which replica's compaction a summary
request belongs to: the summarizer asks for the model of the turn that triggered it.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest

from tests.e2e.test_replicas import filler
from tests.e2e.test_rewriting import SMALL_POLICY, SUMMARY, WINDOW, is_summary_request
from tests.support.redis_server import RedisServer
from tests.support.resilience import counter, redis_prefix
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL_A, MODEL_B = "gpt-fence-a", "gpt-fence-b"
STALE = SUMMARY.replace("Continue the migration.", "Continue the migration (stale replica A).")
FRESH = SUMMARY.replace("Continue the migration.", "Continue the migration (replica B).")
LEASE = 2
POLICY = {**SMALL_POLICY, "summarizer": {"timeout": 60, "max_attempts": 1}}


@pytest.fixture(params=["sqlite", "redis"])
def shared_store(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    server = RedisServer().start()
    try:
        yield f"{server.url}?prefix={redis_prefix()}"
    finally:
        server.stop()


class Script:
    """The upstream's answers: A's first compaction (every chunk of it: later chunks carry the
    marked summary as their previous one) answers STALE after ``a_delay``; B's first summary is
    held ``b_delay`` (and A resumed when it arrives); everything else answers at once."""

    def __init__(self, a_delay: float, b_delay: float, on_b_started: Any) -> None:
        self.a_delay, self.b_delay = a_delay, b_delay
        self.on_b_started = on_b_started
        self.a_started = threading.Event()
        self.b_started = threading.Event()
        self.b_replies: list[Reply] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        if not is_summary_request(body):
            return None
        with self.lock:
            if body.get("model") == MODEL_A:
                first = not self.a_started.is_set()
                self.a_started.set()
                if first or "stale replica A" in str(body.get("messages")):
                    return Reply(content=STALE, delay_before_headers=self.a_delay if first else 0)
                return Reply(content=SUMMARY)
            first = not self.b_started.is_set()
            self.b_started.set()
            if first:
                self.on_b_started()
            reply = Reply(content=FRESH, delay_before_headers=self.b_delay if first else 0)
            self.b_replies.append(reply)
            return reply


def chat(p: Any, api_key: str, model: str, messages: list[dict[str, Any]]) -> str:
    raw = p.client(api_key, timeout=90).chat.completions.with_raw_response.create(model=model, messages=messages)
    messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    return raw.headers["x-conversation-id"]


def test_stopped_lease_holder_cannot_commit(proxy, shared_store, upstream, api_key, monkeypatch):
    for model in (MODEL_A, MODEL_B):
        monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    overrides = {"store": shared_store, "policies": {"default": POLICY}, "compaction_lease_seconds": LEASE}
    a = proxy(fresh=True, **overrides)
    b = proxy(fresh=True, **overrides)
    assert a.proc is not None
    resumed = threading.Event()
    refused: list[bool] = []  # when A's commit was refused: was B's summary already answered?

    def watch_a() -> None:
        wait_until(
            lambda: counter(a.url, "ctxproxy_compactions_total", result="discarded") >= 1,
            timeout=20,
            what="A's late commit to be refused",
        )
        refused.append(script.b_replies[0].done.is_set())

    def resume_a() -> None:
        # A resumes while B's summary is held: B's job holds the lease, nothing is committed yet
        assert a.proc is not None
        a.proc.send_signal(signal.SIGCONT)
        resumed.set()
        threading.Thread(target=watch_a, daemon=True).start()

    upstream.responder = script = Script(a_delay=1.0, b_delay=8.0, on_b_started=resume_a)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Fencing agent."}]
    boundaries: list[int] = []  # the active checkpoint's covered_through_seq, sampled after each turn

    def turn(p: Any, model: str, t: int) -> str:
        messages.append({"role": "user", "content": filler(5, t)})
        conv = chat(p, api_key, model, messages)
        active = [c for c in b.admin_json(f"conversations/{conv}/checkpoints")["data"] if c["status"] == "active"]
        boundaries.append(active[0]["covered_through_seq"] if active else 0)
        return conv

    t = 0
    conv = ""
    while not script.a_started.is_set():
        assert t < 40, "A never started a compaction"
        conv = turn(a, MODEL_A, t)
        t += 1
    a.proc.send_signal(signal.SIGSTOP)  # mid-compaction: its summary request is held upstream
    stopped_at = time.monotonic()
    try:
        # B serves on; it can compact only once A's lease has expired, and its summary is held
        while not script.b_started.is_set():
            assert time.monotonic() - stopped_at < 30, "B never took the compaction over"
            assert turn(b, MODEL_B, t) == conv
            t += 1
        assert time.monotonic() - stopped_at > LEASE
    finally:
        if not resumed.is_set():
            a.proc.send_signal(signal.SIGCONT)
    # A wakes with its summary answered: its candidate still has the active generation and the
    # same source range, so only the fence can refuse it.
    wait_until(lambda: refused, timeout=30, what="A's late commit to be refused")
    assert refused == [False], "A's commit was refused only after B's had landed"
    assert counter(a.url, "ctxproxy_compactions_total", result="committed") == 0
    script.b_replies[0].done.wait(15)
    wait_until(
        lambda: counter(b.url, "ctxproxy_compactions_total", result="committed") >= 1,
        timeout=20,
        what="B's compaction to commit",
    )
    for k in range(6):  # both replicas serve on, compacting when due
        p, model = ((a, MODEL_A), (b, MODEL_B))[k % 2]
        assert turn(p, model, t) == conv
        t += 1

    checkpoints = b.admin_json(f"conversations/{conv}/checkpoints")["data"]
    assert checkpoints == a.admin_json(f"conversations/{conv}/checkpoints")["data"]
    live = [c for c in checkpoints if c["status"] in ("active", "superseded")]
    stale = [c for c in live if "stale replica A" in c["summary"]]
    assert stale == [], f"stale commits: {stale}"
    assert any("replica B" in c["summary"] for c in live)
    by_generation = sorted(live, key=lambda c: c["generation"])
    assert [c["generation"] for c in by_generation] == list(range(1, len(live) + 1))
    covered = [c["covered_through_seq"] for c in by_generation]
    backwards = sum(1 for x, y in zip(covered, covered[1:], strict=False) if y < x)
    backwards += sum(1 for x, y in zip(boundaries, boundaries[1:], strict=False) if y < x)
    assert backwards == 0, (covered, boundaries)
    assert len([c for c in checkpoints if c["status"] == "active"]) == 1, checkpoints
    branches = b.conversation(conv)["branches"]
    assert len(branches) == 1
    events = b.events(conv)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [(e["role"], e["message"]["content"]) for e in events] == [
        (m["role"], m["content"]) for m in messages if m["role"] != "system"
    ]
    print(f"fenced compaction: stale commits 0, boundaries backwards 0, checkpoints {len(live)}")
