"""No request leaves a reference cycle of the proxy's own objects, or one holding a large buffer.

`ctxproxy serve` runs young collections rarely (`proxy/serving/heap.py`, threshold 20,000): what a
request leaves in a reference cycle outlives it until a collection, and whatever is promoted
first waits for a full one. A cycle that holds a request body, a parsed history or a branch's
projection memo (a `ProjectionCache` once referenced its own renderer: every memo evicted from
the Projector's LRU, ~130 kB for a 100-message branch, waited for a full collection) raises the
resident set by that much per request.

The real proxy (`tests.support.gc_probe`: `proxy.serving.server.run` with two extra paths) turns
automatic collection off, serves chat and Anthropic requests, streamed and not, on new
conversations (more than `caches.projection_branches`, so memos are evicted), and two failures
(an upstream refusing the connection, a stream cut off), and after their records are written
reports what one collection found: nothing, the libraries' cycles included. Before: a streamed
request left ~30 objects of anyio's (`relay.StreamRelay` ran its shutdown watcher as a
task-group child), a refused one ~77 of aiohttp's holding the upstream body, a cut stream ~170
(aiohttp's errors kept where their tracebacks lead back to them, `upstream.http._forget`).
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
from tests.support.proxy_process import ProxyProcess, deep_merge, default_config, subprocess_env
from tests.support.upstream_server import Reply, UpstreamServer

pytestmark = pytest.mark.slow

CONVERSATIONS = 6
"""new conversations per kind of request, each of two turns: more than the memo's 2 branches"""
FILLER = "The build step finished; the next command lists the changed files and their sizes. " * 150
"""~12.6 kB of text in each conversation's first message: over gc_probe's 10 kB mark"""


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


def failures(p: ProxyProcess, upstream: UpstreamServer, key: str) -> str:
    """An upstream that refuses the connection (502), then a stream the upstream cuts off."""
    messages = [{"role": "user", "content": "first: " + FILLER}]
    r = p.post_chat(key, {"model": "refused-x", "messages": messages})
    assert r.status_code == 502, r.text
    upstream.push(Reply(content="one two three four five six", chunks=6, drop_after_chunks=2))
    with httpx.stream(
        "POST",
        f"{p.base_url}/chat/completions",
        json={"model": "gpt-4o", "messages": messages, "stream": True},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ) as cut:
        assert b"error" in cut.read()
    return cut.headers["x-conversation-id"]


def run_all(p: ProxyProcess, upstream: UpstreamServer) -> None:
    convs = [send(p, f"sk-gc-{uuid.uuid4().hex}", stream) for _ in range(CONVERSATIONS) for send, stream in KINDS]
    for conv in convs:  # the answers' bookkeeping runs after the client has them
        p.wait_calls(conv, 2, until=lambda cs: all(c["status"] != "pending" for c in cs))
    for _ in range(CONVERSATIONS):
        conv = failures(p, upstream, f"sk-gc-{uuid.uuid4().hex}")
        p.wait_calls(conv, 1, until=lambda cs: all(c["status"] != "pending" for c in cs))


def test_requests_leave_no_cycle_of_ours_and_none_holding_a_large_buffer(
    probe: ProxyProcess, upstream: UpstreamServer
) -> None:
    run_all(probe, upstream)  # warm-up: imports, pools, first-use caches
    assert httpx.post(f"{probe.url}/_gc/start").json() == {"started": True}
    run_all(probe, upstream)
    found = httpx.post(f"{probe.url}/_gc/report").json()
    assert found["ours"] == [], found
    assert found["big"] == [], found
    assert found["collected"] == 0, found  # the libraries' too: none of these requests makes one today
