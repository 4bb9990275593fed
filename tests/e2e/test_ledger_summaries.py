"""Every summarizer call the upstream answered (and billed) is in the ledger: two replicas on one
Redis store, small windows, summaries that fail and are asked for again.

The scripted upstream records every reply and the usage it reported (`Reply.sent_usage`); the
ledger is `/admin/usage` (and the call records) read through the other replica. A provider bills a
non-streamed completion once it has generated it, whether or not the caller is still reading, so
a reply the upstream sent counts as billed.

- `test_failing_summaries_across_replicas_are_all_in_the_ledger` (passes): tool-heavy
  conversations alternating between replicas, summaries that come back too long (asked for once
  more, shorter) or are answered 400 (the summarizer's window overflowed): the ledger equals the
  bill, call for call.
- `test_summary_in_flight_at_shutdown_is_in_the_ledger` (fails today): a replica gets SIGTERM
  while its compaction's summarizer call is in flight. `Compactor.drain` (proxy/compaction.py)
  waits 10 s (proxy/serving/app.py), then cancels the job: the call the upstream goes on to answer and
  bill leaves no call record at all, not even one with unknown usage.
- `test_summary_retry_started_during_shutdown_is_in_the_ledger` (fails today): the first
  summarizer call is refused (400, context overflow) *during* the drain; the job goes on with
  another summarizer call (the same request once more, or the chunk's halves) -- a new billable
  call started after the shutdown began -- and the drain cancels it: never recorded.
- `test_summary_cut_off_at_shutdown_still_has_a_call_record` (fails today): a summarizer call
  still unanswered when the drain's time is up (`server.shutdown_grace` 1 s, the drain's 10 s)
  is cut off; the upstream bills it, and the ledger does not even count it (no record, so no
  `unknown` either).
"""

from __future__ import annotations

import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.test_rewriting import OBJECTIVE, SMALL_POLICY, SUMMARY, SYSTEM, WINDOW, is_summary_request
from tests.support.proxy_process import ProxyProcess
from tests.support.redis_server import RedisServer
from tests.support.upstream_server import Reply, count_prompt_tokens, tool_call
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def filler(conv: int, turn: int) -> str:
    """~250 tokens of user text."""
    return f"conversation {conv} turn {turn}: " + " ".join(f"w{conv}_{turn}_{k}" for k in range(80))


def asked_shorter(body: dict[str, Any]) -> bool:
    """A summarizer request asking again, shorter, after an over-long summary (where the proxy does that)."""
    return "A previous attempt was" in str(body["messages"][-1].get("content"))


def too_long_summary(body: dict[str, Any]) -> str:
    """A structured summary about twice the size limit the request states."""
    match = re.search(r"under ([\d,]+) tokens", str(body["messages"][-1].get("content")))
    limit = int(match.group(1).replace(",", "")) if match else 400
    facts = " ".join(f"fact{i}" for i in range(limit * 2))
    return SUMMARY.replace("## Key facts\nnone", f"## Key facts\n{facts}")


def overflow(body: dict[str, Any], window: int | None = None) -> Reply:
    """OpenAI's 400 for a request over the model's window: `window`, else 50 tokens below the
    request (a proxy that learns windows from these errors must be told one window, not many)."""
    prompt = count_prompt_tokens(body)
    reply = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
    window = prompt + reply - 50 if window is None else window
    message = (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt + reply} tokens ({prompt} in the messages, {reply} in the completion). Please reduce "
        "the length of the messages or completion."
    )
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    return Reply(status=400, error_body={"error": error})


@pytest.fixture
def shared_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


def two_replicas(proxy: Any, redis: RedisServer, policy: dict[str, Any]) -> tuple[ProxyProcess, ProxyProcess]:
    store = f"{redis.url}?prefix=ledger-{uuid.uuid4().hex[:8]}:&socket_timeout=5"
    a = proxy(fresh=True, store=store, policies={"default": policy}, compaction_lease_seconds=5)
    b = proxy(fresh=True, store=store, policies={"default": policy}, compaction_lease_seconds=5)
    return a, b


