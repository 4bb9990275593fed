"""The store's calls per request, in-process (`python -m bench --only store`).

One request of an agent loop reads its branch's active checkpoint (`Store.active_checkpoint`),
stores its new tool result before forwarding (`Store.extend`, one transaction) and the answer
with its call record after (`Store.record_answered`, a second one). This phase times exactly
that on the real `SqliteStore` in a fresh file: 16 conversations, each request adding the next
tool result of the benchmark's agent body and its assistant answer, CPU from
`time.process_time` (SQLite runs in the calling thread, the WAL checkpoints in the store's own
thread: both counted).

Variants, interleaved round by round, each a fresh database:
- shipped: the two transactions as the proxy makes them;
- one transaction: the same statements (`extend_head`, `insert_answered`) in one `BEGIN IMMEDIATE`,
  what "one store transaction per request" could save at most;
- no WAL checkpoints: the checkpoint thread stopped and `wal_autocheckpoint=0`, what the
  checkpoints cost (the WAL then grows without bound: a bound, not a setting);
- in memory: `:memory:`, no file at all: what any change to durability could save at most;
- beside 10,000 compacted conversations: shipped, in a store that already holds 10,000 other
  conversations with three checkpoints each: a request's cost must not grow with the store;
- with budgets and a rate limit: shipped, plus what a client key with `usd_per_day` and
  `requests_per_minute` and its tenant with `tokens_per_month` add (`proxy/admission.py`): the
  admission's read of three counters (one +1: a write) before, the call's charge of two after;
- with budgets: the same without `requests_per_minute`, so the admission is a read.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bodies import agent_body
from proxy import identify
from proxy.quota import Account, Quota, admission_counts, charges, checks
from proxy.store.base import CallRecord, NewEvent, Position, ResponseTurn
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite.history import extend_head, insert_answered

BESIDE = "beside 10,000 compacted conversations"
QUOTAS = "with budgets and a rate limit"
BUDGETS = "with budgets"
VARIANTS = ("shipped", "one transaction", "no WAL checkpoints", "in memory", BESIDE, QUOTAS, BUDGETS)
TENANT = Account("tenant", "bench", "Tenant 'bench'", Quota(tokens_per_month=10**12))
ACCOUNTS = {
    QUOTAS: [
        Account("key", "key_0123456789ab", "Client key 'b'", Quota(usd_per_day=100, requests_per_minute=10**5)),
        TENANT,
    ],
    BUDGETS: [Account("key", "key_0123456789ab", "Client key 'b'", Quota(usd_per_day=100)), TENANT],
}
CONVERSATIONS = 16
OTHERS = 10_000


def _pairs() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(tool result, assistant answer) pairs of the agent body, in order."""
    messages = agent_body()["messages"]
    tools = [m for m in messages if m["role"] == "tool"]
    calls = [m for m in messages if m["role"] == "assistant"]
    return list(zip(tools, calls[1:] + calls[:1], strict=True))


def _call(i: int, position: Position, answer: dict[str, Any]) -> CallRecord:
    return CallRecord(
        id=f"call-{i}",
        tenant="bench",
        route="mock",
        model="gpt-4o",
        purpose="chat",
        stream=False,
        started_at=time.time(),
        conversation_id=position.conversation_id,
        branch_id=position.branch_id,
        status="complete",
        upstream_status=200,
        latency_ms=1.0,
        response=answer,
        finish_reason="tool_calls",
        usage_raw={"prompt_tokens": 20_000, "completion_tokens": 60},
        usage={"input": 20_000, "output": 60},
    )


def _compacted_conversations(db: Any, n: int) -> None:
    """`n` conversations of one branch each, with a summary committed three times (two superseded)."""
    db.execute("BEGIN")
    for i in range(n):
        db.execute(
            "INSERT INTO conversations (id, tenant, main_branch_id, created_at, updated_at) "
            "VALUES (?, 'other', ?, 0, 0)",
            (f"c_other{i}", f"b_other{i}"),
        )
        db.execute(
            "INSERT INTO branches (id, conversation_id, fork_seq, head_seq, created_at, updated_at) "
            "VALUES (?, ?, 0, 0, 0, 0)",
            (f"b_other{i}", f"c_other{i}"),
        )
        for generation, status in ((1, "superseded"), (2, "superseded"), (3, "active")):
            db.execute(
                "INSERT INTO checkpoints (id, conversation_id, branch_id, generation, from_seq, covered_through_seq, "
                "source_hash, summary, tokens, format_version, status, created_at) "
                "VALUES (?, ?, ?, ?, 1, 5, 'h', 'a summary', 3, 1, ?, 0)",
                (f"ck_other{i}-{generation}", f"c_other{i}", f"b_other{i}", generation, status),
            )
    db.execute("COMMIT")


