"""Run the sessions through a real proxy, against upstreams that count tokens their own way.

Per counting mode (`tests.support.counting`: how the scripted upstreams count, enforce the window
and bill), window and wire, the same session runs through the proxy with recall. For the first
counting mode (the reference) it also runs without recall (`plain`) and straight to the upstream
with a window that holds the whole history (`whole`, one per wire). Each counting mode has its own
three scripted upstreams, which reject what the real APIs reject (an over-window request included,
with the real 400 body, by their own count). With `shadow` (`--shadow`), the upstreams' windows hold
the whole history and the policy's window is only ctxproxy's budget, so every request's unrewritten
twin fits: the rewrites are measured against the whole context. The chat upstream of a mode also
serves the summarizer: a model litellm does not know (`openai/acme-summarizer`) whose window the
proxy is not told, enforced at `SUMMARIZER_WINDOW` in that mode's count.

After the sessions, `measure.py` reads what happened from both sides: the upstreams' own
records (overflows, counts) and the proxy's admin API (call records, checkpoints).
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

from bench.continuity import measure, model, script
from bench.continuity.wires import MAX_TOKENS, WIRES
from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.proxy_process import ADMIN_TOKEN, UPSTREAM_KEY, ProxyProcess, subprocess_env
from tests.support.responses_upstream import ResponsesServer
from tests.support.upstream_server import UpstreamServer, count_text_tokens

WHOLE_WINDOW = 1_000_000
SUMMARIZER = "acme-summarizer"
SUMMARIZER_WINDOW = 16_000
COUNTINGS = ("exact", "cl100k", "framing", "bias+5", "bias-5", "jitter8")
DEBUG = bool(os.environ.get("CONTINUITY_DEBUG"))


@dataclass
class Session:
    wire: str
    window: int
    mode: str  # recall | plain | whole
    counting: str
    model: str
    requests: int = 0
    errors: list[str] = field(default_factory=list)
    client_tokens: int = 0
    history_tokens: int = 0  # the client's last request: how long the run grew
    answers: list[dict[str, Any]] = field(default_factory=list)
    step_latency: list[float] = field(default_factory=list)
    counted: list[int] = field(default_factory=list)  # tokens per client message, in order
    conversations: list[str] = field(default_factory=list)  # ids the proxy named, first seen first
    run: str = ""  # the tag in every user message of the session
    upstream: Any = None  # the scripted server, to tell a question that took a recall detour
    main: dict[str, Any] = field(default_factory=dict)  # `measure.main_side`, once the session is over

    def upstream_requests(self) -> int:
        mine = [r for r in self.upstream.requests if isinstance(r.body, dict) and r.body.get("model") == self.model]
        return len(mine)


def model_name(wire: str, window: int, mode: str, counting: str) -> str:
    return f"{wire}-whole" if mode == "whole" else f"{wire}-w{window}-{mode}-{counting}"


def _modes(counting: str, reference: str) -> tuple[str, ...]:
    return ("recall", "plain") if counting == reference else ("recall",)


def proxy_config(
    urls: dict[str, dict[str, str]], windows: list[int], countings: list[str], shadow: float = 0.0
) -> dict[str, Any]:
    """Routes and policies per counting mode, window, mode and wire; `urls[counting][wire]`;
    `shadow`: the policies' shadow rate (`proxy/shadow/`, 0: off)."""
    timeouts = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}
    routes, policies = [], {}
    for counting in countings:
        summarizer = {
            "model": f"openai/{SUMMARIZER}",
            "base_url": urls[counting]["chat"],
            "api_key_env": "UPSTREAM_KEY",
        }
        for window in windows:
            for mode in _modes(counting, countings[0]):
                policy = f"{counting}-w{window}-{mode}"
                policies[policy] = {
                    "context_window": window,
                    "max_output_tokens": MAX_TOKENS,
                    "recall": {"enabled": mode == "recall"},
                    "summarizer": summarizer,
                }
                if shadow:  # the upstreams hold the whole history: the policy's window is ctxproxy's budget
                    twin = {
                        "rate": shadow,
                        "max_usd_per_day": 1000,
                        "min_interval_s": 0,
                        "context_window": WHOLE_WINDOW,
                    }
                    policies[policy]["shadow"] = twin
                for wire in WIRES:
                    match: dict[str, str] = {"model": model_name(wire, window, mode, counting)}
                    if wire == "anthropic":
                        match["path"] = "/v1/messages"
                    routes.append(
                        {
                            "name": f"{wire}-{window}-{mode}-{counting}",
                            "match": match,
                            "upstream": {
                                "base_url": urls[counting][wire],
                                "api_key_env": "UPSTREAM_KEY",
                                "timeouts": timeouts,
                            },
                            "policy": policy,
                        }
                    )
    # A local bench: anyone who reaches the proxy may spend the scripted upstream's key.
    return {"admin_token_env": "CTXPROXY_ADMIN_TOKEN", "open_access": True, "routes": routes, "policies": policies}


