"""Client keys made through the admin API, budgets and rate limits, through the real SDKs.

A key made by `POST /admin/keys` serves its tenant at once and is refused once revoked or expired;
a budget spent mid-conversation answers 429 in the API's own shape (OpenAI chat and Responses:
`openai.RateLimitError`; Anthropic: `anthropic.RateLimitError`) with `retry-after` and the reset
time in the message, stores nothing (no event, no call record, nothing sent upstream); the next
day's budget serves the same request (the proxy restarted with `clock_offset_seconds: 86400`, the
config's clock). On SQLite here; on two replicas sharing Redis in test_keys_replicas.py.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml

TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
WIRES = ("openai_chat", "openai_responses", "anthropic")
MODELS = {"openai_chat": "gpt-4o", "openai_responses": "resp-4o", "anthropic": "claude-3-5-haiku-20241022"}


def keys_config(servers: dict[str, Any], **over: Any) -> dict[str, Any]:
    """Three routes that spend the operator's key, no configured clients: only keys made through
    the admin API are served."""

    def route(name: str, model: str, base_url: str, path: str | None = None) -> dict[str, Any]:
        match = {"model": model, **({"path": path} if path else {})}
        upstream = {"base_url": base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": TIMEOUTS}
        return {"name": name, "match": match, "upstream": upstream, "policy": "default"}

    return {
        "open_access": False,
        "routes": [
            route("claude", "claude-*", servers["anthropic"].url, "/v1/messages"),
            route("responses", "resp-*", servers["openai_responses"].base_url),
            route("main", "gpt-*", servers["openai_chat"].base_url),
            route("passthrough", "pass-*", servers["openai_chat"].base_url),
        ],
        **over,
    }


def make_key(p: Any, **body: Any) -> dict[str, Any]:
    r = p.admin("keys", "POST", json={"name": "bot", "tenant": "team-a", **body})
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["key"].startswith("ctxp-") and made["hint"] == made["key"][-4:] and made["source"] == "api"
    return made


class Agent:
    """One conversation on one wire through its real SDK; `ask` sends the whole history."""

    def __init__(self, p: Any, wire: str, key: str, stream: bool = False) -> None:
        self.wire, self.model, self.stream = wire, MODELS[wire], stream
        self.retries = 0  # the SDK's max_retries
        self.history: list[dict[str, Any]] = []
        self.conversation: str | None = None
        self.p, self.key = p, key

    def sdk(self) -> Any:
        if self.wire == "anthropic":
            return anthropic.Anthropic(base_url=self.p.url, api_key=self.key, max_retries=self.retries, timeout=30)
        return openai.OpenAI(base_url=self.p.base_url, api_key=self.key, max_retries=self.retries, timeout=30)

    def ask(self, text: str) -> str:
        messages = [*self.history, {"role": "user", "content": text}]
        answer = self._streamed(messages) if self.stream else self._whole(messages)
        self.history = [*messages, {"role": "assistant", "content": answer}]
        return answer

    def _streamed(self, messages: list[dict[str, Any]]) -> str:
        client = self.sdk()
        if self.wire == "anthropic":
            create = client.messages.with_streaming_response.create
            kw: dict[str, Any] = {"max_tokens": 50, "messages": messages}
        elif self.wire == "openai_responses":
            create, kw = client.responses.with_streaming_response.create, {"input": messages, "store": False}
        else:
            create, kw = client.chat.completions.with_streaming_response.create, {"messages": messages}
        parts: list[str] = []
        with create(model=self.model, stream=True, **kw) as raw:
            self.conversation = raw.headers["x-conversation-id"]
            for event in raw.parse():
                if (
                    self.wire == "anthropic"
                    and event.type == "content_block_delta"
                    and event.delta.type == "text_delta"
                ):
                    parts.append(event.delta.text)
                elif self.wire == "openai_responses" and event.type == "response.output_text.delta":
                    parts.append(event.delta)
                elif self.wire == "openai_chat" and event.choices:
                    parts.append(event.choices[0].delta.content or "")
        return "".join(parts)

    def _whole(self, messages: list[dict[str, Any]]) -> str:
        client = self.sdk()
        if self.wire == "anthropic":
            raw = client.messages.with_raw_response.create(model=self.model, max_tokens=50, messages=messages)
            answer = "".join(b.text for b in raw.parse().content if b.type == "text")
        elif self.wire == "openai_responses":
            raw = client.responses.with_raw_response.create(model=self.model, input=messages, store=False)
            answer = raw.parse().output_text
        else:
            raw = client.chat.completions.with_raw_response.create(model=self.model, messages=messages)
            answer = raw.parse().choices[0].message.content or ""
        self.conversation = raw.headers["x-conversation-id"]
        return str(answer)


def refused(agent: Agent, text: str) -> tuple[int, dict[str, Any], httpx.Headers]:
    """The 429 the SDK raises for `text`: its status, body and headers."""
    errors = (anthropic.RateLimitError,) if agent.wire == "anthropic" else (openai.RateLimitError,)
    with pytest.raises(errors) as info:
        agent.ask(text)
    response = info.value.response
    return response.status_code, response.json(), response.headers


def check_shape(wire: str, body: dict[str, Any], headers: httpx.Headers, code: str) -> str:
    """The 429 is in the API's own error shape, with Retry-After and the reset time; its message."""
    if wire == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error", body
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["code"] == code, body
    message = body["error"]["message"]
    wait = int(headers["retry-after"])
    assert 0 < wait <= 31 * 86400
    assert "It resets at" in message and "retry then" in message, message
    return str(message)


