"""What one session's run did, read from both sides of the proxy.

From the scripted upstreams (their own records, in their own count): the requests that reached
them, the overflows they refused (main model and summarizer apart), how many requests were over
the window by the provider's count, and which carried a pruned-history marker. From the proxy's
admin API, per conversation the session used: the call records (the projection's estimate vs
the billed input, pruned ranges) and the checkpoints (committed vs failed).

Summarizer requests carry no session's model name (every policy names the same summarizer);
they are told apart by the session's run tag, which the pinned first user message carries into
every summarizer request.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from bench.continuity.wires import WIRES
from proxy.shadow.report import interval

MARKER = "<pruned_history"
_RUN_TAG = re.compile(r"\[([A-Za-z0-9_.+-]+-\d+)\] Episode \d+:")


class Admin:
    """The proxy's admin API, read once the run is over."""

    def __init__(self, client: httpx.AsyncClient, url: str, token: str) -> None:
        self.client, self.url, self.headers = client, url, {"Authorization": f"Bearer {token}"}

    async def _get(self, path: str, **params: Any) -> dict[str, Any]:
        r = await self.client.get(f"{self.url}/admin/{path}", params=params, headers=self.headers, timeout=60)
        r.raise_for_status()
        return r.json()

    async def session(self, conversations: list[str]) -> dict[str, list[dict[str, Any]]]:
        """Every call record and checkpoint of the session's conversations."""
        calls: list[dict[str, Any]] = []
        checkpoints: list[dict[str, Any]] = []
        for conversation in conversations:
            offset = 0
            while True:
                page = await self._get(f"conversations/{conversation}/calls", limit=1000, offset=offset)
                calls += page["data"]
                if not page.get("has_more"):
                    break
                offset += len(page["data"])
            checkpoints += (await self._get(f"conversations/{conversation}/checkpoints"))["data"]
        return {"calls": calls, "checkpoints": checkpoints}


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _ranges_size(ranges: Any) -> set[int]:
    seqs: set[int] = set()
    for entry in ranges or []:
        if isinstance(entry, list | tuple) and len(entry) == 2:
            seqs.update(range(int(entry[0]), int(entry[1]) + 1))
        elif isinstance(entry, int):
            seqs.add(entry)
    return seqs


