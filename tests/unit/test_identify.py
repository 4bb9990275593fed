"""Conversation identity: canonical hashing, the chain, the prefix split and the tenant fingerprint."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import identify
from proxy.identify import canonical, chain, message_hash, root_hash, split_prefix, tenant_of
from tests.support.lanes import examples

PARENT = root_hash("t_tenant")


def h(message: dict[str, Any]) -> str:
    return message_hash(PARENT, message)


CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}}
ASSISTANT = {"role": "assistant", "content": "hi", "tool_calls": [CALL]}


# -- re-serializations that must hash equal -------------------------------------------------------

EQUAL_PAIRS = [
    pytest.param(
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        id="content-null-vs-empty",
    ),
    pytest.param(
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "assistant", "tool_calls": [CALL]},
        id="content-null-vs-absent",
    ),
    pytest.param(
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "assistant", "tool_calls": [CALL]},
        id="content-empty-vs-absent",
    ),
    pytest.param(
        {"role": "assistant", "content": "hi", "refusal": None},
        {"role": "assistant", "content": "hi"},
        id="refusal-null",
    ),
    pytest.param(
        {"role": "assistant", "content": "hi", "annotations": []},
        {"role": "assistant", "content": "hi"},
        id="annotations-empty",
    ),
    pytest.param(
        {"role": "assistant", "content": "hi", "annotations": None},
        {"role": "assistant", "content": "hi"},
        id="annotations-null",
    ),
    pytest.param(
        {
            "role": "assistant",
            "content": "hi",
            "annotations": [{"type": "url_citation", "url_citation": {"url": "https://x.test"}}],
        },
        {"role": "assistant", "content": "hi"},
        id="annotations-always-ignored",
    ),
    pytest.param(
        {"role": "assistant", "content": "hi", "audio": None}, {"role": "assistant", "content": "hi"}, id="audio-null"
    ),
    pytest.param(
        {"role": "assistant", "content": "hi", "function_call": None},
        {"role": "assistant", "content": "hi"},
        id="function_call-null",
    ),
    pytest.param(
        {"role": "assistant", "content": "hi", "tool_calls": []},
        {"role": "assistant", "content": "hi"},
        id="tool_calls-empty-vs-absent",
    ),
    pytest.param(
        {"role": "assistant", "content": "hi", "tool_calls": None},
        {"role": "assistant", "content": "hi"},
        id="tool_calls-null-vs-absent",
    ),
    pytest.param(
        {"role": "assistant", "tool_calls": [{**CALL, "index": 0}]},
        {"role": "assistant", "tool_calls": [CALL]},
        id="tool_call-index-ignored",
    ),
    pytest.param(
        {"role": "assistant", "tool_calls": [{**CALL, "index": 0}]},
        {"role": "assistant", "tool_calls": [{**CALL, "index": 3}]},
        id="tool_call-index-value-ignored",
    ),
    pytest.param(
        {
            "tool_calls": [
                {"function": {"arguments": '{"path": "."}', "name": "ls"}, "type": "function", "id": "call_1"}
            ],
            "content": "hi",
            "role": "assistant",
        },
        ASSISTANT,
        id="key-order",
    ),
    pytest.param(
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        id="text-string-vs-one-part",
    ),
    pytest.param(
        {"role": "user", "content": [{"text": "hi", "type": "text"}]},
        {"role": "user", "content": "hi"},
        id="one-part-key-order",
    ),
    pytest.param(
        {"role": "user", "content": "hi", "name": None},
        {"role": "user", "content": "hi", "name": ""},
        id="null-vs-empty-field",
    ),
    pytest.param(
        {"role": "assistant", "content": [], "tool_calls": [CALL]},
        {"role": "assistant", "tool_calls": [CALL]},
        id="content-empty-list-vs-absent",
    ),
    pytest.param(
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "audio": None,
            "function_call": None,
            "tool_calls": [{**CALL, "index": 0}],
        },
        {"role": "assistant", "tool_calls": [CALL]},
        id="all-at-once",
    ),
]


@pytest.mark.parametrize(("a", "b"), EQUAL_PAIRS)
def test_reserializations_hash_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert canonical(a) == canonical(b)
    assert h(a) == h(b)


# -- real differences -----------------------------------------------------------------------------

DIFFERENT_PAIRS = [
    pytest.param({"role": "user", "content": "hi"}, {"role": "user", "content": "hi!"}, id="other-text"),
    pytest.param({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi"}, id="other-role"),
    pytest.param(ASSISTANT, {**ASSISTANT, "tool_calls": [{**CALL, "id": "call_2"}]}, id="other-tool-id"),
    pytest.param(
        ASSISTANT,
        {**ASSISTANT, "tool_calls": [{**CALL, "function": {"name": "ls", "arguments": '{"path":".."}'}}]},
        id="other-argument-value",
    ),
    pytest.param(
        ASSISTANT,
        {**ASSISTANT, "tool_calls": [{**CALL, "function": {"name": "cat", "arguments": '{"path": "."}'}}]},
        id="other-tool-name",
    ),
    pytest.param(ASSISTANT, {**ASSISTANT, "tool_calls": [CALL, {**CALL, "id": "call_2"}]}, id="extra-tool-call"),
    pytest.param(
        {"role": "user", "content": "hi"}, {"role": "user", "content": "hi", "name": "bob"}, id="extra-non-empty-field"
    ),
    pytest.param(
        {"role": "assistant", "content": "hi"},
        {"role": "assistant", "content": "hi", "refusal": "no"},
        id="non-null-refusal",
    ),
    pytest.param(
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        {"role": "tool", "tool_call_id": "call_2", "content": "ok"},
        id="other-tool_call_id",
    ),
    pytest.param(
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]},
        id="two-parts-are-not-one-string",
    ),
    pytest.param(
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]},
        id="image-part",
    ),
    pytest.param({"role": "user", "content": "0"}, {"role": "user", "content": 0}, id="string-vs-number"),
]


@pytest.mark.parametrize(("a", "b"), DIFFERENT_PAIRS)
def test_real_differences_hash_different(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert h(a) != h(b)


def test_canonical_exact_form() -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "refusal": None,
        "tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}],
    }
    assert canonical(message) == {
        "role": "assistant",
        "content": "hi",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}],
    }


def test_canonical_does_not_mutate_input() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [{**CALL, "index": 0}], "refusal": None}
    before = repr(message)
    canonical(message)
    message_hash(PARENT, message)
    assert repr(message) == before


def test_message_hash_depends_on_parent() -> None:
    m = {"role": "user", "content": "hi"}
    assert message_hash(root_hash("a"), m) != message_hash(root_hash("b"), m)
    assert message_hash(PARENT, m) == message_hash(PARENT, dict(m))
    assert len(message_hash(PARENT, m)) == 32  # blake2b, 16 bytes, hex


RENDERED = (
    "Calling tools:\n[{'id': 'call_1', 'type': 'function', 'function': {'name': 'ls', 'arguments': {'path': '.'}}}]"
)
"""An answer's tool call rendered as text (`proxy.renderings`): hashed as the answer it renders."""


