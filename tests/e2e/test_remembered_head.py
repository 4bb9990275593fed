"""A request that continues the branch head its conversation's previous answer left is appended
there without an identity lookup (`ingest`: `Remembered.head`, `Store.extend`), and one whose
remembered head another process moved meanwhile (a turn served by another replica, a fork, a
delete) is resolved by the lookup exactly as without the shortcut. `ctxproxy_identity_total{how}`
on `/metrics` says which way each request went."""

from __future__ import annotations

import itertools
import re
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.proxy_process import ProxyProcess
from tests.support.redis_server import RedisServer
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "gpt-remembered-head"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def identity_counts(p: ProxyProcess) -> dict[str, int]:
    text = httpx.get(f"{p.url}/metrics", timeout=10).text
    return {how: int(float(n)) for how, n in re.findall(r'ctxproxy_identity_total\{how="(\w+)"\} (\S+)', text)}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in ("remembered", "stale", "lookup")}


def turn(p: ProxyProcess, api_key: str, messages: list[dict[str, Any]], conversation: str | None = None) -> str:
    """One non-streamed turn; appends the answer to `messages` once it is stored (so the next turn
    finds the head it left); returns the conversation id."""
    headers = {"X-Conversation-Id": conversation} if conversation else None
    raw = p.client(api_key).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, extra_headers=headers
    )
    answer = raw.parse().choices[0].message.content
    conv = raw.headers["x-conversation-id"]
    wait_until(
        lambda: (events := p.events(conv)) and events[-1]["message"].get("content") == answer,
        what=f"the answer {answer!r} stored",
    )
    messages.append({"role": "assistant", "content": answer})
    return conv


def contents(events: list[dict[str, Any]]) -> list[Any]:
    return [e["message"].get("content") for e in events]


def test_each_turn_continues_the_remembered_head_without_a_lookup(proxy, upstream, api_key):
    p = proxy()
    tag = uuid.uuid4().hex[:8]
    messages = [{"role": "system", "content": "Be brief."}, user(f"{tag} first")]
    before = identity_counts(p)
    conv = turn(p, api_key, messages)
    for i in range(4):
        messages.append(user(f"{tag} next {i}"))
        assert turn(p, api_key, messages) == conv
    assert delta(before, identity_counts(p)) == {"remembered": 4, "stale": 0, "lookup": 1}
    assert contents(p.events(conv)) == [m["content"] for m in messages[1:]]
    assert [e["seq"] for e in p.events(conv)] == list(range(1, 11))
    assert len(p.conversation(conv)["branches"]) == 1

    # an explicit conversation id: its own conversation, then its turns continue its head too
    explicit = f"explicit-{tag}"
    before = identity_counts(p)
    named = [*messages, user(f"{tag} named")]
    assert turn(p, api_key, named, explicit) == explicit
    for i in range(2):
        named.append(user(f"{tag} named {i}"))
        assert turn(p, api_key, named, explicit) == explicit
    assert delta(before, identity_counts(p)) == {"remembered": 2, "stale": 0, "lookup": 1}
    assert contents(p.events(explicit)) == [m["content"] for m in named[1:]]
    assert contents(p.events(conv)) == [m["content"] for m in messages[1:]]  # the implicit one untouched


def test_a_request_sent_before_the_previous_answer_is_stored_continues_its_request(proxy, upstream, api_key):
    """The head is remembered as soon as the request's own events are appended: a client that
    answers for itself while the first call still streams continues there without a lookup, and
    the late answer forks off it, exactly as after a lookup."""
    p = proxy()
    tag = uuid.uuid4().hex[:8]
    hold = threading.Event()
    before = identity_counts(p)
    first = [user(f"{tag} u1")]
    conv = turn(p, api_key, first)
    first.append(user(f"{tag} u2"))
    upstream.push(Reply(content=f"{tag} late answer", chunks=4, hold=hold))
    client = p.client(api_key)
    with client.chat.completions.with_streaming_response.create(model=MODEL, messages=first, stream=True) as raw:
        assert raw.headers["x-conversation-id"] == conv
        chunks = raw.parse()
        next(iter(chunks))  # the call is in flight, held upstream: its answer is not stored
        second = [*first, {"role": "assistant", "content": f"{tag} own answer"}, user(f"{tag} u3")]
        assert turn(p, api_key, second) == conv
        hold.set()
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) != ""
    assert delta(before, identity_counts(p)) == {"remembered": 2, "stale": 0, "lookup": 1}
    wait_until(lambda: len(p.conversation(conv)["branches"]) == 2, what="the late answer's fork")
    branches = p.conversation(conv)["branches"]
    main = next(b for b in branches if b["parent_id"] is None)
    late = next(b for b in branches if b["parent_id"] is not None)
    assert contents(p.events(conv, branch=main["id"])) == [m["content"] for m in second]
    assert (late["fork_seq"], late["head_seq"]) == (3, 4)
    assert contents(p.events(conv, branch=late["id"]))[2:] == [f"{tag} u2", f"{tag} late answer"]


@pytest.fixture(scope="module")
def head_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["sqlite", "redis"])
def two_processes(request, proxy, upstream, tmp_path) -> tuple[ProxyProcess, ProxyProcess]:
    """Two proxy processes on one store: a SQLite file, or a Redis server (own key prefix)."""
    if request.param == "sqlite":
        store = f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        store = f"{request.getfixturevalue('head_redis').url}?prefix=heads-{uuid.uuid4().hex[:8]}:"
    return proxy(fresh=True, store=store), proxy(fresh=True, store=store)


