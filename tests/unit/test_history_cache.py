"""The per-process history cache: a hit must give exactly what recomputing would."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import codec, identify
from proxy.catalog import ModelCatalog
from proxy.history_cache import Head, HistoryCache, Remembered
from proxy.policy_settings import Policy
from proxy.projector import Asked, Projector
from proxy.protocols.openai_chat.encode import encode_body
from proxy.store.base import Position
from proxy.types import SentBody
from tests.support.lanes import examples


def turn(i: int) -> list[dict]:
    return [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]


def history(n: int) -> list[dict]:
    return [m for i in range(n) for m in turn(i)]


def test_hit_reuses_hashes_and_equals_full_chain() -> None:
    cache = HistoryCache()
    first = history(3)
    cache.remember("t1", Remembered(first, identify.chain("t1", first), 100))
    second = json.loads(json.dumps(history(5)))  # new objects, equal content
    known = cache.lookup("t1", second)
    assert known is not None and len(known.messages) == 6
    assert cache.hashes("t1", second, known) == identify.chain("t1", second)
    assert cache.lookup("t2", second) is None  # another tenant never hits


def test_diverged_history_misses_and_longest_match_wins() -> None:
    cache = HistoryCache()
    short, long = history(2), history(4)
    cache.remember("t", Remembered(short, identify.chain("t", short), 10))
    cache.remember("t", Remembered(long, identify.chain("t", long), 10))
    assert len(cache.lookup("t", history(6)).messages) == 8  # type: ignore[union-attr]
    edited = history(6)
    edited[1] = {"role": "assistant", "content": "a different answer"}
    assert cache.lookup("t", edited) is None
    assert cache.hashes("t", edited, None) == identify.chain("t", edited)


def test_memory_is_bounded_by_bytes() -> None:
    cache = HistoryCache(max_bytes=250)
    for i in range(30):
        h = [{"role": "user", "content": f"conversation {i}"}]
        cache.remember("t", Remembered(h, identify.chain("t", h), 100))
        assert cache._bytes <= 250
    assert cache.lookup("t", [{"role": "user", "content": "conversation 29"}]) is not None
    # long out of use, so gone (which entries a full cache keeps: tests/unit/test_eviction.py)
    assert cache.lookup("t", [{"role": "user", "content": "conversation 0"}]) is None


def test_encode_body_equals_plain_json_and_reuses_known_encodings() -> None:
    messages = history(3)
    body = {"model": "m", "messages": [{"role": "user", "content": "original"}], "tools": [{"x": 1}], "n": 2}
    payload, sent = encode_body(body, messages, None)
    assert json.loads(payload) == {**body, "messages": messages}
    assert sent.messages == messages and sent.data is payload
    # what was sent is not re-encoded: a stale (deliberately wrong) encoding shows through,
    # from the shared run (question 0) and from its own place after a changed message (answer 2)
    stale = payload.replace(b"question 0", b"cached 0!!").replace(b"answer 2", b"stale 2!")
    known = SentBody(sent.messages, stale, sent.ends)
    longer = [*messages, {"role": "user", "content": "new"}]
    assert [m["content"] for m in json.loads(encode_body(body, longer, known)[0])["messages"]] == [
        "cached 0!!",
        "answer 0",
        "question 1",
        "answer 1",
        "question 2",
        "stale 2!",
        "new",
    ]
    moved = [messages[0], {"role": "user", "content": "changed"}, *messages[2:]]
    assert [m["content"] for m in json.loads(encode_body(body, moved, known)[0])["messages"]] == [
        "cached 0!!",
        "changed",
        "question 1",
        "answer 1",
        "question 2",
        "stale 2!",
    ]
    # an equal but different object is encoded anew
    copy = [dict(messages[0]), *messages[1:]]
    assert json.loads(encode_body(body, copy, known)[0])["messages"][0]["content"] == "question 0"
    assert json.loads(encode_body({"messages": []}, [], None)[0]) == {"messages": []}
    assert json.loads(encode_body({"messages": [], "n": 1}, [], known)[0]) == {"messages": [], "n": 1}


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["keep", "new", "drop", "move"]), st.integers(0, 30)), max_size=30))
def test_encode_body_after_any_edit_equals_the_plain_encoding(edits: list[tuple[str, int]]) -> None:
    """However the next list reuses, drops, reorders or adds messages, the bytes are the plain ones."""
    body = {"model": "m", "messages": [], "temperature": 0}
    messages = [{"role": "user", "content": f"m{i} \u00e9\u2028", "n": i} for i in range(12)]
    _, known = encode_body(body, messages, None)
    for op, k in edits:
        nxt = list(known.messages)
        if op == "new":
            nxt.insert(k % (len(nxt) + 1), {"role": "assistant", "content": f"new {k}"})
        elif op == "drop" and nxt:
            nxt.pop(k % len(nxt))
        elif op == "move" and nxt:
            nxt.append(nxt.pop(k % len(nxt)))
        payload, known = encode_body(body, nxt, known)
        assert payload == codec.dumps({"messages": nxt, "model": "m", "temperature": 0})
        assert json.loads(payload)["messages"] == nxt


def test_remembered_items_prove_what_they_share_and_the_branch_memo_resumes_on_it() -> None:
    projector = Projector(ModelCatalog())
    policy = Policy()
    counter = projector.counter("gpt-4o")
    name = counter.encoding.name
    first = history(3)
    entry = Remembered(first, identify.chain("t", first), 10)
    sent = projector.items(first, entry.hashes, counter, None, entry)
    assert entry.items[name] is sent and entry.shared == {}  # nothing remembered to share
    projector.project_request(Asked(policy, "gpt-4o", {}, [], sent, "b", entry), None)
    second = json.loads(json.dumps(history(4)))  # the next request: equal content, new objects
    later = Remembered(second, identify.chain("t", second), 10)
    grown = projector.items(second, later.hashes, counter, entry, later)
    proof = later.shared[name]
    assert proof.base is sent and proof.length == 6 and all(a is b for a, b in zip(grown, sent, strict=False))
    projection = projector.project_request(Asked(policy, "gpt-4o", {}, [], grown, "b", later), None).projection
    memo = projector.branch_memo("b")
    assert memo is not None and (memo.cache.rebuilt, memo.cache.reused) == (1, 1)
    assert memo.cache.last_index is not None and memo.cache.last_index.items is grown
    alone = Projector(ModelCatalog()).project_request(Asked(policy, "gpt-4o", {}, [], grown, None), None).projection
    assert json.dumps(projection.messages) == json.dumps(alone.messages) and projection.record == alone.record
    # items that are not the ones remembered carry no proof: the memo compares them itself (and
    # finds items 7 and 8 are other objects than `grown`'s)
    again = projector.items(second, later.hashes, counter, entry)
    projector.project_request(Asked(policy, "gpt-4o", {}, [], again, "b", later), None)
    assert (memo.cache.rebuilt, memo.cache.reused) == (2, 1)


def test_prefix_hash_is_reused_only_for_an_equal_prefix() -> None:
    system = [{"role": "system", "content": "You are a careful agent. " * 200}]
    first = history(2)
    real = identify.prefix_hash(system)
    assert HistoryCache.prefix_hash(system, None) == real
    entry = Remembered(first, identify.chain("t", first), 10, prefix=system, system_hash="remembered")
    resent = json.loads(json.dumps(system))  # the next request's own (equal) objects
    assert HistoryCache.prefix_hash(resent, entry) == "remembered"  # not hashed again
    changed = [{"role": "system", "content": system[0]["content"] + " Today is Tuesday."}]
    assert HistoryCache.prefix_hash(changed, entry) == identify.prefix_hash(changed) != real
    assert HistoryCache.prefix_hash([], entry) == identify.prefix_hash([])


def in_turn(cache: HistoryCache, conversations: int, rounds: int) -> list[int]:
    """Conversations that open alike (the same first two messages), one turn each per round;
    the hits of each round."""
    opening = [{"role": "user", "content": "Run the task."}, {"role": "assistant", "content": "On it."}]
    chats = [[*opening, {"role": "user", "content": f"conversation {c}"}] for c in range(conversations)]
    hits = []
    for round_ in range(rounds):
        n = 0
        for chat in chats:
            chat += [{"role": "assistant", "content": f"done {round_}"}, {"role": "user", "content": "next"}]
            history = json.loads(json.dumps(chat))  # a request's own objects
            n += cache.lookup("t", history) is not None
            cache.remember("t", Remembered(history, identify.chain("t", history), 100))
            assert cache._bytes <= cache.max_bytes
        hits.append(n)
    return hits


def test_conversations_that_open_alike_each_keep_their_history() -> None:
    # one key for all of them (their first message), so many agents started alike still hit
    assert in_turn(HistoryCache(), 20, 3) == [0, 20, 20]
    # more than a key holds: those that hit keep their place, as in `proxy.eviction`
    assert in_turn(HistoryCache(per_key=4), 8, 4) == [0, 3, 3, 3]
    # and the byte budget gives up one history at a time, never the whole key
    assert in_turn(HistoryCache(max_bytes=400), 8, 4) == [0, 3, 3, 3]


def test_a_head_is_found_by_chain_hash_when_the_messages_differ_only_in_what_identity_ignores() -> None:
    """Qwen Code on the Messages API moves its cache marker every turn: the remembered messages
    are not the request's, but their chain is, so the request continues the remembered head."""
    cache = HistoryCache()
    text = [{"type": "text", "text": "answer 1"}]
    first = [{"role": "user", "content": "question 0"}, {"role": "assistant", "content": "answer 0"}]
    first += [{"role": "user", "content": [{**text[0], "text": "question 1", "cache_control": {"type": "ephemeral"}}]}]
    entry = Remembered(first, identify.chain("t", first), 10)
    entry.head = Head(Position("c", "b", 3), entry.hashes[-1], 3)
    cache.remember("t", entry)
    moved = [*first[:2], {"role": "user", "content": [{"type": "text", "text": "question 1"}]}]
    moved += [{"role": "assistant", "content": text}, {"role": "user", "content": "question 2"}]
    assert cache.lookup("t", moved) is None  # the messages differ
    assert cache.head_for("t", moved, identify.chain("t", moved)) == entry.head
    edited = [*moved[:2], {"role": "user", "content": "question 1, edited"}, *moved[3:]]
    assert cache.head_for("t", edited, identify.chain("t", edited)) is None
    assert cache.head_for("t", first, entry.hashes) is None  # nothing new after the head
