"""The per-process caches stay within the config's `caches:` bounds, filled past them through
real requests and read from the proxy's `ctxproxy_cache_entries` gauges on `/metrics`."""

from __future__ import annotations

import uuid

import httpx

from tests.support.resilience import counter

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
