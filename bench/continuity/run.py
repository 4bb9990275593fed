"""Run the sessions through a real proxy and measure what the model could still answer.

Per wire and window, three runs of the same session: through the proxy with recall, through the
proxy without it, and straight to the upstream with a window that holds the whole history (the
reference). Every run talks to the scripted upstreams of the test suite, which reject what the
real APIs reject (an over-window request included).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.continuity import model, script
from bench.continuity.wires import MAX_TOKENS, SUMMARY_MARK, WIRES
from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.proxy_process import UPSTREAM_KEY, ProxyProcess, subprocess_env
from tests.support.responses_upstream import ResponsesServer
from tests.support.upstream_server import UpstreamServer, count_text_tokens

WHOLE_WINDOW = 1_000_000
DEBUG = bool(os.environ.get("CONTINUITY_DEBUG"))


@dataclass
class Session:
    wire: str
    window: int
    mode: str
    model: str
    requests: int = 0
    errors: list[str] = field(default_factory=list)
    client_tokens: int = 0
    answers: list[dict[str, Any]] = field(default_factory=list)
    step_latency: list[float] = field(default_factory=list)
    counted: list[int] = field(default_factory=list)  # tokens per client message, in order
    upstream: Any = None  # the scripted server, to tell a question that took a recall detour

    def upstream_requests(self) -> int:
        mine = [r for r in self.upstream.requests if isinstance(r.body, dict) and r.body.get("model") == self.model]
        return sum(1 for r in mine if SUMMARY_MARK.encode() not in r.raw)


def model_name(wire: str, window: int, mode: str) -> str:
    return f"{wire}-whole" if mode == "whole" else f"{wire}-w{window}-{mode}"


def proxy_config(urls: dict[str, str], windows: list[int]) -> dict[str, Any]:
    timeouts = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}
    routes, policies = [], {}
    for window in windows:
        for mode in ("recall", "plain"):
            policies[f"w{window}-{mode}"] = {
                "context_window": window,
                "max_output_tokens": MAX_TOKENS,
                "recall": {"enabled": mode == "recall"},
            }
            for wire in WIRES:
                match: dict[str, str] = {"model": model_name(wire, window, mode)}
                if wire == "anthropic":
                    match["path"] = "/v1/messages"
                routes.append(
                    {
                        "name": f"{wire}-{window}-{mode}",
                        "match": match,
                        "upstream": {"base_url": urls[wire], "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts},
                        "policy": f"w{window}-{mode}",
                    }
                )
    # A local bench: anyone who reaches the proxy may spend the scripted upstream's key.
    return {"admin_token_env": "CTXPROXY_ADMIN_TOKEN", "open_access": True, "routes": routes, "policies": policies}


def _client_tokens(s: Session, wire: Any, history: list[Any]) -> int:
    """Tokens of the client's whole request: each message counted once (the client re-sends the
    same objects), plus the body without messages."""
    for message in history[len(s.counted) :]:
        s.counted.append(count_text_tokens(json.dumps(message)) + 4)
    return sum(s.counted) + wire.count(wire.body(s.model, []))


def _headers(wire: str) -> dict[str, str]:
    if wire == "anthropic":
        return {"x-api-key": UPSTREAM_KEY, "anthropic-version": "2023-06-01"}
    return {"Authorization": f"Bearer {UPSTREAM_KEY}"}


async def _turn(client: httpx.AsyncClient, base: str, s: Session, history: list[Any]) -> tuple[str, list[Any], float]:
    wire = WIRES[s.wire]
    body = wire.body(s.model, history)
    s.client_tokens += _client_tokens(s, wire, history)
    s.requests += 1
    t0 = time.perf_counter()
    r = await client.post(base + wire.path, json=body, headers=_headers(s.wire), timeout=300)
    if DEBUG:
        print(s.model, s.requests, r.status_code, round(time.perf_counter() - t0, 3), r.text[:150], file=sys.stderr)
    took = time.perf_counter() - t0
    if r.status_code != 200:
        s.errors.append(f"{r.status_code}: {r.text[:300]}")
        return "", [], took
    text, calls = wire.extend(history, r.json())
    return text, calls, took


async def _ask(client: httpx.AsyncClient, base: str, s: Session, history: list[Any], episode: int, run: str) -> None:
    wire = WIRES[s.wire]
    for fact in script.planted_by(episode):
        history.append(wire.user(script.question(run, fact)))
        before = s.upstream_requests()
        text, calls, took = await _turn(client, base, s, history)
        upstream = s.upstream_requests() - before
        want = script.expected(fact, episode)
        s.answers.append(
            {
                "episode": episode,
                "fact": fact.key,
                "where": fact.where,
                "want": want,
                "got": text.strip(),
                "ok": text.strip() == want,
                "seconds": took,
                "detour": upstream > 1,
            }
        )


async def run_session(client: httpx.AsyncClient, base: str, s: Session, episodes: int, steps: int) -> Session:
    wire = WIRES[s.wire]
    run = f"{s.model}-{time.time_ns() % 10**9}"
    history: list[Any] = []
    for episode in range(episodes):
        if episode == episodes // 2:
            await _ask(client, base, s, history, episode, run)
        text = script.user_text(run, episode)
        history += wire.first(text) if episode == 0 else [wire.user(text)]
        while True:
            _, calls, took = await _turn(client, base, s, history)
            s.step_latency.append(took)
            if not calls:
                break
            wire.results(history, [(cid, script.tool_output(cmd)) for cid, cmd in calls])
        if s.errors and len(s.errors) > 5:
            break
    await _ask(client, base, s, history, episodes, run)
    return s


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


def upstream_stats(wire: str, bodies: list[dict[str, Any]], window: int) -> dict[str, Any]:
    count = WIRES[wire].count
    main, over, sent, reuse_num, reuse_den, detours, prev = 0, 0, 0, 0, 0, 0, ""
    summaries = 0
    for body in bodies:
        view = WIRES[wire].view(body)
        tokens = count(body)
        reply = int(body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_output_tokens") or 0)
        if tokens + reply > window:
            over += 1
        if view.summary_request:
            summaries += 1
            continue
        main += 1
        sent += tokens
        if view.last_tool_result and "conversation_history_search" in view.last_tool_result:
            detours += 1
        flat = json.dumps([body.get(k) for k in ("tools", "system", "instructions", "messages", "input")])
        reuse_num += _common_prefix(prev, flat)
        reuse_den += len(flat)
        prev = flat
    return {
        "upstream_main": main,
        "upstream_summary": summaries,
        "over_window": over,
        "sent_tokens": sent,
        "prefix_reuse": round(reuse_num / reuse_den, 4) if reuse_den else 0.0,
        "recall_followups": detours,
    }


def summarize(s: Session, stats: dict[str, Any]) -> dict[str, Any]:
    ok = sum(a["ok"] for a in s.answers)
    detour = [a["seconds"] for a in s.answers if a["detour"]]
    direct = [a["seconds"] for a in s.answers if not a["detour"]]
    step = sorted(s.step_latency)
    return {
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
        "tokens_saved": round(1 - stats["sent_tokens"] / s.client_tokens, 4) if s.client_tokens else 0.0,
        "recall_rounds_per_100_turns": round(100 * stats["recall_followups"] / s.requests, 2) if s.requests else 0.0,
        "step_p50_ms": round(1000 * step[len(step) // 2], 1) if step else None,
        "detours": len(detour),
        "detour_added_ms": round(1000 * (sum(detour) / len(detour) - sum(direct) / len(direct)), 1)
        if detour and direct
        else None,
        **stats,
    }


async def _main(
    windows: list[int], wires: list[str], episodes: int, steps: int, concurrency: int, whole: bool = True
) -> list[dict[str, Any]]:
    windows_by_model = {model_name(w, win, m): win for w in wires for win in windows for m in ("recall", "plain")}
    windows_by_model.update({model_name(w, 0, "whole"): WHOLE_WINDOW for w in wires})
    servers = {
        "chat": UpstreamServer(api_key=UPSTREAM_KEY, context_windows=windows_by_model),
        "anthropic": AnthropicUpstream(api_key=UPSTREAM_KEY, context_windows=windows_by_model),
        "responses": ResponsesServer(context_windows=windows_by_model),
    }
    for name, server in servers.items():
        server.start()
        wire = WIRES[name]
        server.responder = lambda body, wire=wire: wire.reply(model.respond(wire.view(body), steps))
    urls = {
        "chat": servers["chat"].base_url,
        "anthropic": servers["anthropic"].url,
        "responses": servers["responses"].base_url,
    }
    with tempfile.TemporaryDirectory() as tmp:
        proxy = ProxyProcess(proxy_config(urls, windows), Path(tmp), subprocess_env()).start()
        try:
            sessions = [
                Session(w, win, m, model_name(w, win, m), upstream=servers[w])
                for w in wires
                for win in windows
                for m in ("recall", "plain")
            ] + [
                Session(w, WHOLE_WINDOW, "whole", model_name(w, 0, "whole"), upstream=servers[w])
                for w in wires
                if whole
            ]
            bases = {"chat": proxy.base_url, "anthropic": proxy.url + "/v1", "responses": proxy.base_url}
            direct = {"chat": urls["chat"], "anthropic": urls["anthropic"] + "/v1", "responses": urls["responses"]}
            gate = asyncio.Semaphore(concurrency)
            async with httpx.AsyncClient() as client:

                async def one(s: Session) -> Session:
                    async with gate:
                        base = direct[s.wire] if s.mode == "whole" else bases[s.wire]
                        return await run_session(client, base, s, episodes, steps)

                done = await asyncio.gather(*(one(s) for s in sessions))
        finally:
            proxy.stop()
            for server in servers.values():
                server.stop()
    out = []
    for s in done:
        bodies = [
            r.body for r in servers[s.wire].requests if isinstance(r.body, dict) and r.body.get("model") == s.model
        ]
        out.append(summarize(s, upstream_stats(s.wire, bodies, s.window)))
    return out


def run(
    windows: list[int], wires: list[str], episodes: int, steps: int, concurrency: int, whole: bool = True
) -> list[dict[str, Any]]:
    return asyncio.run(_main(windows, wires, episodes, steps, concurrency, whole))
