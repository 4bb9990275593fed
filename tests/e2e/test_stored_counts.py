"""Token counts stored with the events (`proxy.stored_counts`): each event is stored with its
count, and a request whose history no per-process cache holds reads them back instead of
counting its history again, with the same projection as a proxy whose caches hold it all."""

from __future__ import annotations

import uuid

import httpx
import pytest

from policies.tokens import count_message, encoding_for_model
from tests.support.proxy_process import ADMIN_TOKEN
from tests.support.resilience import counter

pytestmark = pytest.mark.slow

LONG = 32
"""Messages enough that a history's counts are not all among the few the counter holds."""
NO_ROOM = {"history_mb": 0.0001, "token_counts": 8}
"""No history remembered, eight counts held (the system prefix's and the newest messages'): every
request's older messages are counted from the store."""


def misses(url: str) -> float:
    return counter(url, "ctxproxy_cache_lookups_total", cache="token_counts", outcome="miss")


def converse(url: str, api_key: str, opening: list[dict[str, str]], turns: int) -> tuple[str, list[dict], list[int]]:
    """The conversation opened with `opening`, then `turns` more turns; its id, its messages and
    each request's `X-Ctxproxy-Client-Tokens` and token-count misses."""
    messages = list(opening)
    client_tokens: list[int] = []
    missed: list[int] = []
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as client:
        for turn in range(turns + 1):
            if turn:
                messages.append({"role": "user", "content": f"turn {turn} {uuid.uuid4().hex}"})
            before = misses(url)
            r = client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": messages})
            assert r.status_code == 200, r.text
            missed.append(int(misses(url) - before))
            client_tokens.append(int(r.headers["x-ctxproxy-client-tokens"]))
            conversation = r.headers["x-conversation-id"]
            messages.append(r.json()["choices"][0]["message"])
    return conversation, messages, client_tokens + missed


def opening(n: int) -> list[dict[str, str]]:
    tag = uuid.uuid4().hex
    return [
        {"role": "system", "content": f"Stored counts {tag}."},
        *(
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} of {tag}: " + "word " * (i % 7)}
            for i in range(n)
        ),
    ]


def test_a_request_no_cache_counted_reads_the_counts_stored_with_its_events(proxy, api_key):
    first = opening(2 * LONG + 1)
    turns = 3
    cold = proxy(fresh=True, caches=NO_ROOM)
    conversation, messages, got = converse(cold.url, api_key, first, turns)
    client_tokens, missed = got[: turns + 1], got[turns + 1 :]
    # the first request counts all of its messages, the system prefix too; each later one only
    # its new user message (as it is stored): the answer before it and the older messages come
    # from the store
    assert missed == [len(first), 1, 1, 1], missed
    # exactly what a proxy whose caches hold everything counts
    roomy = proxy(fresh=True)
    _, _, warm = converse(roomy.url, api_key, first, 0)
    assert client_tokens[0] == warm[0]
    events = httpx.get(
        f"{cold.url}/admin/conversations/{conversation}/events",
        params={"limit": 1000},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30,
    ).json()["data"]
    encoding = encoding_for_model("gpt-4o")
    assert len(events) == len(messages) - 1  # the system prefix is no event
    assert [e["tokens"] for e in events] == [count_message(e["message"], encoding) for e in events]


def test_an_answer_sent_back_in_another_spelling_is_counted_as_sent(proxy, api_key):
    """Identity matches an answer whose tool-call arguments the client re-serialized by its
    chain hash; its stored count is of the upstream's spelling, so the client's is counted."""
    first = opening(11)
    spaced = '{\n    "path": ".",\n    "depth": 2\n}'
    first.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": spaced}}],
        }
    )
    first.append({"role": "tool", "tool_call_id": "call_1", "content": "a.py b.py"})
    at = len(first) - 2  # far from the newest messages the counter holds
    first += [
        {"role": "assistant" if j % 2 == 0 else "user", "content": f"after the listing, message {j}"}
        for j in range(2 * LONG)
    ]
    cold = proxy(fresh=True, caches=NO_ROOM)
    _, _, got = converse(cold.url, api_key, first, 0)
    compact = [dict(m) for m in first]
    compact[at] = {**first[at], "tool_calls": [{**first[at]["tool_calls"][0]}]}
    compact[at]["tool_calls"][0]["function"] = {"name": "ls", "arguments": '{"path":".","depth":2}'}
    roomy = proxy(fresh=True)
    with httpx.Client(base_url=cold.url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as client:
        before = misses(cold.url)
        r = client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": compact})
        assert r.status_code == 200, r.text
        cold_tokens = int(r.headers["x-ctxproxy-client-tokens"])
        # the re-spelled answer and the few the counter held, not the history
        assert 1 <= misses(cold.url) - before < LONG
    _, _, warm = converse(roomy.url, api_key, compact, 0)
    assert cold_tokens == warm[0] != got[0]