def _stored_form(parent: str, message: dict[str, Any]) -> str:
    """The hash as every stored chain was made: blake2b-16 over the parent, NUL and the canonical
    form as `json.dumps` writes it compact, key-sorted, non-ASCII as is."""
    import json

    body = json.dumps(canonical(message), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    data = parent.encode() + b"\x00" + body.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": 'é\u2028\x00\x7f"\\ \ud83d'}, {"type": "image_url"}]},
        {"role": "assistant", "content": None, "tool_calls": [CALL], "refusal": None},
        {"role": "tool", "tool_call_id": "c", "content": "x", "meta": {"b": [1.5, 1e16, -0.0, 1e-7, 2**70], "a": True}},
        {"content": 'é\u2028\x00\x7f"\\ \ud83d', "role": "assistant"},
        {"role": "assistant", "content": RENDERED},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": ""},
        {"role": "", "content": "x"},
    ],
)
def test_message_hash_is_the_stored_form(message: dict[str, Any]) -> None:
    """Stored chains never change: the hash is the formula they were made with, to the byte."""
    assert message_hash(PARENT, message) == _stored_form(PARENT, message)


@given(role=st.sampled_from(["user", "assistant", "tool"]) | st.text(), content=st.text(), first=st.booleans())
def test_a_role_and_text_hash_as_the_stored_form(role: str, content: str, first: bool) -> None:
    """A message of a role and text alone is hashed from its JSON written directly (`_plain`),
    the stored form to the byte, in either key order, a rendered answer's text included."""
    for text in (content, f"{content}\n{RENDERED}"):
        message = {"role": role, "content": text} if first else {"content": text, "role": role}
        assert message_hash(PARENT, message) == _stored_form(PARENT, message)


def test_lone_surrogate_hashes() -> None:
    # JSON allows "\ud83d" (JS agents that cut a string mid-emoji send it); json.loads keeps it as a lone
    # surrogate. Hashing must not crash on it (a UnicodeEncodeError becomes a 500 for the whole request).
    import json

    truncated = json.loads('{"role": "tool", "tool_call_id": "c", "content": "cut here \\ud83d"}')
    assert truncated["content"] == "cut here \ud83d"
    hashes = chain("t_a", [truncated])
    assert len(hashes) == 1
    assert hashes != chain("t_a", [{**truncated, "content": "cut here "}])
    assert identify.prefix_hash([{"role": "system", "content": "\udc00"}]) != identify.prefix_hash([])
    assert identify.blob_hash("\ud83d") != identify.blob_hash("")


# -- chain ----------------------------------------------------------------------------------------

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "list files"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
    {"role": "assistant", "content": "two files"},
]


def test_chain_links_each_message_to_its_parent() -> None:
    hashes = chain("t_a", HISTORY)
    assert len(hashes) == 4
    assert len(set(hashes)) == 4
    parent = root_hash("t_a")
    for message, expected in zip(HISTORY, hashes, strict=True):
        parent = message_hash(parent, message)
        assert parent == expected


