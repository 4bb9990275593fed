"""The usage ledger: what each call cost, and totals over any set of calls (DESIGN invariant 9).

Every number here is derived from the normalized usage of call records (`proxy/usage.py`), never
from a provider's raw usage object, so the OpenAI convention (cached tokens inside the input total)
and the Anthropic one (three disjoint input fields) cannot be mixed up:

    cost = input_uncached * input price
         + cache_read     * cache-read price  (the input price when the model has none)
         + cache_write    * cache-write price (the input price when the model has none)
         + output         * output price      (reasoning tokens are part of output)

Cost is None when the model has no price in litellm's map or the usage is unknown. What the
rewriting saved is priced the same way (`saved_cost`).

Totals never turn unknown into 0: a field is None when every record left it unknown, else the sum
of the known values, and `unknown` counts the records that did not know it. Records are written
once per call id (a rewrite replaces, never adds), so replays and duplicated final events add
nothing. Backends aggregate into `UsageCell`s (one per key, purpose and status); `summarize` turns
cells into the JSON the admin API returns, and `cells_from_calls` is the reference aggregation
the SQL of a backend must agree with (the Redis backend aggregates with it directly).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .catalog import ModelInfo
from .store.base import LEDGER_FIELDS, USAGE_GROUP_COLUMNS, CallRecord, UsageCell, UsageQuery, tokens_saved
from .usage import TOKEN_FIELDS

GROUP_BY = USAGE_GROUP_COLUMNS


def call_cost(usage: Mapping[str, int | None], info: ModelInfo | None) -> float | None:
    """USD for one call's normalized usage at the model's litellm prices; None when unknown."""
    if info is None or info.input_cost_per_token is None or info.output_cost_per_token is None:
        return None
    output = usage.get("output")
    cache_read = usage.get("cache_read")
    cache_write = usage.get("cache_write")
    uncached = usage.get("input_uncached")
    if uncached is None:
        total = usage.get("input_total")
        if total is None:
            return None
        # No breakdown reported: whatever the cache fields do not claim is uncached input.
        uncached = max(0, total - (cache_read or 0) - (cache_write or 0))
    if output is None:
        return None
    price_in = info.input_cost_per_token
    price_read = info.cache_read_cost_per_token if info.cache_read_cost_per_token is not None else price_in
    price_write = info.cache_write_cost_per_token if info.cache_write_cost_per_token is not None else price_in
    cost = (
        uncached * price_in
        + (cache_read or 0) * price_read
        + (cache_write or 0) * price_write
        + output * info.output_cost_per_token
    )
    return round(cost, 12)


def saved_cost(saved: int | None, usage: Mapping[str, int | None], info: ModelInfo | None) -> float | None:
    """USD the rewriting kept off a main call's bill: the `saved` tokens it did not send, priced
    as the call's own input was billed -- its cache-read share at the cache-read price, the rest
    at the input price (what the unsent part of the prefix would most likely have cost). Negative
    when the proxy sent more than the client (its own tools); None when a number is unknown."""
    if saved is None or info is None or info.input_cost_per_token is None:
        return None
    price_in = info.input_cost_per_token
    price_read = info.cache_read_cost_per_token if info.cache_read_cost_per_token is not None else price_in
    total, read = usage.get("input_total"), usage.get("cache_read") or 0
    share = min(1.0, read / total) if total else 0.0
    return round(saved * (share * price_read + (1 - share) * price_in), 12)


def call_values(call: CallRecord) -> dict[str, float | int | None]:
    values: dict[str, float | int | None] = {k: call.usage.get(k) for k in TOKEN_FIELDS}
    values["cost_usd"] = call.cost_usd
    values["tokens_saved"] = tokens_saved(call.purpose, call.projection)
    values["saved_usd"] = call.saved_usd if call.purpose == "main" else None
    return values


def cells_from_calls(calls: Iterable[CallRecord], query: UsageQuery) -> list[UsageCell]:
    """The reference aggregation (records with the same id count once, the last one wins)."""
    by_id = {c.id: c for c in calls if query.matches(c)}
    column = GROUP_BY.get(query.group_by or "")
    cells: dict[tuple[str | None, str, str], UsageCell] = {}
    for call in by_id.values():
        key = getattr(call, column) if column else None
        cell = cells.setdefault((key, call.purpose, call.status), UsageCell(key, call.purpose, call.status, 0))
        cell.calls += 1
        for name, value in call_values(call).items():
            if value is None:
                cell.sums.setdefault(name, None)
                cell.known.setdefault(name, 0)
                continue
            previous = cell.sums.get(name)
            cell.sums[name] = value if previous is None else previous + value
            cell.known[name] = cell.known.get(name, 0) + 1
    return list(cells.values())


def _totals(cells: list[UsageCell]) -> dict[str, Any]:
    calls = sum(c.calls for c in cells)
    by_purpose: dict[str, int] = {}
    by_status: dict[str, int] = {}
    out: dict[str, Any] = {"calls": calls}
    for cell in cells:
        by_purpose[cell.purpose] = by_purpose.get(cell.purpose, 0) + cell.calls
        by_status[cell.status] = by_status.get(cell.status, 0) + cell.calls
    out["calls_by_purpose"] = dict(sorted(by_purpose.items()))
    out["calls_by_status"] = dict(sorted(by_status.items()))
    unknown: dict[str, int] = {}
    for name in LEDGER_FIELDS:
        total: float | int | None = None
        known = 0
        # what was saved only exists for main calls: summary calls are not "unknown" there.
        relevant = [c for c in cells if name not in ("tokens_saved", "saved_usd") or c.purpose == "main"]
        for cell in relevant:
            value = cell.sums.get(name)
            known += cell.known.get(name, 0)
            if value is not None:
                total = value if total is None else total + value
        if name in ("cost_usd", "saved_usd") and total is not None:
            total = round(total, 10)
        out[name] = total
        unknown[name] = sum(c.calls for c in relevant) - known
    out["unknown"] = unknown
    return out


def summarize(cells: list[UsageCell], query: UsageQuery) -> dict[str, Any]:
    """The `/admin/usage` answer: totals over the filter, and per group when asked."""
    result: dict[str, Any] = {"filter": query.to_dict(), "totals": _totals(cells)}
    if query.group_by:
        groups: dict[str | None, list[UsageCell]] = {}
        for cell in cells:
            groups.setdefault(cell.key, []).append(cell)
        result["group_by"] = query.group_by
        result["groups"] = [
            {"key": key, **_totals(group)} for key, group in sorted(groups.items(), key=lambda kv: str(kv[0]))
        ]
    return result