def _in_one_transaction(db: Any, i: int, head: Position, head_hash: str, event: NewEvent, reply: NewEvent) -> Any:
    """The statements of `Store.extend` and `Store.record_answered` in one transaction of their own."""
    db.execute("BEGIN IMMEDIATE")
    end = extend_head(db, head, head_hash, [event], time.time())
    assert end is not None, "the benchmark's chain must extend its head"
    position = insert_answered(db, _call(i, end, reply.message), ResponseTurn(end, "sys", reply), time.time())
    db.execute("COMMIT")
    return position


async def _round(variant: str, path: Path, turns: int) -> float:
    """CPU microseconds per request of one variant over CONVERSATIONS x turns requests."""
    path.unlink(missing_ok=True)
    store = SqliteStore(":memory:" if variant == "in memory" else str(path))
    await store.open()
    if variant == "no WAL checkpoints":
        store.stop_wal_checkpoints()
        store.db.execute("PRAGMA wal_autocheckpoint=0")
    if variant == BESIDE:
        _compacted_conversations(store.db, OTHERS)
    pairs = _pairs()
    heads: list[tuple[Position, str]] = []
    for c in range(CONVERSATIONS):
        conversation = await store.create_conversation("bench", None)
        start = Position(conversation.id, conversation.main_branch_id, 0)
        task = {"role": "user", "content": f"task {c}"}
        first = NewEvent("user", task, identify.message_hash(identify.root_hash("bench"), task), "request", 10)
        heads.append((await store.append(start, [first], None, stamp=False), first.chain_hash))
    n, cpu = 0, 0.0
    for turn in range(turns):
        tool, answer = pairs[turn % len(pairs)]
        for c, (head, head_hash) in enumerate(heads):
            event = NewEvent("tool", tool, identify.message_hash(head_hash, tool), "request", 600)
            reply = NewEvent("assistant", answer, identify.message_hash(event.chain_hash, answer), "response", 60)
            t0 = time.process_time()
            if variant in ACCOUNTS:
                await store.add_counts(admission_counts(checks(ACCOUNTS[variant], time.time())))
            await store.active_checkpoint(head.branch_id)
            if variant == "one transaction":
                position = _in_one_transaction(store.db, n, head, head_hash, event, reply)
            else:
                end = await store.extend(head, head_hash, [event])
                assert end is not None, "the benchmark's chain must extend its head"
                position = await store.record_answered(_call(n, end, answer), ResponseTurn(end, "sys", reply))
            if variant in ACCOUNTS:
                await store.add_counts(charges(ACCOUNTS[variant], 20_060, 0.05, time.time()))
            cpu += time.process_time() - t0
            assert isinstance(position, Position)
            heads[c] = (position, reply.chain_hash)
            n += 1
    await store.close()
    path.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return cpu / n * 1e6


def run_store_calls(run_dir: Path, rounds: int, turns: int, log: Callable[[str], None]) -> dict[str, Any]:
    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for rnd in range(rounds):
        order = VARIANTS[rnd % len(VARIANTS) :] + VARIANTS[: rnd % len(VARIANTS)]
        for variant in order:
            samples[variant].append(asyncio.run(_round(variant, run_dir / "store-calls.db", turns)))
        log(f"  round {rnd + 1}/{rounds}: " + ", ".join(f"{v} {samples[v][-1]:.0f} us" for v in VARIANTS))
    shipped = statistics.median(samples["shipped"])
    rows = [
        {
            "variant": v,
            "cpu_us_per_request": round(statistics.median(samples[v]), 1),
            "vs_shipped": round(statistics.median(samples[v]) / shipped, 3),
            "rounds_us": [round(s, 1) for s in samples[v]],
        }
        for v in VARIANTS
    ]
    return {
        "rows": rows,
        "setup": f"{CONVERSATIONS} conversations x {turns} requests per round, {rounds} rounds interleaved, "
        "median of the rounds; each request reads its active checkpoint, stores one tool result of the agent "
        "body before forwarding and its assistant answer with the call record after",
    }
