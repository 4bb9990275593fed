"""Budgets and rate limits: what a client key or a tenant may spend, and the verdict on a request.

An account (a client key, or a tenant) has a `Quota`: money and tokens per UTC day and month,
requests and tokens per minute. Each limit reads one counter of its period, named by account,
quantity and period (`key:key_3fa1c2:usd:2026-12-05`, `tenant:team-a:requests:2026-12-05T14:02`),
kept in the store (`Store.add_counts`) so that every replica sharing it adds to the same number.

* **Admission** (before anything is stored or sent): the request is refused when one of its
  accounts has spent a budget or the tokens of its minute (counter >= limit), or makes more
  requests this minute than allowed (the request's own +1 included). The refusal names the
  limit, what was spent and when the period resets; it is sent with `Retry-After`.
* **Charging** (when a call's record is written, `proxy/admission.py`): the call's billed tokens
  (input + output) and its cost are added to the counters of the limits its accounts have, in the
  period the call ends. An unknown cost adds nothing to a money budget.

Calls in flight when a budget runs out still finish: a budget can be overshot by what those
calls spend, never more. The next period's counters start at zero, so the next day (month,
minute) serves the request again.

Example: tenant team-a with `usd_per_day: 5`, $5.02 spent today -> 429 "Tenant 'team-a' has
spent $5.0200 of its $5.00 budget for 2026-12-05 (UTC). It resets at 2026-12-06T00:00:00Z (in
9h 58m) ...", `Retry-After: 35880`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from .errors import BudgetExceeded, RateLimited
from .store.access import Count
from .store.public import iso_utc

KEPT_AFTER_PERIOD = 120.0
"""Seconds a counter outlives its period (a call ending just after the period still finds it)."""


class Quota(BaseModel):
    """The limits of one client key or tenant; each unset one does not apply."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    usd_per_day: float | None = Field(None, gt=0)
    usd_per_month: float | None = Field(None, gt=0)
    tokens_per_day: int | None = Field(None, gt=0)
    tokens_per_month: int | None = Field(None, gt=0)
    requests_per_minute: int | None = Field(None, gt=0)
    tokens_per_minute: int | None = Field(None, gt=0)

    def limits(self) -> list[tuple[str, str, float]]:
        """(quantity, period, limit) of each limit that is set."""
        out = []
        for name, value in self:
            if value is not None:
                quantity, _, period = name.split("_")
                out.append((quantity, period, float(value)))
        return out


@dataclass(frozen=True)
class Account:
    """Whose spending a quota bounds: `kind` is `key` (a client key) or `tenant`."""

    kind: str
    name: str
    label: str
    """how messages name it: "Client key 'ci-bot'", "Tenant 'team-a'" """
    quota: Quota


@dataclass(frozen=True)
class Period:
    unit: str  # day | month | minute
    label: str
    end: float
    words: str
    """how messages name it: "2026-12-05 (UTC)", "the minute 14:02 (UTC)" """


def period(unit: str, now: float) -> Period:
    """The UTC day, month or minute `now` falls in."""
    at = datetime.fromtimestamp(now, UTC)
    if unit == "minute":
        start = at.replace(second=0, microsecond=0)
        label = start.strftime("%Y-%m-%dT%H:%M")
        return Period(unit, label, (start + timedelta(minutes=1)).timestamp(), f"the minute {label[11:]} (UTC)")
    if unit == "day":
        start = at.replace(hour=0, minute=0, second=0, microsecond=0)
        label = start.date().isoformat()
        return Period(unit, label, (start + timedelta(days=1)).timestamp(), f"{label} (UTC)")
    first = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (
        first.replace(year=first.year + 1, month=1) if first.month == 12 else first.replace(month=first.month + 1)
    )
    label = first.strftime("%Y-%m")
    return Period("month", label, following.timestamp(), f"{label} (UTC)")


@dataclass(frozen=True)
class Check:
    account: Account
    quantity: str  # usd | tokens | requests
    period: Period
    limit: float

    @property
    def name(self) -> str:
        """The quota field: `usd_per_day`, `requests_per_minute`."""
        return f"{self.quantity}_per_{self.period.unit}"

    @property
    def counter(self) -> str:
        return f"{self.account.kind}:{self.account.name}:{self.quantity}:{self.period.label}"

    def count(self, amount: float) -> Count:
        return Count(self.counter, amount, self.period.end + KEPT_AFTER_PERIOD)


def checks(accounts: list[Account], now: float) -> list[Check]:
    """Every limit of `accounts`, in the period of `now`."""
    return [
        Check(account, quantity, period(unit, now), limit)
        for account in accounts
        for quantity, unit, limit in account.quota.limits()
    ]


def admission_counts(found: list[Check]) -> list[Count]:
    """What admitting a request does to its counters: reads each, and adds its own +1 to the
    requests of its minute."""
    return [c.count(1 if c.quantity == "requests" else 0) for c in found]


def verdict(found: list[Check], values: list[float], now: float) -> RateLimited | None:
    """The refusal of a request whose admission counters read `values`, or None: admitted.
    Several limits reached: the one that resets last (retrying before then is refused anyway)."""
    refused = [
        (check, value)
        for check, value in zip(found, values, strict=True)
        if (value > check.limit if check.quantity == "requests" else value >= check.limit)
    ]
    if not refused:
        return None
    check, value = max(refused, key=lambda pair: pair[0].period.end)
    wait = max(1, math.ceil(check.period.end - now))
    reset = f"It resets at {iso_utc(check.period.end)} (in {_duration(wait)})"
    who, limit = check.account.label, check.limit
    if check.quantity == "usd":
        spent = f"{who} has spent ${value:.4f} of its ${limit:.2f} budget for {check.period.words}."
    elif check.quantity == "tokens":
        spent = f"{who} has used {value:,.0f} of its {limit:,.0f} tokens for {check.period.words}."
    else:
        spent = f"{who} may make {limit:,.0f} requests a minute; this is request {value:,.0f} of {check.period.words}."
    message = f"{spent} {reset}; retry then, or ask the proxy's operator to raise the limit."
    if check.period.unit == "minute":  # a rate limit, not a budget
        refusal: RateLimited = RateLimited(
            message, retry_after=wait, kind="requests" if check.quantity == "requests" else "tokens"
        )
    else:
        refusal = BudgetExceeded(message, retry_after=wait)
    refusal.limit = (check.account.kind, check.name)
    return refusal


def charges(accounts: list[Account], tokens: int, usd: float | None, now: float) -> list[Count]:
    """What a call that billed `tokens` and cost `usd` (None: unknown) adds to its accounts'
    counters, in the period of `now` (when it ended)."""
    out = []
    for check in checks(accounts, now):
        amount = tokens if check.quantity == "tokens" else (usd or 0.0) if check.quantity == "usd" else 0
        if amount:
            out.append(check.count(amount))
    return out


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"
