"""Shadow mode end to end: the real proxy, the OpenAI SDK, and a scripted model whose next step
depends on what its context holds.

The agent's history has a long tool result with a fact in its middle (`deploy_port=8123`). The
policy's window (3,000 tokens) is far below the model's real one (gpt-4o: 128,000), so the proxy
trims that result to fit, and the fact goes; the client's own request still fits the real window,
so each request gets a shadow twin with everything. A model that needs the fact to decide
(`deploy` with the port, else `read_config` again) diverges between the two; one that does not
(always `run_tests`) stays equivalent; a request nothing rewrote, sent twice, gives the A/A floor.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

import anthropic
import httpx

from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.anthropic_upstream import Reply as AnthropicReply
from tests.support.proxy_process import ProxyProcess
from tests.support.shadow import (
    FACT,
    POLICY,
    SHADOW,
    agent_history,
    ask,
    context_of,
    ignores_the_fact,
    needs_the_fact,
    shadow_pairs,
)
from tests.support.upstream_server import Reply, UpstreamServer
from tests.support.waiting import wait_until


def shadowed(proxy: Callable[..., ProxyProcess], **shadow: Any) -> ProxyProcess:
    policy = {**POLICY, "shadow": {**SHADOW, **shadow}}
    return proxy(policies={"default": policy})


def test_a_removed_fact_diverges_and_an_unneeded_one_does_not(
    proxy: Callable[..., ProxyProcess], upstream: UpstreamServer, api_key: str
) -> None:
    p = shadowed(proxy)
    upstream.responder = needs_the_fact
    answer, conversation = ask(p, api_key, agent_history("a"))
    assert answer.choices[0].message.tool_calls[0].function.name == "read_config"  # the trimmed context
    [pair] = shadow_pairs(p, conversation)
    shadow = pair["projection"]["shadow"]
    assert shadow["outcome"] == "diverged"
    assert "trimmed" in shadow["kinds"] and shadow["control"] is False
    assert shadow["difference"] == {"tools": [["read_config"], ["deploy"]]}
    assert shadow["steps"]["shadow"]["tools"] == [{"name": "deploy", "arguments": {"port": 8123}}]
    events = p.events(conversation)
    fact_seq = next(e["seq"] for e in events if FACT in json.dumps(e["message"]))
    assert any(low <= fact_seq <= high for low, high in shadow["removed"]["cut"] + shadow["removed"]["missing"])
    twin = upstream.chat_requests[-1].body  # the shadow: the client's own request, whole, unstreamed
    assert FACT in context_of(twin) and "stream" not in twin
    assert [t["function"]["name"] for t in twin["tools"]] == ["read_config", "deploy", "run_tests"]

    upstream.responder = ignores_the_fact
    answer, conversation = ask(p, api_key, agent_history("b"))
    [pair] = shadow_pairs(p, conversation)
    assert pair["projection"]["shadow"]["outcome"] == "equivalent"
    assert "trimmed" in pair["projection"]["shadow"]["kinds"]

    report = p.admin_json("shadow", params={"tenant": pair_tenant(p, conversation)})
    diverged = report["diverged"]
    assert [d["of"] for d in diverged] == [shadow["of"]]
    trimmed = next(g for g in report["report"]["groups"] if g["kind"] == "trimmed")
    assert (trimmed["pairs"], trimmed["diverged"], trimmed["rate"]) == (2, 1, 0.5)
    low, high = trimmed["interval"]
    assert 0 <= low <= 0.5 <= high <= 1


def pair_tenant(p: ProxyProcess, conversation: str) -> str:
    tenant: str = p.conversation(conversation)["tenant"]
    return tenant


def test_an_unrewritten_request_sent_twice_is_the_a_a_floor(
    proxy: Callable[..., ProxyProcess], upstream: UpstreamServer, api_key: str
) -> None:
    p = shadowed(proxy)
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "What is two plus two?"}]
    )
    conversation = raw.headers["x-conversation-id"]
    [pair] = shadow_pairs(p, conversation)
    shadow = pair["projection"]["shadow"]
    assert (shadow["control"], shadow["kinds"], shadow["outcome"]) == (True, [], "equivalent")
    assert "removed" not in shadow
    sent = [r.body for r in upstream.chat_requests]
    assert sent[0]["messages"] == sent[1]["messages"]  # the same request, sent twice
    assert re.search(
        r'^ctxproxy_shadow_pairs_total\{route="main",model="gpt-4o",kind="aa",outcome="equivalent"\} [1-9]',
        p_metrics(p),
        re.M,
    )
    groups = p.admin_json("shadow", params={"tenant": pair_tenant(p, conversation)})["report"]["groups"]
    assert groups == [
        {
            "route": "main",
            "model": "gpt-4o",
            "kind": "aa",
            "pairs": 1,
            "diverged": 0,
            "failed": 0,
            "rate": 0.0,
            "interval": [0.0, 0.0],
            "floor": {"pairs": 1, "diverged": 0, "failed": 0, "rate": 0.0, "interval": [0.0, 0.0]},
        }
    ]


def test_a_streamed_answer_gets_its_shadow_after_the_stream_and_nothing_of_it(
    proxy: Callable[..., ProxyProcess], upstream: UpstreamServer, api_key: str
) -> None:
    p = shadowed(proxy)
    held = threading.Event()

    def respond(body: dict[str, Any]) -> Reply:
        if body.get("stream"):
            return Reply(content="the client's own answer", hold=held)
        return Reply(content="SHADOW-ONLY text the client never sees")

    upstream.responder = respond
    stream = p.client(api_key).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Say something."}], stream=True
    )
    first = next(iter(stream))
    assert len(upstream.chat_requests) == 1  # no shadow while the client's stream is open
    held.set()
    text = (first.choices[0].delta.content or "") + "".join(
        c.choices[0].delta.content or "" for c in stream if c.choices
    )
    assert text == "the client's own answer"
    conversation = find_conversation(p, "Say something.")
    [pair] = shadow_pairs(p, conversation)
    assert pair["stream"] is False and pair["projection"]["shadow"]["outcome"] == "diverged"
    assert all("SHADOW-ONLY" not in json.dumps(e["message"]) for e in p.events(conversation))
    mains = [c for c in p.calls(conversation) if c["purpose"] == "main"]
    assert [m["response"]["content"] for m in mains] == ["the client's own answer"]
    other = p.admin_json("shadow", params={"tenant": "t_someone_else"})
    assert other["diverged"] == [] and other["report"]["groups"] == []
    tenant = pair_tenant(p, conversation)
    assert p.admin_json("shadow", params={"tenant": tenant})["report"]["totals"]["pairs"] == 1
    assert p.admin(f"conversations/{conversation}", method="DELETE").is_success  # its pairs go with it
    assert p.admin_json("shadow", params={"tenant": tenant})["report"] == {
        "totals": {"pairs": 0, "diverged": 0, "failed": 0, "rate": None, "interval": None},
        "groups": [],
    }


def find_conversation(p: ProxyProcess, first_text: str) -> str:
    for conversation in p.admin_json("conversations", params={"limit": 200})["data"]:
        events = p.events(conversation["id"])
        if events and events[0]["message"].get("content") == first_text:
            found: str = conversation["id"]
            return found
    raise AssertionError(f"no conversation opens with {first_text!r}")


def test_a_failed_shadow_is_recorded_and_never_reaches_the_client(
    proxy: Callable[..., ProxyProcess], upstream: UpstreamServer, api_key: str
) -> None:
    p = shadowed(proxy)
    upstream.push(Reply(content="fine"), Reply(status=500))
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Will the shadow fail?"}]
    )
    assert raw.parse().choices[0].message.content == "fine"
    [pair] = shadow_pairs(p, raw.headers["x-conversation-id"])
    assert pair["status"] == "error" and pair["upstream_status"] == 500
    assert pair["projection"]["shadow"]["outcome"] == "failed"


def test_the_daily_cap_stops_shadow_calls(
    proxy: Callable[..., ProxyProcess], upstream: UpstreamServer, api_key: str
) -> None:
    p = proxy(fresh=True, policies={"default": {**POLICY, "shadow": {**SHADOW, "max_usd_per_day": 0.000001}}})
    first = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "first question"}]
    )
    [pair] = shadow_pairs(p, first.headers["x-conversation-id"])
    assert pair["cost_usd"] > 0.000001  # the first one spent the day's cap
    second = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "second question"}]
    )
    wait_until(
        lambda: 'ctxproxy_shadow_skipped_total{route="main",reason="cap"} 1' in p_metrics(p),
        timeout=10,
        what="the cap's skip",
    )
    assert [c["purpose"] for c in p.calls(second.headers["x-conversation-id"])] == ["main"]
    usage = p.admin_json("usage")["totals"]["calls_by_purpose"]
    assert usage == {"main": 2, "shadow": 1}


def p_metrics(p: ProxyProcess) -> str:
    return httpx.get(f"{p.url}/metrics", timeout=5).text


def test_an_anthropic_stream_gets_its_pair_through_its_own_wire(
    proxy: Callable[..., ProxyProcess], anthropic_upstream: AnthropicUpstream, api_key: str
) -> None:
    """Another API, streamed: its wire reads both answers (a stream and a whole body) into the
    common model, and the equivalence of the two tool uses is the same as on chat completions."""
    timeouts = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
    route = {
        "name": "claude",
        "match": {"model": "claude-*", "path": "/v1/messages"},
        "upstream": {"base_url": anthropic_upstream.url, "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts},
        "policy": "default",
    }
    p = proxy(
        routes=[route], policies={"default": {"context_window": 200000, "max_output_tokens": 4096, "shadow": SHADOW}}
    )
    anthropic_upstream.responder = lambda body: AnthropicReply(tool_uses=[{"name": "ls", "input": {"dir": "src"}}])
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key)
    tools = [{"name": "ls", "description": "list a directory", "input_schema": {"type": "object"}}]
    with client.messages.stream(
        model="claude-test-1", max_tokens=200, tools=tools, messages=[{"role": "user", "content": "What is in src?"}]
    ) as stream:
        final = stream.get_final_message()
        conversation = stream.response.headers["x-conversation-id"]
    assert [block.name for block in final.content if block.type == "tool_use"] == ["ls"]
    [pair] = shadow_pairs(p, conversation)
    shadow = pair["projection"]["shadow"]
    assert shadow["outcome"] == "equivalent", shadow
    assert (
        shadow["steps"]["client"]
        == shadow["steps"]["shadow"]
        == {
            "kind": "tool_call",
            "finish": "tool_use",
            "tools": [{"name": "ls", "arguments": {"dir": "src"}}],
        }
    )
    twin = anthropic_upstream.message_requests[-1].body
    assert "stream" not in twin and twin["messages"] == [{"role": "user", "content": "What is in src?"}]


def test_the_client_has_its_whole_answer_while_the_shadow_is_still_unanswered(
    proxy: Callable[..., ProxyProcess], upstream: UpstreamServer, api_key: str
) -> None:
    p = proxy(fresh=True, policies={"default": POLICY})  # its own process: the slow shadow busies no other test
    slow = Reply(content="the same answer", delay_before_headers=3)
    upstream.push(Reply(content="the same answer"), slow)
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Is the shadow on my path?"}]
    )
    assert raw.parse().choices[0].message.content == "the same answer"
    upstream.wait_for_requests(2)  # the shadow went out after the answer...
    assert not slow.done.is_set()  # ...and the client did not wait for its reply
    [pair] = shadow_pairs(p, raw.headers["x-conversation-id"])
    assert pair["projection"]["shadow"]["outcome"] == "equivalent"


def test_shutdown_waits_for_the_shadow_in_flight_and_records_it(
    proxy: Callable[..., ProxyProcess], upstream: UpstreamServer, api_key: str
) -> None:
    p = proxy(fresh=True, policies={"default": POLICY})
    upstream.push(Reply(content="answer"), Reply(content="answer", delay_before_headers=2))
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Stop while my shadow runs."}]
    )
    upstream.wait_for_requests(2)  # the shadow is on its way when SIGTERM arrives
    assert not upstream.last_reply.done.is_set()
    p.stop()  # SIGTERM: the lifespan drains the shadow calls before the store closes
    p.start()
    [pair] = shadow_pairs(p, raw.headers["x-conversation-id"])
    assert pair["status"] == "complete" and pair["projection"]["shadow"]["outcome"] == "equivalent"
