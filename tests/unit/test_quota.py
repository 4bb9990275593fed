"""Budgets and rate limits as pure values (proxy/quota.py): periods at their edges, counter
names, the verdict on a request and what a call is charged."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from proxy.errors import BudgetExceeded, RateLimited
from proxy.quota import KEPT_AFTER_PERIOD, Account, Quota, admission_counts, charges, checks, period, verdict


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("unit", "now", "label", "end"),
    [
        ("day", "2026-12-05T23:59:59", "2026-12-05", "2026-12-06T00:00:00"),
        ("day", "2026-12-06T00:00:00", "2026-12-06", "2026-12-07T00:00:00"),
        ("month", "2026-12-31T12:00:00", "2026-12", "2027-01-01T00:00:00"),
        ("month", "2027-02-10T00:00:00", "2027-02", "2027-03-01T00:00:00"),
        ("minute", "2026-12-05T14:02:59.9", "2026-12-05T14:02", "2026-12-05T14:03:00"),
    ],
)
def test_periods_are_utc_and_end_where_the_next_begins(unit: str, now: str, label: str, end: str) -> None:
    found = period(unit, at(now))
    assert (found.unit, found.label, found.end) == (unit, label, at(end))


def key(**limits: float) -> Account:
    return Account("key", "key_0123456789ab", "Client key 'bot'", Quota(**limits))


def test_each_set_limit_reads_one_counter_of_its_period() -> None:
    now = at("2026-12-05T14:02:10")
    team = Account("tenant", "team-a", "Tenant 'team-a'", Quota(usd_per_month=5))
    found = checks([key(tokens_per_day=100, requests_per_minute=2), team], now)
    assert [c.counter for c in found] == [
        "key:key_0123456789ab:tokens:2026-12-05",
        "key:key_0123456789ab:requests:2026-12-05T14:02",
        "tenant:team-a:usd:2026-12",
    ]
    assert [c.amount for c in admission_counts(found)] == [0, 1, 0]  # only the request count grows
    assert checks([key()], now) == []


def test_the_verdict_names_the_limit_the_spend_and_the_reset() -> None:
    now = at("2026-12-05T14:00:00")
    found = checks([key(usd_per_day=5)], now)
    assert verdict(found, [4.99], now) is None
    refusal = verdict(found, [5.02], now)
    assert isinstance(refusal, BudgetExceeded) and refusal.status == 429 and refusal.retry_after == 10 * 3600
    assert refusal.message == (
        "Client key 'bot' has spent $5.0200 of its $5.00 budget for 2026-12-05 (UTC). It resets at "
        "2026-12-06T00:00:00.000Z (in 10h 0m); retry then, or ask the proxy's operator to raise the limit."
    )
    assert (refusal.type, refusal.code) == ("insufficient_quota", "budget_exceeded")
    assert refusal.limit == ("key", "usd_per_day")  # for ctxproxy_refused_total


def test_requests_are_refused_past_the_limit_and_the_latest_reset_wins() -> None:
    now = at("2026-12-05T14:02:30")
    found = checks([key(requests_per_minute=2, tokens_per_month=10)], now)
    assert [c.quantity for c in found] == ["tokens", "requests"]
    assert verdict(found, [0, 2], now) is None  # the request's own +1 included: the 2nd is allowed
    minute = verdict(found, [0, 3], now)
    assert type(minute) is RateLimited and minute.type == "requests" and minute.retry_after == 30
    both = verdict(found, [10, 3], now)
    assert isinstance(both, BudgetExceeded) and "2026-12 (UTC)" in both.message  # the month resets last


def test_a_call_is_charged_its_tokens_and_known_cost_only() -> None:
    now = at("2026-12-05T14:02:30")
    accounts = [key(tokens_per_day=100, usd_per_day=1, requests_per_minute=5, tokens_per_minute=50)]
    charged = {c.name: c.amount for c in charges(accounts, 120, 0.25, now)}
    assert charged == {
        "key:key_0123456789ab:tokens:2026-12-05": 120,
        "key:key_0123456789ab:usd:2026-12-05": 0.25,
        "key:key_0123456789ab:tokens:2026-12-05T14:02": 120,
    }
    unknown_cost = {c.name for c in charges(accounts, 120, None, now)}
    assert "key:key_0123456789ab:usd:2026-12-05" not in unknown_cost
    # each counter outlives its own period (a call ending just after it still finds it)
    assert {c.count(1).expires_at - c.period.end for c in checks(accounts, now)} == {KEPT_AFTER_PERIOD}


@pytest.mark.parametrize("bad", [{"usd_per_day": 0}, {"tokens_per_minute": -1}, {"per_day": 1}])
def test_quotas_are_validated(bad: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        Quota(**bad)
