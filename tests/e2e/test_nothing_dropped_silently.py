"""Nothing is dropped silently: the summary is ready before the window is reached, a failed chunk
keeps what was summarized before it, and history that must still be pruned leaves a marker."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.test_rewriting import OBJECTIVE, SMALL_POLICY, SUMMARY, SYSTEM, agent_requests, drive, is_summary_request
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def pruned_events_metric(p: Any) -> float:
    text = httpx.get(p.url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('ctxproxy_pruned_events_total{route="main"}')
    )


def test_a_pruned_request_carries_a_marker_naming_every_dropped_event(proxy, upstream, api_key, monkeypatch):
    model = "gpt-silent-prune"
    monkeypatch.setitem(upstream.context_windows, model, SMALL_POLICY["context_window"])
    policy = {**SMALL_POLICY, "on_overflow": "prune", "recall": {"enabled": True}}
    p = proxy(policies={"default": policy}, fresh=True)
    # the summarizer fails: nothing can be summarized, so the oldest turns must go
    upstream.responder = lambda body: Reply(status=500) if is_summary_request(body) else None
    before = pruned_events_metric(p)
    conv = drive(p.client(api_key), model, [SYSTEM, OBJECTIVE], 30, words=150)
    records = [c for c in p.calls(conv) if c["purpose"] == "main"]
    pruning = [c for c in records if c["projection"]["pruned_seqs"]]
    assert pruning, "no request had to prune"
    sent = agent_requests(upstream, model)
    assert len(sent) == len(records)
    dropped = 0
    for record, body in zip(records, sent, strict=True):
        ranges = record["projection"]["pruned_seqs"]
        markers = [m for m in body["messages"] if "<pruned_history" in str(m.get("content"))]
        if not ranges:
            assert markers == []
            continue
        (marker,) = markers
        named = ", ".join(f"e{a}" if a == b else f"e{a}-e{b}" for a, b in ranges)
        assert marker["role"] == "user" and f'events="{named}"' in marker["content"]
        assert "ctxproxy_recall tool can search and read them" in marker["content"]
        assert body["messages"][1] == OBJECTIVE  # the pinned objective before it, in place
        dropped += sum(b - a + 1 for a, b in ranges)
    assert pruned_events_metric(p) - before == dropped


def test_no_summarizer_is_paid_for_while_the_requests_fit(proxy, upstream, api_key, monkeypatch):
    """`late_trim` 1.0 (the default): requests go as the client sent them while they fit, and no
    summarizer is called for them (a session that ends there costs what it costs without the
    proxy); the first request that no longer fits plans the compaction and, with no tool result to
    trim (a chat), waits for its summary: it is never pruned."""
    model = "gpt-silent-early"
    monkeypatch.setitem(upstream.context_windows, model, SMALL_POLICY["context_window"])
    policy = {key: value for key, value in SMALL_POLICY.items() if key != "late_trim"}
    p = proxy(policies={"default": policy}, fresh=True)
    upstream.responder = lambda body: Reply(content=SUMMARY) if is_summary_request(body) else None
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conv = drive(p.client(api_key), model, messages, 24, words=120)
    records = [c["projection"] for c in sorted(p.calls(conv), key=lambda c: c["started_at"]) if c["purpose"] == "main"]
    bodies = agent_requests(upstream, model)
    first = next(i for i, r in enumerate(records) if r["trimmed"] or r["covered_through_seq"])
    assert first > 0 and records[first - 1]["over_trigger"]  # requests over the trigger went as sent
    for i, body in enumerate(bodies[:first]):  # as sent: the client's own messages, every one
        assert len(body["messages"]) == 3 + 2 * i
        assert records[i]["compaction"] is None and records[i]["covered_through_seq"] == 0
    assert "<conversation_summary" in json.dumps(bodies[first]) and records[first]["trimmed"] == 0
    requests = [r.body for r in upstream.chat_requests if r.body.get("model") == model]
    first_summary = next(i for i, body in enumerate(requests) if is_summary_request(body))
    assert first_summary > requests.index(bodies[first - 1])  # none while the requests fit
    assert not any(r["pruned_seqs"] for r in records)


def test_a_chunk_that_fails_keeps_the_chunks_summarized_before_it(proxy, upstream, api_key, monkeypatch):
    model = "gpt-silent-partial"
    monkeypatch.setitem(upstream.context_windows, model, 16_000)
    policy = {**SMALL_POLICY, "context_window": 16_000, "summary_chunk_tokens": 600, "keep_recent_tokens": 1000}
    # ctxproxy's own summarizer, chunk by chunk (a shared summary is one call for the whole plan)
    policy["summarizer"] = {**SMALL_POLICY["summarizer"], "mode": "text"}
    p = proxy(policies={"default": policy}, fresh=True)
    seen = {"summaries": 0}

    def respond(body: dict[str, Any]) -> Reply | None:
        if not is_summary_request(body):
            return None
        seen["summaries"] += 1
        # the first compaction's second chunk fails on both attempts
        return Reply(status=500) if seen["summaries"] in (2, 3) else Reply(content=SUMMARY)

    upstream.responder = respond

    def after(_: int) -> bool:
        return seen["summaries"] >= 3

    conv = drive(p.client(api_key), model, [SYSTEM, OBJECTIVE], 40, words=150, after=after)
    plans = [c["projection"]["compaction"] for c in p.calls(conv) if c["purpose"] == "main"]
    plan = next(plan for plan in plans if plan and len(plan["chunks"]) >= 2)
    checkpoints = wait_until(
        lambda: [c for c in p.admin_json(f"conversations/{conv}/checkpoints")["data"] if c["status"] == "active"],
        timeout=10,
        interval=0.1,
        what="the partial checkpoint",
    )
    assert checkpoints[0]["covered_through_seq"] == plan["chunks"][0]["last_seq"] < plan["through_seq"]
