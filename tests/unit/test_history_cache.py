"""The per-process history cache: a hit must give exactly what recomputing would."""

from __future__ import annotations

import json

from proxy import identify
from proxy.catalog import ModelCatalog
from proxy.config import Policy
from proxy.history_cache import HistoryCache, Remembered
from proxy.projection import Projector
from proxy.protocols.openai_chat.encode import encode_body


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
    for i in range(10):
        h = [{"role": "user", "content": f"conversation {i}"}]
        cache.remember("t", Remembered(h, identify.chain("t", h), 100))
    assert cache._bytes <= 250
    assert cache.lookup("t", [{"role": "user", "content": "conversation 9"}]) is not None
    assert cache.lookup("t", [{"role": "user", "content": "conversation 0"}]) is None


def test_encode_body_equals_plain_json_and_reuses_known_encodings() -> None:
    messages = history(3)
    body = {"model": "m", "messages": [{"role": "user", "content": "original"}], "tools": [{"x": 1}], "n": 2}
    payload, encoded = encode_body(body, messages, None)
    assert json.loads(payload) == {**body, "messages": messages}
    assert set(encoded) == {id(m) for m in messages}
    # a known object is not re-encoded: a stale (deliberately wrong) encoding would show through
    encoded[id(messages[0])] = (messages[0], b'{"role":"user","content":"cached"}')
    payload2, fresh = encode_body(body, messages, encoded)
    assert json.loads(payload2)["messages"][0]["content"] == "cached"
    # an equal but different object is encoded anew
    copy = [dict(messages[0]), *messages[1:]]
    payload3, _ = encode_body(body, copy, encoded)
    assert json.loads(payload3)["messages"][0]["content"] == "question 0"
    assert json.loads(encode_body({"messages": []}, [], None)[0]) == {"messages": []}


def test_remembered_items_prove_what_they_share_and_the_branch_memo_resumes_on_it() -> None:
    projector = Projector(ModelCatalog())
    policy = Policy()
    counter = projector.counter("gpt-4o")
    name = counter.encoding.name
    first = history(3)
    entry = Remembered(first, identify.chain("t", first), 10)
    sent = projector.items(first, entry.hashes, counter, None, entry)
    assert entry.items[name] is sent and entry.shared == {}  # nothing remembered to share
    projector.project_request(policy, "gpt-4o", {}, [], sent, None, "b", entry)
    second = json.loads(json.dumps(history(4)))  # the next request: equal content, new objects
    later = Remembered(second, identify.chain("t", second), 10)
    grown = projector.items(second, later.hashes, counter, entry, later)
    proof = later.shared[name]
    assert proof.base is sent and proof.length == 6 and all(a is b for a, b in zip(grown, sent, strict=False))
    projection = projector.project_request(policy, "gpt-4o", {}, [], grown, None, "b", later)
    memo = projector.branch_memo("b")
    assert memo is not None and (memo.cache.rebuilt, memo.cache.reused) == (1, 1)
    assert memo.cache.last_index is not None and memo.cache.last_index.items is grown
    alone = Projector(ModelCatalog()).project_request(policy, "gpt-4o", {}, [], grown, None, None)
    assert json.dumps(projection.messages) == json.dumps(alone.messages) and projection.record == alone.record
    # items that are not the ones remembered carry no proof: the memo compares them itself (and
    # finds items 7 and 8 are other objects than `grown`'s)
    again = projector.items(second, later.hashes, counter, entry)
    projector.project_request(policy, "gpt-4o", {}, [], again, None, "b", later)
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