class Bill:
    """The replies the upstream sent for one model, and the usage each reported."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replies: list[tuple[str, Reply]] = []

    def add(self, kind: str, reply: Reply) -> Reply:
        with self.lock:
            self.replies.append((kind, reply))
        return reply

    def all(self) -> list[tuple[str, Reply]]:
        with self.lock:
            return list(self.replies)

    def quiet(self, timeout: float = 90) -> list[tuple[str, Reply]]:
        """Wait until every reply was sent and no new request came for a while."""

        def settled() -> list[tuple[str, Reply]] | None:
            replies = self.all()
            if not all(r.done.is_set() for _, r in replies):
                return None
            time.sleep(1.5)
            return replies if len(self.all()) == len(replies) else None

        replies = wait_until(settled, timeout=timeout, interval=0.3, what="the upstream to go quiet")
        assert replies is not None
        return replies

    def totals(self, kind: str | None = None) -> dict[str, int]:
        out = {"calls": 0, "input_total": 0, "output": 0, "cache_read": 0}
        for k, reply in self.all():
            usage = reply.sent_usage
            if usage is None or (kind is not None and k != kind):
                continue
            out["calls"] += 1
            out["input_total"] += usage["prompt_tokens"]
            out["output"] += usage["completion_tokens"]
            out["cache_read"] += usage["prompt_tokens_details"]["cached_tokens"]
        return out


def ledger(p: ProxyProcess, convs: list[str]) -> dict[str, int]:
    """The ledger's totals over the conversations, billed calls only (those with known usage)."""
    out = {"calls": 0, "input_total": 0, "output": 0, "cache_read": 0, "summary_calls": 0}
    for conv in convs:
        totals = p.admin_json("usage", params={"conversation": conv})["totals"]
        out["calls"] += totals["calls"] - totals["unknown"]["input_total"]
        out["summary_calls"] += totals["calls_by_purpose"].get("summary", 0)
        for name in ("input_total", "output", "cache_read"):
            out[name] += totals[name] or 0
    return out


def summary_ledger(p: ProxyProcess, convs: list[str]) -> dict[str, int]:
    out = {"calls": 0, "input_total": 0, "output": 0, "cache_read": 0}
    for conv in convs:
        for call in p.admin_json(f"conversations/{conv}/calls", params={"limit": 1000})["data"]:
            if call["purpose"] != "summary" or call["usage"]["input_total"] is None:
                continue
            out["calls"] += 1
            out["input_total"] += call["usage"]["input_total"]
            out["output"] += call["usage"]["output"] or 0
            out["cache_read"] += call["usage"]["cache_read"] or 0
    return out