def refused_count(p: Any) -> float:
    """How many requests the proxy refused by a limit (`ctxproxy_refused_total`, every label)."""
    text = httpx.get(f"{p.url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("ctxproxy_refused_total{")
    )


def stored(p: Any, conversation: str) -> tuple[int, int]:
    """How many events and call records the conversation holds."""
    events = p.admin_json(f"conversations/{conversation}/events", params={"limit": 1000})["data"]
    calls = p.admin_json(f"conversations/{conversation}/calls", params={"limit": 1000})["data"]
    return len(events), len(calls)


def tomorrow(p: Any) -> None:
    """Restart `p` with its clock one day ahead: the next day's budget period."""
    p.config["clock_offset_seconds"] = 86400
    p.config_path.write_text(yaml.safe_dump(p.config, sort_keys=False))
    p.restart()


QUOTAS = {
    "openai_chat": ("key", {"usd_per_day": 0.000001}),
    "anthropic": ("key", {"tokens_per_day": 1}),
    "openai_responses": ("tenant", {"tokens_per_day": 1}),
}
"""Per wire, whose budget runs out (the key's or the tenant's) and which one (money or tokens)."""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("wire", WIRES)
def test_a_budget_spent_mid_conversation_answers_429_stores_nothing_and_tomorrow_serves(proxy, servers, wire, stream):
    whose, quota = QUOTAS[wire]
    tenants = {"team-a": quota} if whose == "tenant" else {}
    p = proxy(fresh=True, **keys_config(servers, tenants=tenants))
    made = make_key(p, quota=quota if whose == "key" else {})
    agent = Agent(p, wire, made["key"], stream)
    agent.ask("turn one")  # within budget: served (a streamed call is charged when its stream ends)
    assert agent.conversation is not None
    p.wait_calls(agent.conversation, 1)
    before, upstream_before = stored(p, agent.conversation), len(servers[wire].requests)
    conversations_before = p.admin_json("conversations", params={"limit": 1000})["data"]

    status, body, headers = refused(agent, "turn two")
    assert status == 429
    message = check_shape(wire, body, headers, "budget_exceeded")
    who = "Client key 'bot'" if whose == "key" else "Tenant 'team-a'"
    assert message.startswith(who), message
    reset = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert f"resets at {reset}T00:00:00" in message, message
    assert headers["x-should-retry"] == "false"
    # an SDK left to retry (its default 2 retries) asks once: hours away, a retry would be refused
    refusals = refused_count(p)
    with pytest.raises(anthropic.RateLimitError if wire == "anthropic" else openai.RateLimitError):
        retrying = Agent(p, wire, made["key"], stream)
        retrying.history, retrying.retries = list(agent.history), 2
        retrying.ask("turn two")
    assert refused_count(p) == refusals + 1
    # nothing stored, nothing sent upstream
    assert stored(p, agent.conversation) == before
    assert len(servers[wire].requests) == upstream_before
    assert p.admin_json("conversations", params={"limit": 1000})["data"] == conversations_before
    # what the standing says
    standing = next(k for k in p.admin_json("keys")["data"] if k["id"] == made["id"])["standing"]
    if whose == "key":
        assert standing[0]["used"] >= standing[0]["limit"] and standing[0]["per"] == "day", standing
    else:
        [team] = p.admin_json("tenants")["data"]
        assert team["tenant"] == "team-a" and team["standing"][0]["used"] >= 1, team

    tomorrow(p)
    agent.ask("turn two")  # the same request, the next day: served, in the same conversation
    p.wait_calls(agent.conversation, 2)
    events, calls = stored(p, agent.conversation)
    assert (events, calls) == (before[0] + 2, before[1] + 1)
    assert len(servers[wire].requests) == upstream_before + 1


def test_keys_are_made_listed_revoked_and_expire(proxy, servers):
    client = {"name": "alice", "key_env": "UPSTREAM_KEY", "tenant": "team-c", "quota": {"usd_per_month": 5}}
    p = proxy(fresh=True, **keys_config(servers, clients=[client], request_log={"level": "debug", "format": "json"}))
    made = make_key(p, routes=["main"], quota={"requests_per_minute": 100})
    short = make_key(p, name="short", expires_at=time.time() + 2)
    listed = p.admin_json("keys")["data"]
    assert [(k["source"], k["name"]) for k in listed] == [("config", "alice"), ("api", "bot"), ("api", "short")]
    assert all("key" not in k and "digest" not in k for k in listed)  # shown once, never listed
    assert listed[0]["limits"] == {"usd_per_month": 5.0} and listed[1]["routes"] == ["main"]
    assert listed[1]["standing"][0] | {"used": 0.0} == listed[1]["standing"][0]

    agent = Agent(p, "openai_chat", made["key"])
    agent.ask("hello")
    assert p.admin_json(f"conversations/{agent.conversation}")["tenant"] == "team-a"
    p.wait_calls(agent.conversation or "", 1)
    by_key = p.admin_json("usage", params={"group_by": "client"})
    assert made["id"] in {g["key"] for g in by_key["groups"]}, by_key
    logged = [json.loads(line) for line in p.stderr().splitlines() if line.startswith("{") and '"client"' in line]
    assert [line["client"] for line in logged] == [made["id"]] and made["key"] not in p.stderr()
    # the store holds the key's digest, never the key (the database file and its WAL)
    files = list(p.workdir.glob("ctxproxy.db*"))
    assert files and not any(made["key"].encode() in f.read_bytes() for f in files)
    # a route outside its routes: 403 in OpenAI's shape
    with pytest.raises(openai.PermissionDeniedError):
        p.client(made["key"]).chat.completions.create(model="pass-4o", messages=[{"role": "user", "content": "x"}])
    # revoked: 401 at once
    assert p.admin(f"keys/{made['id']}", "DELETE").json() == {"deleted": made["id"]}
    with pytest.raises(openai.AuthenticationError):
        agent.ask("again")
    assert p.admin(f"keys/{made['id']}", "DELETE").status_code == 404
    assert p.admin("keys/alice", "DELETE").status_code == 409  # configured: removed in the file
    # expired: 401 naming the expiry
    time.sleep(2.2)
    with pytest.raises(openai.AuthenticationError, match="expired at"):
        Agent(p, "openai_chat", short["key"]).ask("late")


@pytest.mark.parametrize(
    "body",
    [
        {"tenant": "team-a"},
        {"name": "x y", "tenant": "team-a"},
        {"name": "bot", "tenant": "t_abc"},
        {"name": "bot", "tenant": "team-a", "routes": ["nope"]},
        {"name": "bot", "tenant": "team-a", "quota": {"usd_per_day": -1}},
        {"name": "bot", "tenant": "team-a", "quota": {"dollars": 1}},
        {"name": "bot", "tenant": "team-a", "expires_at": "yesterday"},
        {"name": "bot", "tenant": "team-a", "expires_at": 1},
    ],
)
def test_bad_key_requests_are_400s_that_say_why(proxy, servers, body):
    p = proxy(**keys_config(servers, admin_token_env="CTXPROXY_ADMIN_TOKEN"))
    r = p.admin("keys", "POST", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] in {"name", "tenant", "routes", "quota", "expires_at"}


def fresh_minute() -> None:
    """Wait out the end of a minute, so that a test's requests fall in one minute."""
    if time.time() % 60 > 50:
        time.sleep(60 - time.time() % 60 + 0.1)


@pytest.mark.parametrize("wire", WIRES)
def test_requests_per_minute_answer_429_with_retry_after(proxy, servers, wire):
    p = proxy(fresh=True, **keys_config(servers))
    made = make_key(p, quota={"requests_per_minute": 2})
    fresh_minute()
    for n in range(2):
        Agent(p, wire, made["key"]).ask(f"request {n} {uuid.uuid4().hex}")
    status, body, headers = refused(Agent(p, wire, made["key"]), "one too many")
    assert status == 429
    message = check_shape(wire, body, headers, "rate_limit_exceeded")
    assert int(headers["retry-after"]) <= 60 and "may make 2 requests a minute" in message
    if wire != "anthropic":
        assert body["error"]["type"] == "requests"
    assert len(servers[wire].requests) == 2


def test_tokens_per_minute_answer_429_until_the_next_minute(proxy, servers):
    p = proxy(fresh=True, **keys_config(servers, tenants={"team-a": {"tokens_per_minute": 1}}))
    made = make_key(p)
    fresh_minute()
    agent = Agent(p, "openai_chat", made["key"])
    agent.ask("first")
    p.wait_calls(agent.conversation or "", 1)
    status, body, headers = refused(agent, "second")
    assert status == 429 and body["error"]["type"] == "tokens" and int(headers["retry-after"]) <= 60
    assert "Tenant 'team-a' has used" in body["error"]["message"]
    assert 'ctxproxy_refused_total{account="tenant",limit="tokens_per_minute"} 1' in httpx.get(f"{p.url}/metrics").text
    # embeddings are admitted like model calls: refused too, and nothing reaches the upstream
    sent = len(servers["openai_chat"].requests)
    with pytest.raises(openai.RateLimitError):
        p.client(made["key"]).embeddings.create(model="gpt-embed-small", input=["hello"])
    assert len(servers["openai_chat"].requests) == sent
