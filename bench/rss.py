"""Memory per idle conversation: RSS of a fresh ctxproxy after storing N conversations of T turns.

Each conversation is one request whose history holds T user/assistant turns of ~200-character
messages (and the new user message), on its own API key (a tenant each); the answer is stored
too. RSS is read from /proc once the requests are done; what stays per conversation is the
per-process history cache (bounded by bytes, LRU) and SQLite's page cache.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from bench.procs import Proc, rss_mb

TEXT = "The build step finished; the next command lists the changed files and their sizes. "


def conversation(i: int, turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful coding agent."}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"conversation {i} turn {t}: " + TEXT * 2})
        messages.append({"role": "assistant", "content": f"answer {t} of {i}: " + TEXT * 2})
    messages.append({"role": "user", "content": f"conversation {i}: what next?"})
    return {"model": "gpt-4o", "messages": messages}


async def _drive(port: int, conversations: int, turns: int, concurrency: int) -> tuple[int, int, float]:
    queue = list(range(conversations))
    ok = errors = 0
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            nonlocal ok, errors
            while queue:
                i = queue.pop()
                body = json.dumps(conversation(i, turns)).encode()
                headers = {"content-type": "application/json", "authorization": f"Bearer sk-mem-{i}"}
                async with session.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers=headers
                ) as r:
                    await r.read()
                    ok, errors = (ok + 1, errors) if r.status == 200 else (ok, errors + 1)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return ok, errors, time.perf_counter() - t0


def run_memory(proc: Proc, conversations: int, turns: int, log: Any) -> dict[str, Any]:
    """`proc` is a freshly started ctxproxy; one warm-up conversation first (imports, caches)."""
    asyncio.run(_drive(proc.port, 1, turns, 1))
    base = rss_mb(proc.pid)
    ok, errors, wall = asyncio.run(_drive(proc.port, conversations, turns, 8))
    time.sleep(1.0)  # let the answers' bookkeeping finish
    after = rss_mb(proc.pid)
    body = len(json.dumps(conversation(0, turns)))
    log(f"  memory: {ok} conversations stored in {wall:.1f} s, RSS {base:.1f} -> {after:.1f} MB")
    return {
        "conversations": conversations,
        "turns": turns,
        "body_bytes": body,
        "ok": ok,
        "errors": errors,
        "wall_s": round(wall, 1),
        "rss_before_mb": round(base, 1),
        "rss_after_mb": round(after, 1),
        "kb_per_conversation": round((after - base) * 1024 / max(1, ok), 1),
    }
