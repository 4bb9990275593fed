"""Prompt-cache affinity through the real proxy with the real SDKs (issue 29).

OpenAI routes a request to a cache machine by its prefix and its `prompt_cache_key`: a request
whose client set none gets one per conversation from the proxy (`proxy/cache_key.py`), the same
on every turn and after a compaction, another for another tenant, never in place of the
client's own. Anthropic caches by the client's breakpoints and its betas: `anthropic-beta`
reaches the upstream exactly as sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.support.anthropic_upstream import Reply as ClaudeReply
from tests.support.e2e import asks_shared_summary
from tests.support.responses_upstream import ResponsesReply, ResponsesServer
from tests.support.upstream_server import Reply, UpstreamServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

WINDOW = 6000
SMALL_POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 500,
    "keep_recent_tokens": 1500,
    "summary_chunk_tokens": 2000,
    "late_trim": 0.8,
    "overflow_wait": 20,
    "summarizer": {"timeout": 5, "max_attempts": 2},
}
SUMMARY = (
    "## Goal\nShip the release.\n## Constraints\nnone\n## Decisions\nnone\n## Key facts\nnone\n"
    "## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue."
)
TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}


def _is_summary(body: dict[str, Any]) -> bool:
    text = json.dumps(body.get("instructions") or (body.get("messages") or [{}])[0].get("content") or "")
    return "You compress the history" in text or asks_shared_summary(body)


def _keys(bodies: list[dict[str, Any]]) -> list[Any]:
    return [b.get("prompt_cache_key") for b in bodies if not _is_summary(b)]


def _chat(upstream: UpstreamServer, model: str) -> list[dict[str, Any]]:
    return [r.body for r in upstream.chat_requests if r.body.get("model") == model]


def _active_checkpoint(p: Any, conv: str) -> None:
    wait_until(
        lambda: [c for c in p.admin_json(f"conversations/{conv}/checkpoints")["data"] if c["status"] == "active"],
        interval=0.1,
        what=f"an active checkpoint of {conv}",
    )


def test_chat_one_key_per_conversation_across_turns_and_a_compaction(proxy, upstream, api_key, monkeypatch):
    model = "gpt-affinity-compaction"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    p = proxy(policies={"default": SMALL_POLICY})
    upstream.responder = lambda body: Reply(content=SUMMARY if _is_summary(body) else "noted")
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    conv = ""
    for i in range(24):
        messages.append({"role": "user", "content": f"turn {i}: " + "word " * 200})
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
        conv = conv or raw.headers["x-conversation-id"]
        assert raw.headers["x-conversation-id"] == conv
        messages.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
    _active_checkpoint(p, conv)
    for i in range(3):  # after the compaction: the summary goes first, the key stays
        messages.append({"role": "user", "content": f"later {i}"})
        messages.append(client.chat.completions.create(model=model, messages=messages).choices[0].message.model_dump())
    agent = [b for b in _chat(upstream, model) if not _is_summary(b)]
    assert len(agent) == 27
    assert any("<conversation_summary" in json.dumps(b["messages"]) for b in agent[-3:])
    keys = _keys(agent)
    assert len(set(keys)) == 1 and keys[0].startswith("ctxproxy-") and len(keys[0]) <= 64
    assert conv not in keys[0] and api_key not in keys[0]  # a hash: names neither
    summaries = [b for b in _chat(upstream, model) if _is_summary(b)]
    # ctxproxy's own summarizer request is no turn of the conversation: no key; a shared one (the
    # default mode) is the conversation's own request plus the ask: its key, to reach its cache
    assert all("prompt_cache_key" not in b for b in summaries if not asks_shared_summary(b))
    assert all(b["prompt_cache_key"] == keys[0] for b in summaries if asks_shared_summary(b))


def test_chat_tenants_get_different_keys_and_a_clients_own_key_is_kept(proxy, upstream):
    model = "gpt-affinity-tenants"
    p = proxy()
    history = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "same opening"}]
    one, two = p.client("sk-affinity-tenant-one"), p.client("sk-affinity-tenant-two")
    one.chat.completions.create(model=model, messages=history)
    two.chat.completions.create(model=model, messages=history)
    first, second = _keys(_chat(upstream, model))
    assert first and second and first != second
    own = [{"role": "user", "content": "a client that names its own key"}]
    one.chat.completions.create(model=model, messages=own, prompt_cache_key="client-key-7")
    one.chat.completions.create(model=model, messages=own, prompt_cache_key="client-key-7", stream=True)
    assert _keys(_chat(upstream, model))[2:] == ["client-key-7", "client-key-7"]


def test_chat_key_off_and_the_clients_bytes_otherwise_kept(proxy, upstream, api_key):
    model = "gpt-affinity-off"
    body = {"model": model, "messages": [{"role": "user", "content": "bytes  as   sent"}]}
    raw = json.dumps(body, indent=1).encode()
    on = proxy()
    assert on.post_chat(api_key, raw).status_code == 200
    sent = upstream.last_chat
    key = sent.body["prompt_cache_key"]
    assert sent.raw == b'{"prompt_cache_key":"' + key.encode() + b'",' + raw[1:]  # not rewritten: only the key added
    off = proxy(policies={"default": {"context_window": 128000, "max_output_tokens": 4096, "prompt_cache_key": False}})
    assert off.post_chat(api_key, raw).status_code == 200
    assert upstream.last_chat.raw == raw


@pytest.fixture(scope="module")
def responses_server() -> Iterator[ResponsesServer]:
    server = ResponsesServer(context_windows={"resp-affinity-small": WINDOW}).start()
    yield server
    server.stop()


def test_responses_one_key_per_conversation_and_the_clients_kept(proxy, responses_server, api_key):
    route = {"name": "responses", "match": {"model": "resp-*"}, "policy": "default"}
    route["upstream"] = {"base_url": responses_server.base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS}
    p = proxy(routes=[route], policies={"default": SMALL_POLICY})
    responses_server.responder = lambda body: ResponsesReply(text=SUMMARY if _is_summary(body) else "noted")
    client = p.client(api_key)
    items: list[Any] = []
    conv = ""
    for i in range(24):
        items.append({"role": "user", "content": f"turn {i}: " + "word " * 200})
        raw = client.responses.with_raw_response.create(model="resp-affinity-small", input=items, store=False)
        conv = conv or raw.headers["x-conversation-id"]
        items += [o.model_dump(exclude_none=True) for o in raw.parse().output]
    _active_checkpoint(p, conv)
    items.append({"role": "user", "content": "after the compaction"})
    client.responses.create(model="resp-affinity-small", input=items, store=False)
    agent = [b for b in responses_server.bodies if not _is_summary(b)]
    assert any("<conversation_summary" in json.dumps(b["input"]) for b in agent[-1:])
    keys = _keys(agent)
    assert len(keys) == 25 and len(set(keys)) == 1 and keys[0].startswith("ctxproxy-")
    client.responses.create(model="resp-affinity-small", input="mine", store=False, prompt_cache_key="own-key")
    assert responses_server.bodies[-1]["prompt_cache_key"] == "own-key"
    other = p.client(api_key + "-other")
    other.responses.create(model="resp-affinity-small", input=items[:1], store=False)
    assert responses_server.bodies[-1]["prompt_cache_key"] not in (keys[0], "own-key", None)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_beta_reaches_the_upstream_as_sent(proxy, anthropic_upstream, api_key, stream):
    route = {"name": "claude", "match": {"model": "claude-*", "path": "/v1/messages"}, "policy": "default"}
    route["upstream"] = {"base_url": anthropic_upstream.url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS}
    p = proxy(routes=[route])
    anthropic_upstream.responder = lambda body: ClaudeReply(text="fine")
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=30)
    betas = ["context-management-2025-06-27", "interleaved-thinking-2025-05-14"]
    edits = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    kwargs: dict[str, Any] = {"model": "claude-beta", "max_tokens": 64, "betas": betas, "context_management": edits}
    messages = [{"role": "user", "content": "hi"}]
    if stream:
        with client.beta.messages.stream(messages=messages, **kwargs) as s:  # type: ignore[arg-type]
            assert s.get_final_message().content[0].text == "fine"  # type: ignore[union-attr]
    else:
        reply = client.beta.messages.create(messages=messages, **kwargs)  # type: ignore[arg-type]
        assert reply.content[0].text == "fine"  # type: ignore[union-attr]
    sent = anthropic_upstream.message_requests[-1]
    assert sent.headers["anthropic-beta"] == ",".join(betas)  # the SDK's one header, as the client sent it
    assert sent.body["context_management"] == edits and "prompt_cache_key" not in sent.body
    # a header the client repeats, spelled its own way, arrives as it left
    raw = client.messages.with_raw_response.create(
        model="claude-beta",
        max_tokens=64,
        messages=messages,  # type: ignore[arg-type]
        extra_headers={"Anthropic-Beta": "context-management-2025-06-27 , files-api-2025-04-14"},
    )
    assert raw.status_code == 200
    assert anthropic_upstream.message_requests[-1].headers["anthropic-beta"] == (
        "context-management-2025-06-27 , files-api-2025-04-14"
    )
