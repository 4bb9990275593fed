"""Delete racing compaction and appends: ``DELETE /admin/conversations/{id}`` while turns of the
conversation are in flight (held upstream, streamed and not) and its background compaction runs
(its summary held upstream), on SQLite and on Redis, many trials.

Each trial's history carries a unique canary (in user text, a tool result, the model's answers and
the summary). After the race settles the store is read directly: no table row (SQLite) or key or
identity-index field (Redis) names the deleted conversation or its branches -- no late append,
call record, lease or checkpoint brought it back. A turn that reached the proxy after the delete
is a new conversation (the client re-sent its history; a different id): it is deleted too, and at
the end the canaries must be gone from the SQLite database and WAL files and from every Redis
value.

Trials: 10 per backend (20), ``CTXPROXY_LONG=1``: 50 per backend (100).
"""

from __future__ import annotations

import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_rewriting import SMALL_POLICY, WINDOW, is_summary_request
from tests.support.redis_server import RedisServer
from tests.support.resilience import (
    counter,
    profile,
    redis_keys_of,
    redis_prefix,
    redis_values_containing,
    sqlite_files_bytes,
    sqlite_rows_of,
)
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "gpt-delete-race"
TRIALS = profile(10, 50)
RACERS = 4


@pytest.fixture(params=["sqlite", "redis"])
def backend(request, proxy, upstream, monkeypatch):
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    policy = {**SMALL_POLICY, "summarizer": {"timeout": 30, "max_attempts": 1}}
    if request.param == "sqlite":
        p = proxy(fresh=True, policies={"default": policy})
        yield p, None, None
        return
    server = RedisServer().start()
    prefix = redis_prefix()
    try:
        p = proxy(fresh=True, policies={"default": policy}, store=f"{server.url}?prefix={prefix}")
        yield p, server.client(), prefix
    finally:
        p.stop()
        server.stop()


def history(canary: str, turns: int) -> list[dict[str, Any]]:
    """A tool-using history long enough to cross the compaction trigger of a 6k window."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Delete-race agent."},
        {"role": "user", "content": f"objective {canary}: migrate the queue"},
    ]
    for t in range(turns):
        call = {"id": f"call_{t}", "type": "function", "function": {"name": "bash", "arguments": '{"c": "ls"}'}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        words = " ".join(f"w{t}_{k}" for k in range(60))
        messages.append({"role": "tool", "tool_call_id": f"call_{t}", "content": f"{canary} out {t} {words}"})
        messages.append({"role": "user", "content": f"step {t} {canary} " + " ".join(f"u{t}_{k}" for k in range(30))})
        messages.append({"role": "assistant", "content": f"done {t} {canary}"})
    return messages


class Script:
    def __init__(self, canary: str, rng: random.Random) -> None:
        self.canary, self.rng = canary, rng
        self.replies: list[Reply] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            delay = self.rng.uniform(0.0, 0.6)
            if is_summary_request(body):
                text = (
                    f"## Goal\nMigrate the queue ({self.canary}).\n## Constraints\nnone\n## Decisions\nnone\n"
                    "## Key facts\nnone\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\ngo on"
                )
                reply = Reply(content=text, delay_before_headers=delay)
            else:
                reply = Reply(content=f"answer {self.canary}", delay_before_headers=delay, delay_between_chunks=0.02)
            self.replies.append(reply)
            return reply


def send(p: Any, api_key: str, messages: list[dict[str, Any]], stream: bool) -> str | None:
    """One turn; the conversation id the proxy answered with (None when it refused the request)."""
    body = {"model": MODEL, "messages": messages, "stream": stream}
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.stream("POST", f"{p.base_url}/chat/completions", json=body, headers=headers, timeout=60) as r:
        r.read()
        return r.headers.get("x-conversation-id")


def test_delete_racing_compaction_and_appends(backend, upstream):
    p, rclient, prefix = backend
    rng = random.Random(1234)
    canaries: list[str] = []
    resurrected: dict[str, Any] = {}
    recreated: set[str] = set()
    api_key = f"sk-test-{uuid.uuid4().hex}"
    main_before = counter(p.url, "ctxproxy_requests_total")

    sent = summaries = 0
    deleted_ids: list[tuple[str, list[str]]] = []

    def check(conv: str, branches: list[str]) -> None:
        if rclient is None:
            rows: Any = sqlite_rows_of(p.db_path, conv, branches)
        else:
            rows = redis_keys_of(rclient, prefix, conv, branches)
        if rows:
            resurrected[conv] = rows

    for _ in range(TRIALS):
        canary = f"CANARY{uuid.uuid4().hex}"
        canaries.append(canary)
        upstream.responder = script = Script(canary, rng)
        messages = history(canary, rng.randint(11, 13))
        conv = send(p, api_key, messages + [{"role": "user", "content": "start"}], stream=False)
        sent += 1
        assert conv is not None
        branches = [b["id"] for b in p.conversation(conv)["branches"]]

        def racer(k: int, messages: list[dict[str, Any]] = messages, canary: str = canary) -> str | None:
            tail = [{"role": "user", "content": "start"}, {"role": "assistant", "content": f"answer {canary}"}]
            turn = [{"role": "user", "content": f"racer {k} {canary}"}]
            return send(p, api_key, messages + tail + turn, stream=k % 2 == 0)

        with ThreadPoolExecutor(RACERS + 1) as pool:
            futures = [pool.submit(racer, k) for k in range(RACERS)]
            threading.Event().wait(rng.uniform(0.0, 0.5))  # the delete lands anywhere in the race
            deleted = p.admin(f"conversations/{conv}", method="DELETE")
            assert deleted.status_code in (200, 204), deleted.text
            ids = [f.result() for f in futures]
        sent += RACERS
        recreated.update(i for i in ids if i is not None and i != conv)

        # settle: every upstream answer delivered and every main call recorded
        def settled(script: Script = script, main_before: float = main_before) -> bool:
            if not all(r.done.is_set() for r in list(script.replies)):
                return False
            mains = sum(1 for r in upstream.chat_requests if not is_summary_request(r.body))
            return counter(p.url, "ctxproxy_requests_total") - main_before >= mains

        wait_until(settled, timeout=30, what="the race to settle")
        summaries += any(is_summary_request(r.body) for r in upstream.chat_requests)
        upstream.clear()
        main_before = counter(p.url, "ctxproxy_requests_total")
        deleted_ids.append((conv, branches))
        check(conv, branches)
        for other in recreated:
            p.admin(f"conversations/{other}", method="DELETE")
        recreated.clear()

    for conv, branches in deleted_ids:  # and nothing came back later either
        check(conv, branches)
    assert summaries >= TRIALS // 2, f"only {summaries} of {TRIALS} trials raced a compaction"
    assert resurrected == {}, f"resurrected after delete: {resurrected}"
    if rclient is None:
        data = sqlite_files_bytes(Path(p.db_path))
        found = [c for c in canaries if c.encode() in data]
    else:
        found = [c for c in canaries if redis_values_containing(rclient, prefix, c.encode())]
    assert found == [], f"canaries still stored: {found}"
    print(
        f"delete race: {TRIALS} trials, {sent} requests, {summaries} with a compaction, resurrected 0, canaries left 0"
    )
