"""The per-process caches stay within the config's `caches:` bounds, filled past them through
real requests and read from the proxy's `ctxproxy_cache_entries` gauges on `/metrics`."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.support.resilience import counter

pytestmark = pytest.mark.slow

BOUNDS = {"projection_branches": 4, "token_counts": 50, "calibrations": 4, "projection_memo_entries": 8}
CONVERSATIONS = 16
TURNS = 3


def entries(url: str, cache: str) -> float:
    return counter(url, "ctxproxy_cache_entries", cache=cache)


def test_caches_filled_past_their_bounds_stay_bounded(proxy, api_key):
    p = proxy(fresh=True, caches=BOUNDS)
    headers = {"Authorization": f"Bearer {api_key}"}
    seen_branches: list[float] = []
    with httpx.Client(base_url=p.url, timeout=30, headers=headers) as client:
        for c in range(CONVERSATIONS):
            messages = [{"role": "system", "content": f"Bounded cache conversation {c} {uuid.uuid4().hex}."}]
            for t in range(TURNS):
                messages.append({"role": "user", "content": f"turn {t} {uuid.uuid4().hex}"})
                r = client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": messages})
                assert r.status_code == 200, r.text
                messages.append(r.json()["choices"][0]["message"])
            seen_branches.append(entries(p.url, "projection_branches"))
    # the gauge follows the cache as it fills, then holds at the bound
    assert seen_branches[:4] == [1, 2, 3, 4], seen_branches
    assert seen_branches[4:] == [4] * (CONVERSATIONS - 4), seen_branches
    # every conversation's events were counted (16 x 6 > 50) and calibrated (16 branches > 4)
    assert entries(p.url, "token_counts") == BOUNDS["token_counts"]
    assert entries(p.url, "calibrations") == BOUNDS["calibrations"]
    memo = entries(p.url, "projection_memo_entries")
    assert 0 < memo <= BOUNDS["projection_branches"] * BOUNDS["projection_memo_entries"], memo


def test_default_bounds_are_reported(proxy, api_key):
    p = proxy()
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    assert "# TYPE ctxproxy_cache_entries gauge" in text
    for cache in BOUNDS:
        assert f'ctxproxy_cache_entries{{cache="{cache}"}} ' in text, cache
    # the requests kept for shared summaries (`caches.shared_prompts_mb`): none before any answer
    assert 'ctxproxy_cache_entries{cache="shared_prompts"} 0' in text


def lookups(url: str) -> dict[tuple[str, str], float]:
    return {
        (cache, outcome): counter(url, "ctxproxy_cache_lookups_total", cache=cache, outcome=outcome)
        for cache in ("histories", "bodies", "token_counts", "projection_branches")
        for outcome in ("hit", "miss")
    }


def drive_in_turn(
    url: str, api_key: str, conversations: int, rounds: int, alike: bool = False
) -> dict[tuple[str, str], float]:
    """`conversations` conversations under one key, one turn each per round; the lookups of the
    rounds after the first (what each cache did for a conversation it saw one round earlier).
    `alike`: they open with the same system prompt and first two messages (agents started by one
    harness), and differ from the third on."""
    if alike:
        opening = [
            {"role": "system", "content": "You run tasks."},
            {"role": "user", "content": "Run the task."},
            {"role": "assistant", "content": "On it."},
        ]
        chats = [list(opening) for _ in range(conversations)]
    else:
        chats = [[{"role": "system", "content": f"In turn {c} {uuid.uuid4().hex}."}] for c in range(conversations)]
    before: dict[tuple[str, str], float] = {}
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as client:
        for round_ in range(rounds):
            if round_ == 1:
                before = lookups(url)
            for messages in chats:
                messages.append({"role": "user", "content": f"round {round_} {uuid.uuid4().hex}"})
                r = client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": messages})
                assert r.status_code == 200, r.text
                messages.append(r.json()["choices"][0]["message"])
    after = lookups(url)
    return {k: after[k] - before[k] for k in after}


def test_lookups_show_caches_smaller_than_the_conversations_in_use(proxy, api_key):
    """8 conversations taken in turn: with room for them every later request hits every cache.
    With room for 4 branch memos, 3 of them keep hitting (all are in use: `proxy.eviction`
    keeps those that hit; an LRU would hit none), and with 100 bytes for histories none fits.
    /metrics says so, and an operator sizes `caches:` by it."""
    requests = 8 * 2
    roomy = drive_in_turn(proxy(fresh=True).url, api_key, 8, 3)
    for cache in ("histories", "bodies", "projection_branches"):
        assert (roomy[(cache, "hit")], roomy[(cache, "miss")]) == (requests, 0), (cache, roomy)
    # the new user message is counted as it is stored (found counted by the projection), the
    # answer before it came counted with its own request; the rest with the remembered history
    assert (roomy[("token_counts", "hit")], roomy[("token_counts", "miss")]) == (requests, requests), roomy

    small = proxy(fresh=True, caches={"projection_branches": 4, "history_mb": 0.0001})
    tight = drive_in_turn(small.url, api_key, 8, 3)
    for cache in ("histories", "bodies"):
        assert (tight[(cache, "hit")], tight[(cache, "miss")]) == (0, requests), (cache, tight)
    assert (tight[("projection_branches", "hit")], tight[("projection_branches", "miss")]) == (3 * 2, 5 * 2), tight
    # with the history gone, the system prompt and every user message are looked up again (3,
    # then 4 of them: the new one was counted as it was stored); the answers, counted apart when
    # they were stored, are read back with the events (`proxy.stored_counts`)
    hits = 8 * (3 + 4)
    assert (tight[("token_counts", "hit")], tight[("token_counts", "miss")]) == (hits, requests), tight


def test_conversations_that_open_alike_under_one_key_keep_hitting(proxy, api_key):
    """8 conversations under one API key that open alike: the histories are indexed by their
    first message and the bodies by the key, and each keeps one per conversation. With room
    for 4 per key, 3 keep hitting (an LRU of 4 would hit none)."""
    requests = 8 * 2
    roomy = drive_in_turn(proxy(fresh=True).url, api_key, 8, 3, alike=True)
    for cache in ("histories", "bodies", "projection_branches"):
        assert (roomy[(cache, "hit")], roomy[(cache, "miss")]) == (requests, 0), (cache, roomy)
    small = proxy(fresh=True, caches={"histories_per_first_message": 4, "bodies_per_credential": 4})
    tight = drive_in_turn(small.url, api_key, 8, 3, alike=True)
    for cache in ("histories", "bodies"):
        assert (tight[(cache, "hit")], tight[(cache, "miss")]) == (3 * 2, 5 * 2), (cache, tight)


def test_a_memo_goes_with_its_history(proxy, api_key):
    """A branch's projection memo resumes only from the very items of its remembered history
    (`ProjectionCache`): once the history cache evicts that history, the memo goes with it (it
    could only be rebuilt, and it kept the whole history alive). 8 conversations taken in turn,
    with room for a few histories and for every memo: the memos held are those of the histories
    held."""
    p = proxy(fresh=True, caches={"history_mb": 0.004})
    drive_in_turn(p.url, api_key, 8, 3)
    held = entries(p.url, "histories")
    assert 0 < held < 8, held
    assert entries(p.url, "projection_branches") == held
