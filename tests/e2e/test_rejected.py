"""A request the upstream rejects leaves no trace in the stored history (issue 12, finding 2).

On each of the three APIs, stream and not, with and without an explicit `X-Conversation-Id`:
after an answered first turn, a second turn the upstream rejects (a negative `max_tokens`, a
wrong type) leaves everything the admin API shows of the conversation byte-identical -- the
conversation and its branches (heads, stamps: the default branch), each branch's events, the
projection -- and the next valid turn continues the same branch without forking."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.responses_upstream import ResponsesServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}


@pytest.fixture(scope="module")
def responses_server() -> Iterator[ResponsesServer]:
    server = ResponsesServer().start()
    yield server
    server.stop()


CLUSTER_PREFIX = f"rej-{uuid.uuid4().hex[:8]}:"


@pytest.fixture
def p(proxy, upstream, claude_server, responses_server):
    return _proxy(proxy, upstream, claude_server, responses_server)


@pytest.fixture
def p_cluster(proxy, upstream, claude_server, responses_server, redis_cluster):
    """The same proxy on the session's Redis Cluster: the cluster layout's retraction."""
    return _proxy(
        proxy, upstream, claude_server, responses_server, store=f"{redis_cluster.url}/?prefix={CLUSTER_PREFIX}"
    )


def _proxy(proxy: Any, upstream: Any, claude_server: Any, responses_server: Any, **store: str) -> Any:
    claude_server.clear()
    responses_server.clear()

    def route(name: str, model: str, url: str, path: str | None = None) -> dict[str, Any]:
        match = {"model": model, **({"path": path} if path else {})}
        upstream_ = {"base_url": url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS}
        return {"name": name, "match": match, "upstream": upstream_, "policy": "default"}

    return proxy(
        routes=[
            route("main", "gpt-*", upstream.base_url),
            route("claude", "claude-*", claude_server.url, "/v1/messages"),
            route("resp", "resp-*", responses_server.base_url),
        ],
        **store,
    )


class Chat:
    model = "gpt-4o"

    def __init__(self, p: Any, upstream: Any) -> None:
        self.p, self.upstream = p, upstream

    def post(self, key: str, history: list[dict[str, Any]], headers: dict[str, str], **extra: Any) -> httpx.Response:
        body = {"model": self.model, "messages": history, **extra}
        return httpx.post(
            f"{self.p.base_url}/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {key}", **headers},
            timeout=30,
        )

    def answer(self, r: httpx.Response) -> dict[str, Any]:
        return r.json()["choices"][0]["message"]


class Claude(Chat):
    model = "claude-test-1"

    def post(self, key: str, history: list[dict[str, Any]], headers: dict[str, str], **extra: Any) -> httpx.Response:
        body = {"model": self.model, "max_tokens": 100, "messages": history, **extra}
        return httpx.post(
            f"{self.p.base_url}/messages",
            json=body,
            headers={"x-api-key": key, "anthropic-version": "2023-06-01", **headers},
            timeout=30,
        )

    def answer(self, r: httpx.Response) -> dict[str, Any]:
        return {"role": "assistant", "content": r.json()["content"]}


class Responses(Chat):
    model = "resp-model"

    def post(self, key: str, history: list[dict[str, Any]], headers: dict[str, str], **extra: Any) -> httpx.Response:
        if "max_tokens" in extra:
            extra["max_output_tokens"] = extra.pop("max_tokens")
        body = {"model": self.model, "input": history, "store": False, **extra}
        return httpx.post(
            f"{self.p.base_url}/responses", json=body, headers={"Authorization": f"Bearer {key}", **headers}, timeout=30
        )

    def answer(self, r: httpx.Response) -> dict[str, Any]:
        text = "".join(c["text"] for item in r.json()["output"] for c in item.get("content") or [] if "text" in c)
        return {"role": "assistant", "content": text}


def snapshot(p: Any, conv: str) -> list[bytes]:
    """Everything the admin API shows of the conversation but its call records, as bytes."""
    head = p.admin(f"conversations/{conv}")
    assert head.status_code == 200, head.text
    parts = [head.content, p.admin(f"conversations/{conv}/events", params={"limit": 1000}).content]
    for branch in head.json()["branches"]:
        page = p.admin(f"conversations/{conv}/events", params={"branch": branch["id"], "limit": 1000})
        parts.append(page.content)
    parts.append(p.admin(f"conversations/{conv}/projection").content)
    return parts


WIRES = {"chat": Chat, "anthropic": Claude, "responses": Responses}
REJECTIONS = {
    "negative max_tokens": {"max_tokens": -5},
    "wrong type": {"max_tokens": "ten"},
    "negative, streamed": {"max_tokens": -5, "stream": True},
}


@pytest.mark.parametrize("explicit", [False, True], ids=["implicit", "explicit-id"])
@pytest.mark.parametrize("rejection", list(REJECTIONS))
@pytest.mark.parametrize("wire", list(WIRES))
def test_a_rejected_request_leaves_the_history_byte_identical(
    p, upstream, claude_server, responses_server, api_key, wire, rejection, explicit
):
    servers = {"chat": upstream, "anthropic": claude_server, "responses": responses_server}
    rejected_turn_leaves_no_trace(p, servers, api_key, wire, rejection, explicit)


@pytest.mark.parametrize("explicit", [False, True], ids=["implicit", "explicit-id"])
@pytest.mark.parametrize("wire", list(WIRES))
@pytest.mark.cluster
def test_a_rejected_request_leaves_no_trace_on_a_redis_cluster(
    p_cluster, upstream, claude_server, responses_server, api_key, wire, explicit
):
    servers = {"chat": upstream, "anthropic": claude_server, "responses": responses_server}
    rejected_turn_leaves_no_trace(p_cluster, servers, api_key, wire, "negative, streamed", explicit)


def rejected_turn_leaves_no_trace(
    p: Any, servers: dict[str, Any], api_key: str, wire: str, rejection: str, explicit: bool
) -> None:
    """An answered turn, a rejected one (nothing of it stays), then a valid one on the same branch."""
    api = WIRES[wire](p, servers[wire])
    headers = {"X-Conversation-Id": f"rej-{uuid.uuid4().hex}"} if explicit else {}
    first = [{"role": "user", "content": f"first question {uuid.uuid4().hex}"}]
    r1 = api.post(api_key, first, headers)
    assert r1.status_code == 200, r1.text
    conv = r1.headers["x-conversation-id"]
    history = [*first, api.answer(r1)]
    p.wait_calls(conv, 1)
    before = snapshot(p, conv)

    seen = len(servers[wire].requests)
    rejected = api.post(
        api_key, [*history, {"role": "user", "content": "a turn nobody answers"}], headers, **REJECTIONS[rejection]
    )
    assert rejected.status_code == 400, rejected.text
    assert len(servers[wire].requests) == seen + 1  # the upstream's rejection, relayed
    wait_until(lambda: snapshot(p, conv) == before, timeout=10, what="the rejected turn to leave no trace")
    calls = p.wait_calls(conv, 2)
    assert calls[-1]["status"] == "error" and calls[-1]["branch_id"] is None

    r2 = api.post(api_key, [*history, {"role": "user", "content": "second question"}], headers)
    assert r2.status_code == 200, r2.text
    assert r2.headers["x-conversation-id"] == conv
    p.wait_calls(conv, 3)
    after = p.conversation(conv)
    assert len(after["branches"]) == 1, after  # no fork at the rejected turn
    events = p.events(conv)
    users = [e["message"]["content"] for e in events if e["role"] == "user"]
    assert [u if isinstance(u, str) else u[0]["text"] for u in users] == [first[0]["content"], "second question"]