def test_chain_of_empty_history_is_empty() -> None:
    assert chain("t_a", []) == []


def test_chain_differs_per_tenant() -> None:
    a, b = chain("t_a", HISTORY), chain("t_b", HISTORY)
    assert not set(a) & set(b)
    assert root_hash("t_a") != root_hash("t_b")


def test_chain_position_matters() -> None:
    # The same message at another position (another parent) hashes differently.
    history = [{"role": "user", "content": "hi"}, {"role": "user", "content": "hi"}]
    first, second = chain("t_a", history)
    assert first != second


def test_chain_edit_changes_everything_after() -> None:
    edited = [HISTORY[0], {**HISTORY[1], "tool_calls": [{**CALL, "id": "call_9"}]}, *HISTORY[2:]]
    a, b = chain("t_a", HISTORY), chain("t_a", edited)
    assert a[0] == b[0]
    assert all(x != y for x, y in zip(a[1:], b[1:], strict=True))


def test_chain_ignores_reserialization() -> None:
    resent: list[dict[str, Any]] = [
        {"content": "list files", "role": "user"},
        {"role": "assistant", "content": "", "refusal": None, "annotations": [], "tool_calls": [{**CALL, "index": 0}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "a.py\nb.py"}]},
        {"role": "assistant", "content": "two files", "audio": None, "function_call": None, "tool_calls": []},
    ]
    assert chain("t_a", resent) == chain("t_a", HISTORY)


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=5))
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"])},
    optional={
        "content": st.one_of(
            st.none(),
            st.text(max_size=10),
            st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)}), max_size=2),
        ),
        "name": _scalar,
        "tool_call_id": st.text(max_size=4),
    },
)


@settings(max_examples=examples(150), deadline=None)
@given(history=st.lists(_message, max_size=8), k=st.integers(0, 8), tenant=st.text(max_size=6))
def test_chain_prefix_property(history: list[dict[str, Any]], k: int, tenant: str) -> None:
    assert chain(tenant, history)[:k] == chain(tenant, history[:k])


# -- split_prefix ---------------------------------------------------------------------------------


def test_split_prefix_leading_system_and_developer() -> None:
    sys_ = {"role": "system", "content": "s"}
    dev = {"role": "developer", "content": "d"}
    u = {"role": "user", "content": "u"}
    late_sys = {"role": "system", "content": "late"}
    assert split_prefix([sys_, dev, u, late_sys]) == ([sys_, dev], [u, late_sys])


def test_split_prefix_edges() -> None:
    u = {"role": "user", "content": "u"}
    sys_ = {"role": "system", "content": "s"}
    assert split_prefix([]) == ([], [])
    assert split_prefix([u]) == ([], [u])
    assert split_prefix([sys_]) == ([sys_], [])
    assert split_prefix([{"content": "no role"}, sys_]) == ([], [{"content": "no role"}, sys_])


def test_split_prefix_returns_new_lists() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    prefix, history = split_prefix(messages)
    prefix.append({"role": "user", "content": "x"})
    history.clear()
    assert len(messages) == 2


def test_prefix_hash_is_canonical_and_ordered() -> None:
    s1 = {"role": "system", "content": "one"}
    s2 = {"role": "developer", "content": "two"}
    assert identify.prefix_hash([s1, s2]) == identify.prefix_hash(
        [{"content": "one", "role": "system"}, {**s2, "name": None}]
    )
    assert identify.prefix_hash([s1, s2]) != identify.prefix_hash([s2, s1])
    assert identify.prefix_hash([]) != identify.prefix_hash([s1])


# -- tenant_of ------------------------------------------------------------------------------------

SALT_A = bytes(range(32))
SALT_B = bytes(range(1, 33))
KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"


def test_tenant_stable_per_salt() -> None:
    assert tenant_of(KEY, SALT_A) == tenant_of(KEY, SALT_A)
    t = tenant_of(KEY, SALT_A)
    assert t.startswith("t_")
    assert len(t) == 2 + 24


def test_tenant_differs_across_salts_and_keys() -> None:
    assert tenant_of(KEY, SALT_A) != tenant_of(KEY, SALT_B)
    assert tenant_of(KEY, SALT_A) != tenant_of(KEY + "x", SALT_A)


def test_tenant_is_a_keyed_digest_not_the_key() -> None:
    t = tenant_of(KEY, SALT_A)
    assert KEY not in t
    assert KEY[-8:] not in t
    assert t == "t_" + hashlib.blake2b(KEY.encode(), key=SALT_A, digest_size=12).hexdigest()


def test_tenant_without_key_is_anonymous() -> None:
    assert tenant_of(None, SALT_A) == "anonymous"
    assert tenant_of("", SALT_A) == "anonymous"


@settings(max_examples=examples(50), deadline=None)
@given(key=st.text(min_size=1, max_size=60))
def test_tenant_never_contains_key(key: str) -> None:
    t = tenant_of(key, SALT_A)
    assert t.startswith("t_") and len(t) == 26
    if len(key) >= 8:  # shorter keys could occur in a hex digest by chance
        assert key not in t
