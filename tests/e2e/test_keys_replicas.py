"""Client keys, budgets and rate limits on two replicas sharing one Redis store (two real proxy
processes, one private redis-server): a key made on one replica serves on the other and is
refused by both once revoked; what one replica's calls spend counts on the other, so a budget
spent on A answers 429 on B in each API's shape, storing nothing; the next day (both replicas
restarted with the config's clock one day ahead) serves it; a per-minute request limit holds over
requests spread across both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.test_keys_budgets import (
    WIRES,
    Agent,
    check_shape,
    fresh_minute,
    keys_config,
    make_key,
    refused,
    stored,
    tomorrow,
)
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow


@pytest.fixture
def shared_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pair(proxy, shared_redis, servers):
    def start(**over: Any) -> tuple[Any, Any]:
        store = f"{shared_redis.url}?prefix=keys-{uuid.uuid4().hex[:8]}:"
        config = keys_config(servers, store=store, **over)
        return proxy(fresh=True, **config), proxy(fresh=True, **config)

    return start


@pytest.mark.parametrize("wire", WIRES)
def test_a_budget_spent_on_one_replica_is_refused_on_the_other_until_tomorrow(pair, servers, wire):
    a, b = pair(tenants={"team-a": {"tokens_per_month": 10_000_000}})
    made = make_key(a, quota={"tokens_per_day": 1})
    on_a = Agent(a, wire, made["key"])
    on_a.ask("turn one")  # made on A, spent on A
    assert on_a.conversation is not None
    a.wait_calls(on_a.conversation, 1)
    on_b = Agent(b, wire, made["key"])
    on_b.history = list(on_a.history)
    before, sent = stored(b, on_a.conversation), len(servers[wire].requests)

    status, body, headers = refused(on_b, "turn two")  # B sees what A spent
    assert status == 429
    assert check_shape(wire, body, headers, "budget_exceeded").startswith("Client key 'bot' has used")
    assert stored(a, on_a.conversation) == before and len(servers[wire].requests) == sent
    # the tenant's month counted the same call, whichever replica reads it
    month_a = a.admin_json("tenants")["data"][0]["standing"][0]
    month_b = b.admin_json("tenants")["data"][0]["standing"][0]
    assert month_a == month_b and month_a["used"] > 0, (month_a, month_b)

    tomorrow(a)
    tomorrow(b)
    on_b.ask("turn two")
    assert on_b.conversation == on_a.conversation
    b.wait_calls(on_a.conversation, 2)
    assert stored(a, on_a.conversation) == (before[0] + 2, before[1] + 1)


def test_keys_made_or_revoked_on_one_replica_hold_on_both(pair, servers):
    a, b = pair()
    made = make_key(a, quota={"requests_per_minute": 3})
    assert [k["id"] for k in b.admin_json("keys")["data"]] == [made["id"]]
    fresh_minute()
    for n, p in enumerate((a, b, a)):
        Agent(p, "openai_chat", made["key"]).ask(f"request {n}")
    status, body, headers = refused(Agent(b, "openai_chat", made["key"]), "the fourth")  # 3 a minute, over both
    assert status == 429
    check_shape("openai_chat", body, headers, "rate_limit_exceeded")
    assert b.admin(f"keys/{made['id']}", "DELETE").status_code == 200
    for p in (a, b):
        with pytest.raises(openai.AuthenticationError):
            Agent(p, "openai_chat", made["key"]).ask("revoked")
