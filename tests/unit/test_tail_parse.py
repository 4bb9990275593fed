"""Parsing only the new tail of a body (`proxy/tail_parse.py`): whatever the bytes, the result is
exactly what parsing the body whole gives -- the same value, key order included, or the same
error -- and a body that extends the previous one byte for byte is not parsed whole."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.errors import BadRequest
from proxy.history_cache import HistoryCache
from proxy.protocols import ANTHROPIC
from proxy.protocols.anthropic.validate import parse_body as anthropic_parse
from proxy.protocols.openai_chat.validate import parse_body
from proxy.tail_parse import BodyMemo
from tests.support.lanes import examples

PARTITION = hashlib.sha256(b"sk-test").digest()

PROPERTY = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])

TRICKY = [
    '"messages":[',
    '"messages": [1]',
    "]",
    "],",
    '\\"',
    '"',
    "\\",
    "{",
    "}]}",
    "é",
    "\u2028",
    "😀",
    '"input":[',
]
strings = st.text(max_size=8) | st.sampled_from(TRICKY)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | strings
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(strings, inner, max_size=3), max_leaves=12
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": strings | values}
) | st.dictionaries(strings, values, max_size=3)
messages = st.lists(message, min_size=1, max_size=4)
rest_keys = st.dictionaries(
    st.sampled_from(["model", "tools", "stream", "stop", "x", "messages_", "y"]), values, max_size=3
)
styles = st.sampled_from(
    [
        {"separators": (",", ":")},
        {"separators": (", ", ": ")},
        {"indent": 1},
        {"indent": "\t", "ensure_ascii": False},
        {"separators": (",", ":"), "ensure_ascii": False},
    ]
)
raw_tails = st.sampled_from(
    [
        b'{"role":"user","content":"x"}',
        b'{"role":"user"}, {"role":"tool"}',
        b"",
        b"  ",
        b'1],"messages":[2',
        b'{"a":1}],"model":"other","z":[0',
        b"[" * 140 + b"]" * 140,
        b"[" * 60 + b"]" * 60,
        b"123456789012345678901234567890",
        b"18446744073709551616",
        b"1e400",
        b"NaN",
        b'"\\ud800"',
        b'"\\u00e9\\"]"',
        b'{"role":"user","content":"a"',
        b'{"role":"user"},',
        b",{}",
        b"{}}",
        b"\xff",
    ]
)


def outcome(parse: Callable[[bytes], Any], raw: bytes) -> str:
    """The parsed value's repr (key order and float bits included), or the error's message."""
    try:
        return "value " + repr(parse(raw))
    except BadRequest as exc:
        return "error " + exc.message


def serialize(body: dict[str, Any], style: dict[str, Any]) -> bytes:
    return json.dumps(body, **style).encode()


def check(cache: HistoryCache, raw: bytes, parse: Callable[[bytes], Any] = parse_body, key: str = "messages") -> None:
    memo = BodyMemo(cache, "sk-test")
    assert outcome(lambda r: memo.parse(r, key, parse), raw) == outcome(parse, raw)
    memo.commit()


def parse_as(
    cache: HistoryCache, credential: str | None, raw: bytes, whole: Callable[[bytes], Any] = parse_body
) -> Any:
    """One request's parse: its own memo, committed (the caller authenticated)."""
    memo = BodyMemo(cache, credential)
    body = memo.parse(raw, "messages", whole)
    memo.commit()
    return body


def body_of(before: dict[str, Any], msgs: list[Any], after: dict[str, Any], key: str = "messages") -> dict[str, Any]:
    return {**{k: v for k, v in before.items() if k != key}, key: msgs, **{k: v for k, v in after.items() if k != key}}


@PROPERTY
@given(rest_keys, rest_keys, messages, messages, messages, styles, st.data())
def test_extensions_and_their_mutations_parse_as_a_whole_parse(before, after, first, new, newer, style, data):
    cache = HistoryCache()
    p = serialize(body_of(before, first, after), style)
    b = serialize(body_of(before, first + new, after), style)
    c = serialize(body_of(before, first + new + newer, after), style)
    check(cache, p)
    variant = data.draw(st.sampled_from(["extension", "changed", "suffix", "truncated", "garbage", "splice"]))
    if variant == "changed":
        b = serialize(body_of(before, [data.draw(message)] + first[1:] + new, after), style)
    elif variant == "suffix":
        b = serialize(body_of(before, first + new, {**after, "y": data.draw(values)}), style)
    elif variant == "truncated":
        b = b[: data.draw(st.integers(0, len(b)))]
    elif variant == "garbage":
        b = b + data.draw(st.sampled_from([b"x", b",", b"]", b"}", b" ", b"{}", b"\x00"]))
    elif variant == "splice":
        close = p.rindex(b"]") if not after else len(serialize(body_of(before, first, {}), style)) - 1
        close = p.rfind(b"]", 0, close + 1)
        b = p[:close] + b"," + data.draw(raw_tails) + p[close:]
    check(cache, b)
    check(cache, c)