def proxy_stats(records: dict[str, list[dict[str, Any]]] | None) -> dict[str, Any]:
    """Checkpoints, pruning and the estimate's error against the billed input, from the proxy."""
    if records is None:
        return {}
    calls, checkpoints = records["calls"], records["checkpoints"]
    main = [c for c in calls if c.get("purpose") == "main"]
    signed: list[float] = []
    pruned_requests, pruned = 0, set()
    for call in main:
        projection = call.get("projection") or {}
        seqs = _ranges_size(projection.get("pruned_seqs"))
        if seqs:
            pruned_requests += 1
            pruned |= seqs
        estimate = projection.get("predicted_tokens") or projection.get("sent_tokens")
        billed = (call.get("usage") or {}).get("input_total")
        if estimate and billed:
            signed.append((estimate - billed) / billed)
    errors = [abs(e) for e in signed]
    p50, p99, bias = _percentile(errors, 0.5), _percentile(errors, 0.99), _percentile(signed, 0.5)
    return {
        "proxy_main_calls": len(main),
        "proxy_summary_calls": sum(1 for c in calls if c.get("purpose") == "summary"),
        "checkpoints_committed": sum(1 for c in checkpoints if c.get("status") in ("active", "superseded")),
        "checkpoints_failed": sum(1 for c in checkpoints if c.get("status") == "failed"),
        "pruned_requests": pruned_requests,
        "pruned_events": len(pruned),
        "estimate_error_p50": round(p50, 4) if p50 is not None else None,
        "estimate_error_p99": round(p99, 4) if p99 is not None else None,
        "estimate_bias_p50": round(bias, 4) if bias is not None else None,  # > 0: the proxy over-estimates
        "estimate_samples": len(errors),
    }


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by bisection over slice comparisons (C speed on long bodies)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def upstream_stats(wire: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """What the main model was sent, counted the proxy's way (exact) for the tokens saved."""
    count = WIRES[wire].count
    main, sent, reuse_num, reuse_den, detours, prev = 0, 0, 0, 0, 0, ""
    for body in bodies:
        view = WIRES[wire].view(body)
        main += 1
        sent += count(body)
        if view.last_tool_result and "conversation_history_search" in view.last_tool_result:
            detours += 1
        flat = json.dumps([body.get(k) for k in ("tools", "system", "instructions", "messages", "input")])
        reuse_num += _common_prefix(prev, flat)
        reuse_den += len(flat)
        prev = flat
    return {
        "upstream_main": main,
        "sent_tokens": sent,
        "prefix_reuse": round(reuse_num / reuse_den, 4) if reuse_den else 0.0,
        "recall_followups": detours,
    }


def _run_tags(request: dict[str, Any]) -> set[str]:
    texts = [str(m.get("content")) for m in request.get("messages") or [] if isinstance(m, dict)]
    return set(_RUN_TAG.findall("\n".join(texts)))


def main_side(s: Any, server: Any) -> dict[str, Any]:
    """The main model's upstream, in its own count, once the session is over: what it was sent
    (tokens saved, prefix reuse, recall follow-ups), its overflows, the requests over the window
    and those that carried a pruned-history marker. Takes the session's records out of the server
    (a full run would otherwise hold every request of every session until the end)."""
    requests, mine = server.take(s.model)
    marked = sum(1 for r in requests if MARKER.encode() in r.raw or b"\\u003cpruned_history" in r.raw)
    over = sum(1 for m in mine if m.over)
    return {
        **upstream_stats(s.wire, [r.body for r in requests]),
        "upstream_requests": len(requests),
        "upstream_overflows": sum(1 for m in mine if m.error is not None),
        "over_window": over,
        "over_window_share": round(over / len(mine), 4) if mine else 0.0,
        "overflow_messages": sorted({m.message[:160] for m in mine if m.error is not None})[:3],
        "marked_requests": marked,
    }


def summarizer_side(s: Any, chat: Any, summarizer: str) -> dict[str, Any]:
    """The summarizer's requests of this session (by its run tag), in the upstream's count."""
    summaries = [m for m in chat.measured if m.model == summarizer and s.run in _run_tags(m.request)]
    return {
        "summary_requests": len(summaries),
        "summary_overflows": sum(1 for m in summaries if m.error is not None),
        "summary_over_window": sum(1 for m in summaries if m.over),
        "summary_max_counted": max((m.counted + m.max_tokens for m in summaries), default=0),
    }


def row(
    s: Any, main: dict[str, Any], chat: Any, records: dict[str, list[dict[str, Any]]] | None, summarizer: str
) -> dict:
    """One row of the report: the session, what the upstreams saw (`main`: `main_side`), what the
    proxy recorded."""
    provider = {**main, **summarizer_side(s, chat, summarizer)}
    ok = sum(a["ok"] for a in s.answers)
    detour = [a["seconds"] for a in s.answers if a["detour"]]
    direct = [a["seconds"] for a in s.answers if not a["detour"]]
    step = sorted(s.step_latency)
    per100 = 100 / provider["upstream_requests"] if provider["upstream_requests"] else 0.0
    return {
        "counting": s.counting,
        "wire": s.wire,
        "window": s.window,
        "mode": s.mode,
        "requests": s.requests,
        "errors": len(s.errors),
        "first_errors": s.errors[:2],
        "facts_asked": len(s.answers),
        "facts_correct": ok,
        "recall_rate": round(ok / len(s.answers), 4) if s.answers else 0.0,
        "wrong": [f"{a['fact']}@{a['episode']}: want {a['want']} got {a['got']!r}" for a in s.answers if not a["ok"]],
        "client_tokens": s.client_tokens,
        "history_tokens": s.history_tokens,
        "long_run": s.history_tokens > 4 * s.window,
        "tokens_saved": round(1 - main["sent_tokens"] / s.client_tokens, 4) if s.client_tokens else 0.0,
        "recall_rounds_per_100_turns": round(100 * main["recall_followups"] / s.requests, 2) if s.requests else 0.0,
        "step_p50_ms": round(1000 * step[len(step) // 2], 1) if step else None,
        "detours": len(detour),
        "detour_added_ms": round(1000 * (sum(detour) / len(detour) - sum(direct) / len(direct)), 1)
        if detour and direct
        else None,
        "overflows_per_100": round(provider["upstream_overflows"] * per100, 2),
        "summary_overflows_per_100": round(100 * provider["summary_overflows"] / provider["summary_requests"], 2)
        if provider["summary_requests"]
        else 0.0,
        "conversations": len(s.conversations),
        **provider,
        **proxy_stats(records),
    }


def compare_with_whole(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row gets the whole-history reference's facts of its wire (`whole_correct`)."""
    whole = {r["wire"]: r for r in rows if r["mode"] == "whole"}
    for r in rows:
        reference = whole.get(r["wire"])
        r["whole_correct"] = reference["facts_correct"] if reference else None
    return rows


def shadow_side(records: dict[str, list[dict[str, Any]]] | None) -> dict[str, Any]:
    """The session's shadow pairs (`python -m bench.continuity --shadow`, `proxy/shadow/`): the
    rewrite pairs and the A/A pairs (unrewritten requests sent twice), how many diverged, the
    rates and their bootstrap intervals, the rewrite kinds met, and the pairs that failed."""
    pairs = [c["projection"]["shadow"] for c in (records or {}).get("calls", []) if c.get("purpose") == "shadow"]
    compared = [p for p in pairs if p.get("outcome") != "failed"]
    rewrite = [p for p in compared if p.get("kinds")]
    control = [p for p in compared if not p.get("kinds")]
    out: dict[str, Any] = {"shadow_failed": len(pairs) - len(compared)}
    for name, group in (("shadow", rewrite), ("aa", control)):
        diverged = sum(p["outcome"] == "diverged" for p in group)
        out[f"{name}_pairs"], out[f"{name}_diverged"] = len(group), diverged
        out[f"{name}_rate"] = round(diverged / len(group), 4) if group else None
        out[f"{name}_interval"] = interval(diverged, len(group))
    out["shadow_kinds"] = sorted({kind for p in rewrite for kind in p["kinds"]})
    return out
