"""The concurrency cap (503 + Retry-After in the API's shape, probes unaffected) and graceful
shutdown of a real `ctxproxy serve` process: on SIGTERM readiness fails at once, new calls are
refused, in-flight streams drain within `server.shutdown_grace`, and their records are written."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from tests.support.e2e import assert_openai_error, json_chunks, sse_payloads, user
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def hold_stream(p, api_key: str, upstream, text: str) -> tuple[threading.Event, Reply, dict]:
    """A streaming call the upstream holds after its first chunk; returns (release, reply, outcome)."""
    release = threading.Event()
    reply = Reply(content=f"held answer for {text}", chunks=3, hold=release, hold_after_chunks=1)
    upstream.push(reply)
    outcome: dict = {}

    def run() -> None:
        body = {"model": "gpt-4o", "stream": True, "messages": [user(text)]}
        try:
            with httpx.stream(
                "POST",
                f"{p.base_url}/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {api_key}"},
                timeout=30,
            ) as r:
                outcome["status"] = r.status_code
                outcome["conversation"] = r.headers.get("x-conversation-id")
                outcome["lines"] = list(r.iter_lines())
        except httpx.HTTPError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    outcome["thread"] = thread
    assert reply.first_chunk_sent.wait(15), "the held stream did not start"
    return release, reply, outcome


def test_concurrency_cap_is_503_with_retry_after(proxy, upstream, api_key):
    p = proxy(server={"max_concurrent_requests": 2, "retry_after": 3})
    held = [hold_stream(p, api_key, upstream, f"capped {i}") for i in range(2)]
    n = len(upstream.requests)
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("one too many")]})
    error = assert_openai_error(r, 503)
    assert error["code"] == "overloaded" and r.headers["retry-after"] == "3", (error, r.headers)
    r = httpx.post(
        f"{p.url}/v1/messages",
        json={"model": "claude-x", "max_tokens": 5, "messages": [user("anthropic too")]},
        headers={"x-api-key": api_key, "anthropic-version": "2023-06-01"},
        timeout=10,
    )
    assert r.status_code == 503 and r.json()["type"] == "error", r.text
    assert len(upstream.requests) == n, "a refused call reached the upstream"
    assert httpx.get(f"{p.url}/healthz", timeout=5).status_code == 200  # probes are not capped
    assert httpx.get(f"{p.url}/readyz", timeout=5).status_code == 200
    for release, _, outcome in held:
        release.set()
        outcome["thread"].join(15)
        assert outcome["status"] == 200 and sse_payloads(outcome["lines"])[-1] == "[DONE]"
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("room again")]})
    assert r.status_code == 200, r.text


def test_sigterm_drains_in_flight_streams_and_flushes_records(proxy, upstream, api_key):
    p = proxy(fresh=True, server={"shutdown_grace": 20})
    assert httpx.get(f"{p.url}/readyz", timeout=5).json()["status"] == "ok"
    release, reply, outcome = hold_stream(p, api_key, upstream, "drain me")
    assert p.proc is not None
    p.proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()

    def draining() -> bool:
        r = httpx.get(f"{p.url}/readyz", timeout=5)
        return r.status_code == 503 and r.json() == {"status": "draining"}

    wait_until(draining, timeout=2, what="/readyz to fail", ignore=(httpx.HTTPError,))
    ready_failed_after = time.monotonic() - t0
    health = httpx.get(f"{p.url}/healthz", timeout=5)
    assert health.status_code == 503 and health.json() == {"status": "draining"}
    n = len(upstream.requests)
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("too late")]})
    error = assert_openai_error(r, 503)
    assert error["code"] == "shutting_down" and r.headers.get("connection") == "close", (error, r.headers)
    assert r.headers["retry-after"]
    assert len(upstream.requests) == n
    assert p.proc.poll() is None, "the proxy exited with a stream in flight"

    release.set()
    outcome["thread"].join(15)
    assert outcome["status"] == 200
    chunks = json_chunks(sse_payloads(outcome["lines"]))
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == reply.content
    assert sse_payloads(outcome["lines"])[-1] == "[DONE]"
    p.proc.wait(15)
    exited_after = time.monotonic() - t0
    assert "Traceback" not in p.stderr()

    p.start()  # same database: the drained stream's record and response turn were written
    calls = p.wait_calls(outcome["conversation"], 1)
    assert calls[-1]["status"] == "complete", calls[-1]
    events = p.events(outcome["conversation"])
    assert [e["message"]["role"] for e in events] == ["user", "assistant"]
    print(f"MEASURED drain: readiness_failed_after_s={ready_failed_after:.2f} exited_after_s={exited_after:.2f}")


def test_sigterm_grace_cuts_a_stream_that_does_not_end(proxy, upstream, api_key):
    p = proxy(fresh=True, server={"shutdown_grace": 1})
    release, _, outcome = hold_stream(p, api_key, upstream, "never ends")
    assert p.proc is not None
    t0 = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    p.proc.wait(15)
    assert time.monotonic() - t0 < 1 + 2 + 2, "the grace period (1 s) plus the cut (2 s) was exceeded"
    outcome["thread"].join(15)
    release.set()
    last = json_chunks(sse_payloads(outcome["lines"]))[-1]
    assert last["error"]["code"] == "shutting_down", last  # the cut stream says why it ended
    assert "Traceback" not in p.stderr()
    p.start()
    calls = p.wait_calls(outcome["conversation"], 1)
    assert calls[-1]["status"] == "partial", calls[-1]
