"""Budgets and rate limits applied (`proxy/quota.py` says what they are): admit a request before
anything of it is stored or sent, charge each call when its record is written.

A request's accounts are its client key (a configured client's or an API key's `quota`) and its
tenant (`tenants:` in the config); a caller without either is not limited. Admission reads the
accounts' counters in one store call (adding the request's own +1 to its minute), so a refused
request leaves nothing but that +1: no conversation, no event, no call record. Charging adds
every recorded call of the accounts -- the request's own, its recall rounds, the tenant's
summaries -- to the counters its limits read, after the record is stored.

The clock is the config's (`clock_offset_seconds` added to the wall clock), read through `now`
by everything that decides by period or expiry.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

from .config import Config
from .errors import StoreError
from .metrics import Metrics
from .quota import Account, Quota, admission_counts, charges, checks, verdict
from .store.base import CallRecord, Store
from .store.public import iso_utc

log = logging.getLogger("ctxproxy")

KEPT_KEY_QUOTAS = 10_000
"""API keys' quotas remembered for charging their calls (the keys admitted most recently)."""


class Admission:
    def __init__(self, store: Store, config: Config, metrics: Metrics | None = None) -> None:
        self.store = store
        self.metrics = metrics
        self.offset = config.clock_offset_seconds
        self.tenants = dict(config.tenants)
        self._clients = {c.name: c.quota for c in config.clients if c.quota is not None}
        self._keys: OrderedDict[str, Quota] = OrderedDict()
        self._labels: dict[str, str] = {}

    def now(self) -> float:
        return time.time() + self.offset

    def accounts(self, tenant: str, key: str | None) -> list[Account]:
        """The accounts a call of `tenant` made with client key `key` counts in (limited ones only)."""
        out = []
        quota = (self._clients.get(key) or self._keys.get(key)) if key is not None else None
        if key is not None and quota is not None:
            out.append(Account("key", key, self._labels.get(key, f"Client key {key!r}"), quota))
        tenant_quota = self.tenants.get(tenant)
        if tenant_quota is not None:
            out.append(Account("tenant", tenant, f"Tenant {tenant!r}", tenant_quota))
        return out

    async def admit(self, tenant: str, key: tuple[str, str, Quota] | None) -> None:
        """Raise `RateLimited` (or `BudgetExceeded`) when a limit of `tenant` or of the client
        key is reached; `key` is the key's id, name and quota (`auth.Caller.account`)."""
        if key is not None and key[0] not in self._clients:
            key_id, name, quota = key
            self._keys[key_id] = quota
            self._keys.move_to_end(key_id)
            self._labels[key_id] = f"Client key {name!r}"
            while len(self._keys) > KEPT_KEY_QUOTAS:
                dropped, _ = self._keys.popitem(last=False)
                self._labels.pop(dropped, None)
        now = self.now()
        found = checks(self.accounts(tenant, None if key is None else key[0]), now)
        if not found:
            return
        values = await self.store.add_counts(admission_counts(found))
        refused = verdict(found, values, now)
        if refused is not None:
            if self.metrics is not None and refused.limit is not None:
                self.metrics.observe_refused(*refused.limit)
            raise refused

    async def standing(self, account: Account) -> list[dict[str, Any]]:
        """Each limit of `account` with what its period has used so far and when it resets."""
        now = self.now()
        found = checks([account], now)
        values = await self.store.add_counts([c.count(0) for c in found]) if found else []
        return [
            {
                "quantity": check.quantity,
                "per": check.period.unit,
                "period": check.period.label,
                "limit": check.limit,
                "used": value,
                "resets_at": check.period.end,
                "resets_at_iso": iso_utc(check.period.end),
            }
            for check, value in zip(found, values, strict=True)
        ]

    async def charge(self, call: CallRecord) -> None:
        """Add the call's billed tokens and cost to its accounts' counters (after its record is
        stored); a store failure is logged: the call is answered and recorded already."""
        accounts = self.accounts(call.tenant, call.client)
        if not accounts:
            return
        usage = call.usage
        tokens = (usage.get("input_total") or 0) + (usage.get("output") or 0)
        counts = charges(accounts, tokens, call.cost_usd, self.now())
        if not counts:
            return
        try:
            await self.store.add_counts(counts)
        except StoreError as exc:
            log.error("call %s not charged to its budgets: %s", call.id, exc)
