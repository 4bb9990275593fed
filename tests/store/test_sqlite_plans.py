"""Every statement the SQLite store runs for requests, compactions, retractions and deletes finds
its rows through an index: none reads a whole table.

A lookup that scans grows with everything else in the store, not with the conversation: the
active checkpoint was found through the status index, so every request read every compacted
branch's active checkpoint (4 ms per request at 10,000 of them, 21 ms at 50,000). The query
planner has no statistics here (the store never runs ANALYZE), so its plans do not depend on how
many rows the test's small database holds.
"""

from __future__ import annotations

import re
from pathlib import Path

from proxy import identify
from proxy.store.base import CheckpointCandidate, Position, ResponseTurn, Store
from proxy.store.sqlite import SqliteStore
from tests.store.test_contract import T1, call_record, new_events

WHOLE_TABLE = re.compile(r"^SCAN (events|branches|checkpoints|calls|conversations|leases|tombstones)\b")
CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA")


async def workload(store: Store) -> None:
    """What requests, a compaction, a rejected fork, retention and a delete do to the store."""
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(6)]
    hashes = identify.chain(T1, history)
    conv = await store.create_conversation(T1, "ext-1")
    main = conv.main_branch_id
    assert await store.find_longest(hashes[:3], T1, None) is None
    end = await store.append(Position(conv.id, main, 0), new_events(T1, history[:3]), None, stamp=False)
    answer = new_events(T1, history[:4], 3)[0]
    head = await store.record_answered(call_record(conv.id, main, "c1", 1.0), ResponseTurn(end, "sys", answer))
    assert isinstance(head, Position)
    extended = await store.extend(head, hashes[3], new_events(T1, history[:5], 4))
    assert extended is not None
    assert await store.find_longest(hashes[:5], T1, None) is not None
    assert await store.find_conversation(T1, "ext-1") is not None
    token = await store.acquire_lease(main, "owner", 30.0)
    assert token is not None and await store.renew_lease(main, "owner", token, 30.0)
    candidate = CheckpointCandidate(conv.id, main, 0, 1, 2, hashes[1], "summary", 5, None, 1, token)
    assert await store.commit_checkpoint(candidate) is not None
    await store.release_lease(main, "owner", token)
    assert await store.active_checkpoint(main) is not None
    # A fork from seq 3 (a retry with another answer), then that request rejected: retracted.
    other = {"role": "assistant", "content": "another answer"}
    fork_end = await store.append(
        Position(conv.id, main, 3), new_events(T1, [*history[:3], other], 3), None, stamp=False
    )
    assert fork_end.branch_id != main
    assert await store.active_checkpoint(fork_end.branch_id) is not None  # inherited from main
    assert len(await store.lineage_events(fork_end.branch_id, 0, 100)) == 4
    assert await store.retract(fork_end, [identify.chain(T1, [*history[:3], other])[3]])
    await store.record_call(call_record(conv.id, main, "c2", 1.0))
    assert await store.last_call(main, "main") is not None
    assert len(await store.list_calls(conv.id, 10, 0)) == 2
    assert await store.calls_of_purpose("shadow", 0.5, 10) == []  # the shadow report and its cap
    await store.purge_calls(0.5)
    await store.purge_checkpoints(0.5)
    await store.stale_conversations(0.5, 10)
    assert await store.delete_conversation(conv.id)


async def test_no_statement_reads_a_whole_table(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "plans.db"))
    await store.open()
    try:
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        await workload(store)
        store.db.set_trace_callback(None)
        scans: dict[str, list[str]] = {}
        seen = set()
        for sql in statements:
            if sql.lstrip().upper().startswith(CONTROL) or sql in seen:
                continue
            seen.add(sql)
            plan = [row[3] for row in store.db.execute(f"EXPLAIN QUERY PLAN {sql}")]
            bad = [step for step in plan if WHOLE_TABLE.match(step)]
            # the status index finds rows by status alone: only retention may look them up that way
            if "created_at <" not in sql:
                bad += [step for step in plan if "checkpoints_created" in step]
            if bad:
                scans[sql[:160]] = bad
        assert len(seen) > 30, "the workload should reach most of the store's statements"
        assert scans == {}
    finally:
        await store.close()
