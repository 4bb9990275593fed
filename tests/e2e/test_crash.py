"""Measured row `kill -9`: a real proxy (SQLite store) killed with SIGKILL at random points --
right after an answer (while the response turn is appended), mid-stream, and while a compaction
runs or commits -- then restarted on the same database, 50 times (CI; 200 with
`CTXPROXY_LONG=1`), over 3 proxies side by side. The client goes on as agents do (a turn whose
answer it never got is sent again). Checked after every restart and at the end: every event
stored before a kill is still there, in order, exactly once; the conversation never forks; and
the stored history equals the client-side transcript."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.e2e.test_rewriting import SMALL_POLICY, SUMMARY, WINDOW, is_summary_request
from tests.support import proxy_process
from tests.support.e2e import user
from tests.support.measure import profile, report
from tests.support.upstream_server import Reply

pytestmark = pytest.mark.soak

WORKERS = 3
"""Independent proxies (own database, own conversation) crashed side by side: a restart costs
seconds of imports, which would otherwise dominate the run."""


def stored(p, conv: str) -> list[tuple[int, str, Any]]:
    return [(e["seq"], e["message"]["role"], e["message"].get("content")) for e in p.events(conv)]


def kill_and_restart(p) -> None:
    assert p.proc is not None
    p.proc.kill()
    p.proc.wait(10)
    p.proc = None
    p.start()


class Script:
    """The upstream's side of one worker (its own model): held streams and summary sightings."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.summary_asked = threading.Event()
        self.hold_next: Reply | None = None

    def reply(self, body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body):
            self.summary_asked.set()
            return Reply(content=SUMMARY, delay_before_headers=self.rng.uniform(0, 0.2))
        reply, self.hold_next = self.hold_next, None
        return reply


def crash_worker(p, api_key: str, model: str, script: Script, trials: int) -> dict[str, Any]:
    rng = script.rng
    client = p.client(api_key)
    transcript: list[dict[str, Any]] = []
    pending: str | None = None  # a user turn the client never got answered: sent again
    conv = ""
    points = {"append": 0, "mid_stream": 0, "compaction": 0}

    def turn(text: str) -> None:
        nonlocal conv
        raw = client.chat.completions.with_raw_response.create(model=model, messages=[*transcript, user(text)])
        conv = raw.headers["x-conversation-id"]
        transcript.extend([user(text), {"role": "assistant", "content": raw.parse().choices[0].message.content}])

    turn(f"objective of {model}: survive crashes")
    for trial in range(trials):
        text = pending or f"turn {trial}: " + "word " * 300
        pending = None
        point = rng.choice(sorted(points))
        points[point] += 1
        thread = None
        if point == "append":
            turn(text)
            time.sleep(rng.uniform(0, 0.02))  # the response turn is appended after the answer
        elif point == "mid_stream":
            reply = Reply(content="a streamed answer cut by the crash", chunks=4, hold=threading.Event())
            script.hold_next = reply
            body = {"model": model, "stream": True, "messages": [*transcript, user(text)]}

            def stream(body: dict[str, Any] = body) -> None:
                try:
                    with httpx.stream(
                        "POST",
                        f"{p.base_url}/chat/completions",
                        json=body,
                        headers={"Authorization": f"Bearer {api_key}"},
                        timeout=30,
                    ) as r:
                        for _ in r.iter_lines():
                            pass
                except httpx.HTTPError:
                    pass  # the proxy died under it

            thread = threading.Thread(target=stream, daemon=True)
            thread.start()
            assert reply.first_chunk_sent.wait(30)
            pending = text
        else:
            script.summary_asked.clear()
            for _ in range(8):
                turn(text)
                text = f"turn {trial}+: " + "word " * 300
                if script.summary_asked.wait(0.3):
                    break
            time.sleep(rng.uniform(0, 0.3))  # somewhere in the summarizer call or its commit
        before = stored(p, conv)
        kill_and_restart(p)
        after = stored(p, conv)
        assert after[: len(before)] == before, f"{model} trial {trial} ({point}): committed events changed"
        if thread is not None:
            thread.join(10)
        client = p.client(api_key)
    turn(pending or "the last turn")
    events = stored(p, conv)
    assert [(role, content) for _, role, content in events] == [(m["role"], m["content"]) for m in transcript]
    assert [seq for seq, _, _ in events] == sorted({seq for seq, _, _ in events}), "duplicated or reordered seqs"
    branches = p.conversation(conv)["branches"]
    assert len(branches) == 1, f"the conversation forked: {branches}"
    checkpoints = p.admin_json(f"conversations/{conv}/checkpoints")["data"]
    assert "Traceback" not in p.stderr()
    return {"points": points, "events": len(events), "checkpoints": len(checkpoints)}


def test_kill_9_at_random_points_loses_nothing(proxy, upstream, api_key, monkeypatch):
    # Restarts run side by side on a loaded machine: allow them longer than the usual 20 s.
    monkeypatch.setattr(proxy_process, "STARTUP_TIMEOUT", 90.0)
    trials = profile(50, 200)
    models = [f"gpt-crash-{k}" for k in range(WORKERS)]
    scripts = {model: Script(2026 + k) for k, model in enumerate(models)}
    for model in models:
        monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    upstream.responder = lambda body: scripts[body["model"]].reply(body) if body.get("model") in scripts else None
    policy = {"default": {**SMALL_POLICY, "trigger": 0.5, "target": 0.3}}
    proxies = [proxy(fresh=True, policies=policy) for _ in models]  # one at a time: start-up is CPU-bound
    with ThreadPoolExecutor(WORKERS) as pool:
        share = [trials // WORKERS + (k < trials % WORKERS) for k in range(WORKERS)]
        t0 = time.monotonic()
        results = list(
            pool.map(
                lambda k: crash_worker(proxies[k], api_key, models[k], scripts[models[k]], share[k]), range(WORKERS)
            )
        )
    points = {k: sum(r["points"][k] for r in results) for k in results[0]["points"]}
    report(
        "kill -9",
        trials=sum(share),
        points=points,
        events=sum(r["events"] for r in results),
        lost=0,
        duplicated=0,
        reordered=0,
        forks=0,
        checkpoints=sum(r["checkpoints"] for r in results),
        run_s=round(time.monotonic() - t0, 1),
    )