def test_failing_summaries_across_replicas_are_all_in_the_ledger(proxy, upstream, api_key, shared_redis, monkeypatch):
    window = 8_000
    model = f"gpt-ledger-{uuid.uuid4().hex[:8]}"
    monkeypatch.setitem(upstream.context_windows, model, window)
    policy = {"context_window": window, "max_output_tokens": 1000, "overflow_wait": 20, "summarizer": {"timeout": 20}}
    a, b = two_replicas(proxy, shared_redis, policy)
    bill = Bill()
    counts = {"main": 0, "summary": 0}
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> Reply | None:
        if body.get("model") != model:
            return None
        kind = "summary" if is_summary_request(body) else "main"
        retry = kind == "summary" and asked_shorter(body)
        with lock:
            if not retry:
                counts[kind] += 1
            n = counts[kind]
        if kind == "summary":
            if n % 3 == 1 and not retry:
                # too long: asked for once more, shorter
                return bill.add(kind, Reply(content=too_long_summary(body), delay_before_headers=0.3))
            if n % 3 == 2:
                return bill.add(kind, overflow(body, window=window - 1_000))
            return bill.add(kind, Reply(content=SUMMARY, cached_tokens=64, delay_before_headers=0.3))
        if n % 2:
            calls = [tool_call("bash", {"command": f"cat f_{n}_{k}.py"}, id=f"call_{n}_{k}") for k in range(1 + n % 3)]
            return bill.add(kind, Reply(content=None, tool_calls=calls, cached_tokens=128))
        return bill.add(kind, Reply(content=f"step {n} done", cached_tokens=128))

    upstream.responder = respond

    def drive(i: int) -> str:
        messages: list[dict[str, Any]] = [SYSTEM, {**OBJECTIVE, "content": f"{OBJECTIVE['content']} (agent {i})"}]
        conv = ""
        for t in range(45):
            p = (a, b)[(t + i) % 2]
            r = p.post_chat(api_key, {"model": model, "messages": messages}, timeout=60)
            assert r.status_code == 200, r.text
            conv = r.headers["x-conversation-id"]
            message = r.json()["choices"][0]["message"]
            messages.append(
                {k: v for k, v in message.items() if k in ("role", "content", "tool_calls") and v is not None}
            )
            for k, call in enumerate(message.get("tool_calls") or []):
                size = 6_000 if (t + k) % 5 == 0 else 1_500
                output = f"output of {call['function']['arguments']}\n" + "line of output\n" * (size // 15)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
            if not message.get("tool_calls"):
                messages.append({"role": "user", "content": f"turn {t}: go on with part {t}. " + "detail " * 150})
        return conv

    with ThreadPoolExecutor(2) as pool:
        convs = list(pool.map(drive, range(2)))
    bill.quiet()
    summaries = [r for k, r in bill.all() if k == "summary"]
    assert len(summaries) >= 6, f"only {len(summaries)} summarizer calls"
    assert any(r.sent_status == 400 for r in summaries), "no summary was refused"
    assert any(r.sent_status == 200 for r in summaries), "no summary was answered"
    assert summary_ledger(b, convs) == bill.totals("summary")
    books = ledger(b, convs)
    billed = bill.totals()
    assert {k: books[k] for k in billed} == billed
    assert books["summary_calls"] == len(summaries)  # the refused ones too, with unknown usage


def start_compaction(a: ProxyProcess, api_key: str, model: str, first_summary: threading.Event) -> str:
    """Turns through replica A until its compaction's first summarizer request reached the
    upstream; the conversation id."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "An agent whose replica is shut down."}]
    conv = ""
    for t in range(40):
        messages.append({"role": "user", "content": filler(5, t)})
        r = a.post_chat(api_key, {"model": model, "messages": messages}, timeout=60)
        assert r.status_code == 200, r.text
        conv = r.headers["x-conversation-id"]
        messages.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
        if first_summary.wait(0.5):
            return conv
    raise AssertionError("replica A never started a compaction")


def shut_down(p: ProxyProcess, timeout: float = 90) -> None:
    """SIGTERM, as an orchestrator sends it, and wait for the process to end by itself."""
    assert p.proc is not None
    p.proc.send_signal(signal.SIGTERM)
    p.proc.wait(timeout=timeout)


def test_summary_in_flight_at_shutdown_is_in_the_ledger(proxy, upstream, api_key, shared_redis, monkeypatch):
    """Replica A is shut down while its summarizer call is in flight (the upstream answers after
    20 s, within `summarizer.timeout`). The upstream answers it and bills it; the ledger, read
    through replica B, must hold it."""
    model = f"gpt-ledger-{uuid.uuid4().hex[:8]}"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    a, b = two_replicas(proxy, shared_redis, {**SMALL_POLICY, "summarizer": {"timeout": 60, "max_attempts": 2}})
    bill = Bill()
    first_summary = threading.Event()

    def respond(body: dict[str, Any]) -> Reply | None:
        if body.get("model") != model:
            return None
        if is_summary_request(body):
            held = not first_summary.is_set()
            first_summary.set()
            return bill.add("summary", Reply(content=SUMMARY, delay_before_headers=20 if held else 0))
        return bill.add("main", Reply())

    upstream.responder = respond
    conv = start_compaction(a, api_key, model, first_summary)
    shut_down(a)
    bill.quiet()
    billed = bill.totals("summary")
    assert billed["calls"] == 1, "the upstream answered the summarizer call (and bills it)"
    books = summary_ledger(b, [conv])
    assert books == billed, f"summarizer calls billed {billed}, in the ledger {books}"
    everything = ledger(b, [conv])
    assert {k: everything[k] for k in bill.totals()} == bill.totals()


def test_summary_retry_started_during_shutdown_is_in_the_ledger(proxy, upstream, api_key, shared_redis, monkeypatch):
    """Replica A gets SIGTERM while its first summarizer call is on its way; the upstream refuses
    it (400, context overflow) during the drain, and the job goes on with another summarizer
    call. The upstream answers and bills that one too: the ledger must hold it (or the job must
    not start, while shutting down, a call it then abandons)."""
    model = f"gpt-ledger-{uuid.uuid4().hex[:8]}"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    a, b = two_replicas(proxy, shared_redis, {**SMALL_POLICY, "summarizer": {"timeout": 60, "max_attempts": 2}})
    bill = Bill()
    first_summary = threading.Event()

    def respond(body: dict[str, Any]) -> Reply | None:
        if body.get("model") != model:
            return None
        if is_summary_request(body):
            if not first_summary.is_set():
                first_summary.set()
                refused = overflow(body)
                refused.delay_before_headers = 3
                return bill.add("summary", refused)
            return bill.add("summary", Reply(content=SUMMARY, delay_before_headers=20))
        return bill.add("main", Reply())

    upstream.responder = respond
    conv = start_compaction(a, api_key, model, first_summary)
    shut_down(a)
    bill.quiet()
    billed = bill.totals("summary")
    books = summary_ledger(b, [conv])
    assert books == billed, f"summarizer calls billed {billed}, in the ledger {books}"
    everything = ledger(b, [conv])
    assert {k: everything[k] for k in bill.totals()} == bill.totals()


def test_summary_cut_off_at_shutdown_still_has_a_call_record(proxy, upstream, api_key, shared_redis, monkeypatch):
    """A summarizer call still unanswered when the drain's time is up is cut off; the upstream
    answers and bills it anyway. Its usage cannot be known, but the call must be in the ledger
    (counted among the unknowns), not missing from it."""
    model = f"gpt-ledger-{uuid.uuid4().hex[:8]}"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    policy = {**SMALL_POLICY, "summarizer": {"timeout": 120, "max_attempts": 2}}
    store = f"{shared_redis.url}?prefix=ledger-{uuid.uuid4().hex[:8]}:&socket_timeout=5"
    a = proxy(fresh=True, store=store, policies={"default": policy}, server={"shutdown_grace": 1})
    b = proxy(fresh=True, store=store, policies={"default": policy})
    bill = Bill()
    first_summary = threading.Event()

    def respond(body: dict[str, Any]) -> Reply | None:
        if body.get("model") != model:
            return None
        if is_summary_request(body):
            held = not first_summary.is_set()
            first_summary.set()
            return bill.add("summary", Reply(content=SUMMARY, delay_before_headers=30 if held else 0))
        return bill.add("main", Reply())

    upstream.responder = respond
    conv = start_compaction(a, api_key, model, first_summary)
    shut_down(a)
    bill.quiet(timeout=120)
    sent = sum(1 for kind, _ in bill.all() if kind == "summary")
    totals = b.admin_json("usage", params={"conversation": conv})["totals"]
    assert totals["calls_by_purpose"].get("summary", 0) == sent, (
        f"{sent} summarizer calls reached the upstream, the ledger holds {totals['calls_by_purpose']}"
    )
    assert totals["unknown"]["input_total"] == 1  # the one cut off: its usage is unknown, and says so