def test_a_grown_history_is_parsed_in_its_tail_only_and_per_credential():
    cache = HistoryCache()
    whole: list[bytes] = []

    def counted(raw: bytes) -> Any:
        whole.append(raw)
        return parse_body(raw)

    history = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": 'say "]}"'}]
    bodies = []
    for turn in range(4):
        bodies.append(json.dumps({"messages": history, "model": "m", "tools": [{"a": [1]}], "stream": True}).encode())
        history = history + [{"role": "assistant", "content": f"ok {turn}"}, {"role": "user", "content": "more"}]
    parsed = [parse_as(cache, "sk-a", raw, counted) for raw in bodies]
    assert whole == bodies[:1]  # the first body only; the others extend it
    assert parsed == [parse_body(raw) for raw in bodies]
    assert parsed[3]["messages"][0] is parsed[0]["messages"][0]  # the known messages are the same objects
    assert parse_as(cache, "sk-b", bodies[3], counted) == parsed[3]  # another credential knows none of them
    assert whole == [bodies[0], bodies[3]]
    unauthenticated = BodyMemo(cache, "sk-c")  # parsed, but the caller was refused: not committed
    unauthenticated.parse(bodies[0], "messages", counted)
    assert parse_as(cache, "sk-c", bodies[1], counted) == parsed[1]
    assert whole == [bodies[0], bodies[3], bodies[0], bodies[1]]


def test_one_credential_keeps_a_body_for_each_of_its_conversations():
    def in_turn(cache: HistoryCache, conversations: int, rounds: int) -> list[int]:
        """Conversations under one key, one turn each per round; the bodies parsed in their tail."""
        chats = [[{"role": "user", "content": f"task {c}"}] for c in range(conversations)]
        hits = []
        for _ in range(rounds):
            before = cache.body_hits
            for chat in chats:
                chat += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
                raw = json.dumps({"model": "m", "messages": chat}).encode()
                assert parse_as(cache, "sk-team", raw) == parse_body(raw)
            hits.append(cache.body_hits - before)
        return hits

    assert in_turn(HistoryCache(), 40, 3) == [0, 40, 40]
    # more than the credential holds: those that hit keep their place (`proxy.eviction`)
    assert in_turn(HistoryCache(bodies_per_credential=4), 8, 4) == [0, 3, 3, 3]


def test_the_result_is_a_fresh_dict_and_list_each_time():
    cache = HistoryCache()
    first = json.dumps({"model": "m", "messages": [{"role": "user", "content": "a"}]}).encode()
    second = json.dumps({"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user"}]}).encode()
    parse_as(cache, None, first)
    one = parse_as(cache, None, second)
    one["model"] = "changed"
    one["messages"].append("changed")
    again = parse_as(cache, None, second[:-2] + b', {"role": "tool"}]}')
    assert again == parse_body(second[:-2] + b', {"role": "tool"}]}')


@pytest.mark.parametrize("tail", [b"[" * 127 + b"]" * 127, b"[" * 126 + b"]" * 126])
def test_the_depth_limit_holds_for_a_tail_as_for_the_whole_body(tail):
    cache = HistoryCache()
    first = b'{"model":"m","messages":[{"role":"user"}]}'
    check(cache, first)
    check(cache, first[:-2] + b"," + tail + b"]}")


def test_a_duplicate_messages_key_is_never_extended_in_the_wrong_array():
    cache = HistoryCache()
    first = b'{"messages":[{"role":"user"}],"x":[1],"x":2,"messages":[{"role":"tool"}]}'
    check(cache, first)
    check(cache, first[:-2] + b',{"role":"assistant"}]}')
    check(cache, first.replace(b"[1]", b'[1,{"role":"assistant"}]'))
    shadowed = b'{"messages":[{"role":"user"}],"x":[1],"x":2}'  # the last `]` to try is x's first value's
    check(cache, shadowed)
    check(cache, shadowed.replace(b"[1]", b'[1,{"role":"assistant"}]'))  # its proof fails: parsed whole
    assert shadowed not in [seen.raw for seen in cache.bodies(PARTITION)]  # and the refuted candidate forgotten


def test_the_other_wires_keys():
    cache = HistoryCache()
    first = b'{"model":"m","system":"s","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'
    check(cache, first, anthropic_parse)
    check(cache, first[:-2] + b',{"role":"assistant","content":"yo"}]}', anthropic_parse)
    first = b'{"model":"m","input":[{"role":"user","content":"hi"}],"store":false}'
    check(cache, first, key="input")
    check(cache, first.replace(b'"}]', b'"},{"type":"function_call_output","call_id":"c","output":"x"}]'), key="input")


def test_the_anthropic_wire_converts_only_the_new_native_messages():
    cache = HistoryCache()
    natives: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "go", "cache_control": {}}]}]
    turns = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": [1]}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}, {"type": "text", "text": "n"}],
        },
        {"role": "system", "content": "mid"},
        {"role": "assistant", "content": "done"},
    ]
    memo_counts = []
    for turn in [None, *turns]:
        if turn is not None:
            natives = natives + [turn]
        raw = json.dumps({"model": "m", "system": "s", "max_tokens": 5, "messages": natives}).encode()
        memo = BodyMemo(cache, "sk-a")
        body = ANTHROPIC.parse(raw, memo)
        assert ANTHROPIC.messages(body, memo) == ANTHROPIC.messages(anthropic_parse(raw))
        memo.commit()
        known = memo.derived(ANTHROPIC.name)
        memo_counts.append(None if known is None else known[0])
    assert memo_counts == [None, 1, 2, 3, 4]  # each body reused the conversion of the one it extends
    bad = raw[:-2] + b', {"role": "robot", "content": "x"}]}'
    memo = BodyMemo(cache, "sk-a")
    with pytest.raises(BadRequest) as fast:
        ANTHROPIC.messages(ANTHROPIC.parse(bad, memo), memo)
    with pytest.raises(BadRequest) as whole:
        ANTHROPIC.messages(anthropic_parse(bad))
    assert fast.value.message == whole.value.message and "messages.5" in str(fast.value.message) + str(fast.value)
