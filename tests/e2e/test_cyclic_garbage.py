"""No request leaves a reference cycle of the proxy's own objects, or one holding a large buffer.

`ctxproxy serve` runs young collections rarely (`proxy/heap.py`, threshold 20,000): what a
request leaves in a reference cycle outlives it until a collection, and whatever is promoted
first waits for a full one. A cycle that holds a request body, a parsed history or a branch's
projection memo (a `ProjectionCache` once referenced its own renderer: every memo evicted from
the Projector's LRU, ~130 kB for a 100-message branch, waited for a full collection) raises the
resident set by that much per request.

The real proxy (`tests.support.gc_probe`: `proxy.server.run` with two extra paths) turns
automatic collection off, serves chat and Anthropic requests, streamed and not, on new
conversations (more than `caches.projection_branches`, so memos are evicted), and after their
records are written reports what one collection found: nothing (the libraries' cycles
included; a streamed request left ~30 objects of anyio's until `relay.StreamRelay` stopped
running its shutdown watcher as a task-group child).
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.proxy_process import UPSTREAM_KEY, ProxyProcess, deep_merge, default_config, subprocess_env

CONVERSATIONS = 6
"""new conversations per kind of request, each of two turns: more than the memo's 2 branches"""
FILLER = "The build step finished; the next command lists the changed files and their sizes. " * 150
"""~12.6 kB of text in each conversation's first message: over gc_probe's 10 kB mark"""


@pytest.fixture(scope="module")
def claude_server() -> Iterator[AnthropicUpstream]:
    server = AnthropicUpstream(api_key=UPSTREAM_KEY)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def probe(upstream_server: Any, claude_server: AnthropicUpstream, closed_port: int) -> Iterator[ProxyProcess]:
    config = default_config(upstream_server.base_url, closed_port)
    timeouts = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
    claude = {
        "name": "claude",
        "match": {"model": "claude-*", "path": "/v1/messages"},
        "upstream": {"base_url": claude_server.url, "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts},
        "policy": "default",
    }
    config = deep_merge(config, {"routes": [claude, *config["routes"]], "caches": {"projection_branches": 2}})
    with tempfile.TemporaryDirectory(prefix="gc-probe-") as workdir:
        p = ProxyProcess(config, Path(workdir), subprocess_env(), module="tests.support.gc_probe").start()
        yield p
        p.stop()


def chat(p: ProxyProcess, key: str, stream: bool) -> str:
    """Two turns of a new conversation; its id."""
    client = p.client(key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "first: " + FILLER}]
    conv = ""
    for turn in range(2):
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages, stream=stream)
        conv = raw.headers["x-conversation-id"]
        if stream:
            text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        else:
            text = raw.parse().choices[0].message.content or ""
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"turn {turn}"}]
    return conv


def claude(p: ProxyProcess, key: str, stream: bool) -> str:
    client = anthropic.Anthropic(base_url=p.url, api_key=key, max_retries=0, timeout=30)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "first: " + FILLER}]
    conv = ""
    for turn in range(2):
        kw: dict[str, Any] = {"model": "claude-sonnet-4", "max_tokens": 64, "messages": messages}
        if stream:
            with client.messages.stream(**kw) as events:
                conv = events.response.headers["x-conversation-id"]
                text = events.get_final_text()
        else:
            raw = client.messages.with_raw_response.create(**kw)
            conv = raw.headers["x-conversation-id"]
            text = raw.parse().content[0].text  # type: ignore[union-attr]
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"turn {turn}"}]
    return conv


KINDS = [(chat, False), (chat, True), (claude, False), (claude, True)]


def run_all(p: ProxyProcess) -> None:
    convs = [send(p, f"sk-gc-{uuid.uuid4().hex}", stream) for _ in range(CONVERSATIONS) for send, stream in KINDS]
    for conv in convs:  # the answers' bookkeeping runs after the client has them
        p.wait_calls(conv, 2, until=lambda cs: all(c["status"] != "pending" for c in cs))


def test_requests_leave_no_cycle_of_ours_and_none_holding_a_large_buffer(probe: ProxyProcess) -> None:
    run_all(probe)  # warm-up: imports, pools, first-use caches
    assert httpx.post(f"{probe.url}/_gc/start").json() == {"started": True}
    run_all(probe)
    found = httpx.post(f"{probe.url}/_gc/report").json()
    assert found["ours"] == [], found
    assert found["big"] == [], found
    assert found["collected"] == 0, found  # the libraries' too: none of these requests makes one today