def start_upstreams(counting: str, windows: dict[str, int], steps: int) -> dict[str, Any]:
    """The three scripted upstreams of one counting mode, answering as the scripted model; the
    chat one also as the summarizer (`SUMMARIZER`, its own window)."""
    servers: dict[str, Any] = {
        "chat": UpstreamServer(
            api_key=UPSTREAM_KEY, context_windows={**windows, SUMMARIZER: SUMMARIZER_WINDOW}, counting=counting
        ),
        "anthropic": AnthropicUpstream(api_key=UPSTREAM_KEY, context_windows=windows, counting=counting),
        "responses": ResponsesServer(context_windows=windows, counting=counting),
    }
    for name, server in servers.items():
        server.record_replies = False
        server.start()
        wire, count = WIRES[name], server.counting.text
        server.responder = lambda body, wire=wire, count=count: wire.reply(model.respond(wire.view(body), steps, count))
    return servers


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
    tokens = _client_tokens(s, wire, history)
    s.client_tokens += tokens
    s.history_tokens = tokens
    s.requests += 1
    t0 = time.perf_counter()
    r = await client.post(base + wire.path, json=body, headers=_headers(s.wire), timeout=300)
    took = time.perf_counter() - t0
    if DEBUG:
        print(s.model, s.requests, r.status_code, round(took, 3), r.text[:150], file=sys.stderr)
    conversation = r.headers.get("x-conversation-id")
    if conversation and conversation not in s.conversations:
        s.conversations.append(conversation)
    if r.status_code != 200:
        s.errors.append(f"{r.status_code}: {r.text[:300]}")
        return "", [], took
    text, calls = wire.extend(history, r.json())
    return text, calls, took


async def _ask(client: httpx.AsyncClient, base: str, s: Session, history: list[Any], episode: int) -> None:
    wire = WIRES[s.wire]
    for fact in script.planted_by(episode):
        history.append(wire.user(script.question(s.run, fact)))
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
    s.run = f"{s.model}-{time.time_ns() % 10**9}"
    history: list[Any] = []
    for episode in range(episodes):
        if episode == episodes // 2:
            await _ask(client, base, s, history, episode)
        text = script.user_text(s.run, episode)
        history += wire.first(text) if episode == 0 else [wire.user(text)]
        while True:
            _, calls, took = await _turn(client, base, s, history)
            s.step_latency.append(took)
            if not calls:
                break
            wire.results(history, [(cid, script.tool_output(cmd)) for cid, cmd in calls])
        if s.errors and len(s.errors) > 5:
            break
    await _ask(client, base, s, history, episodes)
    return s


def _direct(urls: dict[str, str], wire: str) -> str:
    """Where a client of `wire` talks to the scripted upstream itself (the whole-history runs)."""
    return urls[wire] + "/v1" if wire == "anthropic" else urls[wire]


def _sessions(
    wires: list[str], windows: list[int], countings: list[str], servers: dict[str, dict[str, Any]], whole: bool
) -> list[Session]:
    out = [
        Session(w, win, m, c, model_name(w, win, m, c), upstream=servers[c][w])
        for c in countings
        for win in windows
        for w in wires
        for m in _modes(c, countings[0])
    ]
    if whole:
        c = countings[0]
        out += [
            Session(w, WHOLE_WINDOW, "whole", c, model_name(w, 0, "whole", c), upstream=servers[c][w]) for w in wires
        ]
    return out


async def _main(
    windows: list[int],
    wires: list[str],
    episodes: int,
    steps: int,
    concurrency: int,
    whole: bool,
    countings: list[str],
    shadow: float,
) -> list[dict[str, Any]]:
    reference = countings[0]
    servers: dict[str, dict[str, Any]] = {}
    for counting in countings:
        sized = {
            model_name(w, win, m, counting): WHOLE_WINDOW if shadow else win
            for w in wires
            for win in windows
            for m in ("recall", "plain")
        }
        if counting == reference:
            sized.update({model_name(w, 0, "whole", counting): WHOLE_WINDOW for w in wires})
        servers[counting] = start_upstreams(counting, sized, steps)
    urls = {
        c: {"chat": s["chat"].base_url, "anthropic": s["anthropic"].url, "responses": s["responses"].base_url}
        for c, s in servers.items()
    }
    everything = [server for group in servers.values() for server in group.values()]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            proxy = ProxyProcess(proxy_config(urls, windows, countings, shadow), Path(tmp), subprocess_env()).start()
            try:
                sessions = _sessions(wires, windows, countings, servers, whole)
                bases = {"chat": proxy.base_url, "anthropic": proxy.url + "/v1", "responses": proxy.base_url}
                gate = asyncio.Semaphore(concurrency)
                async with httpx.AsyncClient() as client:

                    async def one(s: Session) -> Session:
                        async with gate:
                            base = _direct(urls[s.counting], s.wire) if s.mode == "whole" else bases[s.wire]
                            await run_session(client, base, s, episodes, steps)
                            s.main = measure.main_side(s, s.upstream)
                            return s

                    done = await asyncio.gather(*(one(s) for s in sessions))
                    # Compactions still running in the background finish while the proxy drains on
                    # SIGTERM; started again on the same store, it answers the admin API with all of them.
                    proxy.restart()
                    admin = measure.Admin(client, proxy.url, ADMIN_TOKEN)
                    records = {s.model: await admin.session(s.conversations) for s in done if s.mode != "whole"}
            finally:
                proxy.stop()
    finally:
        for server in everything:
            server.stop()
    rows = [measure.row(s, s.main, servers[s.counting]["chat"], records.get(s.model), SUMMARIZER) for s in done]
    for s, r in zip(done, rows, strict=True):
        r.update(measure.shadow_side(records.get(s.model)))
    return measure.compare_with_whole(rows)


def run(
    windows: list[int],
    wires: list[str],
    episodes: int,
    steps: int,
    concurrency: int,
    whole: bool = True,
    countings: list[str] | tuple[str, ...] = ("exact",),
    shadow: float = 0.0,
) -> list[dict[str, Any]]:
    """One row per (counting, window, wire, mode); see `measure.row` and `measure.shadow_side`
    for the columns. `shadow`: the share of requests that get a shadow pair (0: none)."""
    return asyncio.run(_main(windows, wires, episodes, steps, concurrency, whole, list(countings), shadow))
