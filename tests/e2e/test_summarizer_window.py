"""A summarizer whose window ctxproxy is not told: sized safe, corrected by its own overflow errors.

The summarizer here is a model litellm does not know (`openai/acme-summarizer` on the scripted
OpenAI-compatible server), whose server enforces a 16k window with its own count. ctxproxy is not
given `summarizer.context_window`: it must assume the smallest window of the routes using the
policy (and say so at start-up), and when that is still wrong (a 6k summarizer behind 16k routes),
learn the window from the summarizer's refusal and summarize the chunk in halves. Either way a
checkpoint commits.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_fit import run_session, summary_limit, summary_text
from tests.e2e.test_rewriting import is_summary_request, wait_checkpoints
from tests.support.upstream_server import Reply, tool_call

pytestmark = pytest.mark.slow

SUMMARIZER = "acme-summarizer"
SUMMARIZER_WINDOW = 16_000


def responder(turn: dict[str, int]) -> Any:
    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(content=summary_text(summary_limit(body) // 3))
        turn["n"] += 1
        n = turn["n"]
        if n % 2 == 1:
            return Reply(content=None, tool_calls=[tool_call("bash", {"command": f"cat f{n}.py"}, id=f"c{n}")])
        return Reply(content=f"step {n} done")

    return respond


def policy(window: int, upstream: Any, summarizer_model: str = SUMMARIZER) -> dict[str, Any]:
    summarizer = {
        "model": f"openai/{summarizer_model}",
        "base_url": upstream.base_url,
        "api_key_env": "UPSTREAM_KEY",
        "timeout": 30,
    }
    return {"context_window": window, "max_output_tokens": 1_000, "overflow_wait": 20, "summarizer": summarizer}


def summarizer_checks(upstream: Any, model: str = SUMMARIZER) -> list[Any]:
    return [m for m in upstream.measured if m.model == model]


def conversation_of(p: Any) -> str:
    (conversation,) = p.admin_json("conversations")["data"]
    return str(conversation["id"])


def test_a_summarizer_litellm_does_not_know_gets_the_smallest_route_window(proxy, upstream, api_key, monkeypatch):
    monkeypatch.setitem(upstream.context_windows, SUMMARIZER, SUMMARIZER_WINDOW)
    monkeypatch.setitem(upstream.context_windows, "gpt-acme-16k", 16_000)
    p = proxy(policies={"default": policy(16_000, upstream)}, fresh=True)
    upstream.responder = responder({"n": 0})
    run_session(p.client(api_key), "gpt-acme-16k", 90)
    checks = summarizer_checks(upstream)
    assert checks, "the session never compacted"
    assert not any(m.over for m in checks)  # no summary request above its 16k window
    assert max(m.counted + m.max_tokens for m in checks) > SUMMARIZER_WINDOW // 2  # sized for it, not tiny
    assert any(c["status"] == "active" for c in wait_checkpoints(p, conversation_of(p)))
    log = p.stderr()
    line = next(line for line in log.splitlines() if "budgets: policy 'default'" in line)
    assert "summarizer openai/acme-summarizer: window 16,000 (the smallest window of its routes" in line
    assert "litellm does not know the model" in line and "reply reserve 2,048 (summarizer.max_tokens)" in line


def test_a_summarizer_window_smaller_than_assumed_is_learned_and_the_chunk_halved(
    proxy, upstream, api_key, monkeypatch
):
    """The routes have 16k windows, the summarizer 6k: the first summary request sized for 16k
    is refused with the server's numbers; ctxproxy learns 6k and summarizes the chunk in halves,
    and every later summary request fits."""
    small = "acme-summarizer-6k"
    monkeypatch.setitem(upstream.context_windows, small, 6_000)
    monkeypatch.setitem(upstream.context_windows, "gpt-acme-16k", 16_000)
    p = proxy(policies={"default": policy(16_000, upstream, small)}, fresh=True)
    upstream.responder = responder({"n": 0})
    run_session(p.client(api_key), "gpt-acme-16k", 90)
    checks = summarizer_checks(upstream, small)
    refused = [m for m in checks if m.over]
    assert refused, "no summary request was sized past the summarizer's real window"
    first = checks.index(refused[0])
    assert not any(m.over for m in checks[first + 1 :])  # learned at once: every later one fits
    assert any(c["status"] == "active" for c in wait_checkpoints(p, conversation_of(p), timeout=30))
    calls = p.admin_json(f"conversations/{conversation_of(p)}/calls")["data"]
    assert any(c["purpose"] == "summary" and c["upstream_status"] == 400 for c in calls)
    learned = {row["model"]: row for row in p.admin_json("estimates")["data"]}
    assert learned[f"openai/{small}"]["learned_window"] == 6_000
