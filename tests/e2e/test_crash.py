"""Measured row `kill -9`: a real proxy (SQLite store) killed with SIGKILL at random points --
right after an answer (while the response turn is appended), mid-stream, and while a compaction
runs or commits -- then restarted on the same database, 50 times (CI; 200 with
`CTXPROXY_LONG=1`). The client goes on as agents do (a turn whose answer it never got is sent
again). Checked after every restart and at the end: every event stored before a kill is still
there, in order, exactly once; the conversation never forks; and the stored history equals the
client-side transcript."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import httpx

from tests.e2e.test_rewriting import SMALL_POLICY, SUMMARY, WINDOW, is_summary_request
from tests.support.e2e import user
from tests.support.measure import profile, report
from tests.support.upstream_server import Reply

MODEL = "gpt-crash"


def stored(p, conv: str) -> list[tuple[int, str, Any]]:
    return [(e["seq"], e["message"]["role"], e["message"].get("content")) for e in p.events(conv)]


def kill_and_restart(p) -> None:
    assert p.proc is not None
    p.proc.kill()
    p.proc.wait(10)
    p.proc = None
    p.start()


def test_kill_9_at_random_points_loses_nothing(proxy, upstream, api_key, monkeypatch):
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    p = proxy(fresh=True, policies={"default": {**SMALL_POLICY, "trigger": 0.5, "target": 0.3}})
    rng = random.Random(2026)
    summary_asked = threading.Event()
    hold: dict[str, Reply | None] = {"next": None}

    def respond(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body):
            summary_asked.set()
            return Reply(content=SUMMARY, delay_before_headers=rng.uniform(0, 0.2))
        reply, hold["next"] = hold["next"], None
        return reply

    upstream.responder = respond
    client = p.client(api_key)
    transcript: list[dict[str, Any]] = []
    pending: str | None = None  # a user turn the client never got answered: sent again
    conv = ""
    trials = profile(50, 200)
    points = {"append": 0, "mid_stream": 0, "compaction": 0}
    checks = 0

    def turn(text: str) -> None:
        nonlocal conv
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=[*transcript, user(text)])
        conv = raw.headers["x-conversation-id"]
        transcript.extend([user(text), {"role": "assistant", "content": raw.parse().choices[0].message.content}])

    turn("objective: survive crashes")
    for trial in range(trials):
        text = pending or f"turn {trial}: " + "word " * 300
        pending = None
        point = rng.choice(sorted(points))
        points[point] += 1
        if point == "append":
            turn(text)
            time.sleep(rng.uniform(0, 0.02))  # the response turn is appended after the answer
        elif point == "mid_stream":
            reply = Reply(content="a streamed answer cut by the crash", chunks=4, hold=threading.Event())
            hold["next"] = reply
            body = {"model": MODEL, "stream": True, "messages": [*transcript, user(text)]}

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
            assert reply.first_chunk_sent.wait(15)
            pending = text
        else:
            summary_asked.clear()
            for _ in range(8):
                turn(text)
                text = f"turn {trial}+: " + "word " * 300
                if summary_asked.wait(0.3):
                    break
            time.sleep(rng.uniform(0, 0.3))  # somewhere in the summarizer call or its commit
        before = stored(p, conv)
        kill_and_restart(p)
        after = stored(p, conv)
        assert after[: len(before)] == before, f"trial {trial} ({point}): committed events changed by the crash"
        checks += 1
        if point == "mid_stream":
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
    report(
        "kill -9",
        trials=trials,
        points=points,
        events=len(events),
        lost=0,
        duplicated=0,
        reordered=0,
        checkpoints=len(checkpoints),
        checks=checks,
    )