def test_a_head_moved_by_another_process_is_looked_up(two_processes, upstream, api_key):
    a, b = two_processes
    tag = uuid.uuid4().hex[:8]
    a0, b0 = identity_counts(a), identity_counts(b)
    main = [user(f"{tag} u1")]
    conv = turn(a, api_key, main)
    main.append(user(f"{tag} u2"))
    assert turn(b, api_key, main) == conv
    # A remembers the head a1 it left; B has moved the branch on: A looks it up and continues it
    main.append(user(f"{tag} u3"))
    assert turn(a, api_key, main) == conv
    main.append(user(f"{tag} u4"))
    assert turn(a, api_key, main) == conv  # A's own head now
    assert contents(a.events(conv)) == [m["content"] for m in main]
    assert len(a.conversation(conv)["branches"]) == 1

    # B remembers the head a2 it left, now in the middle of the branch: an edit after it forks there
    forked = [*main[:4], user(f"{tag} u3, edited")]
    assert turn(b, api_key, forked) == conv
    branches = a.conversation(conv)["branches"]
    assert len(branches) == 2
    child = next(x for x in branches if x["parent_id"] is not None)
    assert (child["fork_seq"], child["head_seq"]) == (4, 6)
    assert contents(a.events(conv, branch=child["id"])) == [m["content"] for m in forked]
    main_branch = next(x for x in branches if x["parent_id"] is None)
    assert contents(a.events(conv, branch=main_branch["id"])) == [m["content"] for m in main]

    # deleted on B: A's remembered head is gone, so the next turn starts a new conversation
    assert b.admin(f"conversations/{conv}", method="DELETE").status_code in (200, 204)
    main.append(user(f"{tag} u5"))
    fresh = turn(a, api_key, main)
    assert fresh != conv
    assert contents(a.events(fresh)) == [m["content"] for m in main]
    assert a.admin(f"conversations/{conv}").status_code == 404

    assert delta(a0, identity_counts(a)) == {"remembered": 1, "stale": 2, "lookup": 1}
    assert delta(b0, identity_counts(b)) == {"remembered": 0, "stale": 1, "lookup": 1}


def test_an_answer_forked_by_another_process_is_the_head_the_next_request_continues(two_processes, upstream, api_key):
    """A's answer is stored after B moved the branch on, so it forks; A remembers where the store
    put it (`Store.record_answered`'s position, on the fork), and A's next request on that fork is
    appended there without a lookup."""
    a, b = two_processes
    tag = uuid.uuid4().hex[:8]
    hold = threading.Event()
    first = [user(f"{tag} u1")]
    conv = turn(a, api_key, first)
    first.append(user(f"{tag} u2"))
    upstream.push(Reply(content=f"{tag} late answer", chunks=4, hold=hold))
    with a.client(api_key).chat.completions.with_streaming_response.create(
        model=MODEL, messages=first, stream=True
    ) as raw:
        chunks = raw.parse()
        next(iter(chunks))  # in flight, held upstream
        other = [*first, {"role": "assistant", "content": f"{tag} own answer"}, user(f"{tag} u3")]
        assert turn(b, api_key, other) == conv
        hold.set()
        for _ in chunks:
            pass
    wait_until(lambda: len(a.conversation(conv)["branches"]) == 2, what="the late answer's fork")
    late = next(x for x in a.conversation(conv)["branches"] if x["parent_id"] is not None)
    wait_until(lambda: len(a.events(conv, branch=late["id"])) == 4, what="the late answer stored")
    before = identity_counts(a)
    following = [*first, {"role": "assistant", "content": f"{tag} late answer"}, user(f"{tag} u4")]
    assert turn(a, api_key, following) == conv
    assert delta(before, identity_counts(a)) == {"remembered": 1, "stale": 0, "lookup": 0}
    assert contents(a.events(conv, branch=late["id"])) == [m["content"] for m in following]
    assert len(a.conversation(conv)["branches"]) == 2


def test_a_second_turn_sent_before_the_first_answer_is_stamped_continues_it(two_processes, upstream, api_key):
    """The client has the first answer while A has not committed it (the stream held before its
    last chunks): its second turn reaches B, whose lookup matches the one unstamped first message,
    not enough to continue on its own. B waits for A's stamp, then the answer it carries matches:
    one conversation, not a new one per replica that saw the first turn late."""
    a, b = two_processes
    tag = uuid.uuid4().hex[:8]
    hold = threading.Event()
    first = [{"role": "system", "content": f"{tag} agent"}, user(f"{tag} u1")]
    answer = f"{tag} first answer"
    upstream.push(Reply(content=answer, chunks=4, hold=hold, hold_after_chunks=5))  # role + 4 pieces
    mark = b.log_mark()
    with ThreadPoolExecutor(1) as pool:
        with a.client(api_key).chat.completions.with_streaming_response.create(
            model=MODEL, messages=first, stream=True
        ) as raw:
            conv = raw.headers["x-conversation-id"]
            chunks = iter(raw.parse())
            text = "".join(c.choices[0].delta.content or "" for c in itertools.islice(chunks, 5) if c.choices)
            assert text == answer  # the client has it all; A stores it once the stream ends
            second = [*first, {"role": "assistant", "content": text}, user(f"{tag} u2")]
            sent = pool.submit(turn, b, api_key, second)
            waiting = f"first turn of conversation {conv}"
            wait_until(lambda: sent.done() or waiting in b.stderr_since(mark), what="B to wait or answer")
            assert not sent.done(), f"B did not wait: conversation {sent.result()} (the first: {conv})"
            hold.set()
            for _ in chunks:
                pass
        assert sent.result(timeout=30) == conv
    assert contents(a.events(conv)) == [m["content"] for m in second[1:]]
    assert len(a.conversation(conv)["branches"]) == 1
