"""An answered turn whose store write is lost heals from the client's next request (docs/storage.md,
"Storage and durability").

The proxy stores a turn's response, its stamp and its call record after the client has the
answer. Here that write is made to lose deterministically: when the scripted upstream receives
the request (the request's own messages are committed by then: they are stored before
forwarding), the test takes SQLite's write lock on the proxy's database file, so the proxy's
writer waits; the client gets its answer; the proxy is killed with SIGKILL while its writer
still waits. The file then holds the request's messages but not the answer -- checked directly.
After a restart the client goes on with the answer it got, as every agent does, and the stored
history is exactly the client's transcript: same conversation, one branch, no gap, nothing twice.
Once for a whole answer and once for a streamed one."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tests.support import proxy_process
from tests.support.e2e import user

pytestmark = pytest.mark.slow

MODEL = "gpt-heal"
HOLD = "[hold the store]"


def _rows(db: sqlite3.Connection, conv: str) -> list[tuple[int, str, str]]:
    return db.execute("SELECT seq, role, source FROM events WHERE conversation_id = ? ORDER BY seq", (conv,)).fetchall()


def test_a_response_lost_after_the_answer_is_healed_by_the_next_request(proxy, upstream, api_key, monkeypatch):
    monkeypatch.setattr(proxy_process, "STARTUP_TIMEOUT", 90.0)  # restarts on a loaded machine
    p = proxy(fresh=True)
    held: list[sqlite3.Connection] = []

    def responder(body: dict[str, Any]) -> None:
        if body.get("model") == MODEL and HOLD in str(body["messages"][-1].get("content")):
            db = sqlite3.connect(p.db_path, isolation_level=None, timeout=5, check_same_thread=False)
            db.execute("BEGIN IMMEDIATE")  # the proxy's next write now waits for this lock
            held.append(db)

    upstream.responder = responder
    transcript: list[dict[str, Any]] = []
    conversations: set[str] = set()

    def turn(text: str, stream: bool = False) -> str:
        client = p.client(api_key)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[*transcript, user(text)], stream=stream
        )
        conversations.add(raw.headers["x-conversation-id"])
        if stream:
            content = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        else:
            content = raw.parse().choices[0].message.content
        transcript.extend([user(text), {"role": "assistant", "content": content}])
        return content

    turn("the objective: keep every answered turn")
    turn("a second turn, stored whole")
    for stream in (False, True):
        answered = turn(f"this answer is lost {HOLD} (stream: {stream})", stream)
        assert answered.startswith("ok: "), answered  # the client has its answer
        assert p.proc is not None
        p.proc.kill()  # the proxy's writer is still waiting for the lock: the answer is not stored
        p.proc.wait(10)
        p.proc = None
        (conv,) = conversations
        db = held.pop()
        rows = _rows(db, conv)  # the lock holder reads the committed state
        db.execute("ROLLBACK")
        db.close()
        assert [role for _, role, _ in rows] == [m["role"] for m in transcript[:-1]], "the premise: answer lost"
        p.start()
        turn(f"the next turn after the crash (stream: {stream})")
        events = p.events(conv)
        assert [(e["message"]["role"], e["message"]["content"]) for e in events] == [
            (m["role"], m["content"]) for m in transcript
        ]
        assert [e["seq"] for e in events] == list(range(1, len(transcript) + 1))
        healed = events[len(rows)]
        assert (healed["message"]["content"], healed["source"]) == (answered, "request")  # from the next request
        assert len(p.conversation(conv)["branches"]) == 1
    assert len(conversations) == 1
    assert "Traceback" not in p.stderr()
