"""Anthropic mid-conversation system messages, pure: validation, conversion both ways, identity
and pinning."""

from __future__ import annotations

import json

import pytest

from policies.base import Item
from policies.config import PinsConfig
from policies.history_index import index_items
from policies.pins import pinned_seqs
from proxy.errors import BadRequest
from proxy.identify import canonical, chain, split_prefix
from proxy.protocols.anthropic import WIRE
from proxy.protocols.anthropic.convert import OMITTED_TEXT, to_common, to_native

CC = {"type": "ephemeral"}
ENV = "# Environment\ncwd: /srv"
TURN = {"role": "system", "content": [{"type": "text", "text": ENV}]}


def _body(*messages: dict) -> dict:
    return {"model": "claude-x", "max_tokens": 10, "system": "S", "messages": list(messages)}


def test_a_system_turn_after_a_user_turn_is_history_not_prefix() -> None:
    common = to_common(_body({"role": "user", "content": "hi"}, TURN))
    assert [m["role"] for m in common] == ["system", "user", "system"]
    prefix, history = split_prefix(common)
    assert prefix == [{"role": "system", "content": "S"}]
    assert history[1] == {"role": "system", "content": [{"type": "text", "text": ENV}]}


def test_identity_block_string_and_marker_forms_are_one_message() -> None:
    marked = {"role": "system", "content": [{"type": "text", "text": ENV, "cache_control": CC}]}
    forms = [TURN, marked, {"role": "system", "content": ENV}]
    hashes = {chain("t", to_common(_body({"role": "user", "content": "hi"}, form))[1:])[-1] for form in forms}
    assert len(hashes) == 1
    assert canonical(to_common(_body({"role": "user", "content": "hi"}, marked))[2]) == canonical(
        {"role": "system", "content": ENV}
    )


def test_to_native_keeps_it_a_system_message_with_its_marker() -> None:
    marked = {"role": "system", "content": [{"type": "text", "text": ENV, "cache_control": CC}]}
    native = [{"role": "user", "content": "hi"}, marked, {"role": "system", "content": "second"}]
    common = to_common(_body(*native))
    assert to_native(common, prefix=1) == native  # two system turns stay two
    # a projection that dropped the first user turn: a user note goes first, the turn stays system
    assert to_native([common[0], common[2]], prefix=1) == [{"role": "user", "content": OMITTED_TEXT}, marked]
    # no top-level system: nothing is skipped
    bare = {"model": "claude-x", "max_tokens": 10, "messages": native}
    assert to_native(to_common(bare), prefix=0) == native


def test_encode_after_a_rewrite_sends_the_system_turn_natively() -> None:
    body = _body({"role": "user", "content": "hi"}, TURN)
    common = to_common(body)
    encoded, _ = WIRE.encode(body, common, False, None)
    assert encoded is not None
    assert json.loads(encoded)["messages"] == body["messages"]


@pytest.mark.parametrize(
    ("messages", "wording"),
    [
        ([TURN, {"role": "user", "content": "hi"}], 'first message must use the "user" role'),
        (
            [{"role": "user", "content": "hi"}, {"role": "system", "content": [{"type": "image", "source": {}}]}],
            "messages.1.content: a system message's content must be a string or a list of text blocks",
        ),
        ([{"role": "user", "content": "hi"}, {"role": "system", "content": 5}], "messages.1.content"),
        ([{"role": "tool", "content": "x"}], "messages.0.role: Input should be 'user', 'assistant' or 'system'"),
    ],
)
def test_bad_system_turns_are_rejected_in_the_apis_wording(messages: list, wording: str) -> None:
    with pytest.raises(BadRequest) as caught:
        to_common(_body(*messages))
    assert wording in str(caught.value)


def test_system_turns_are_always_pinned() -> None:
    items = [
        Item(1, {"role": "user", "content": "goal"}, 3),
        Item(2, {"role": "system", "content": ENV}, 5),
        Item(3, {"role": "assistant", "content": "ok"}, 3),
        Item(4, {"role": "developer", "content": "be brief"}, 4),
        Item(5, {"role": "user", "content": "next"}, 3),
    ]
    for config in (PinsConfig(), PinsConfig(first_user=False), PinsConfig(roles=("assistant",))):
        expected = {2, 4} | ({1} if config.first_user else set()) | ({3} if config.roles else set())
        assert pinned_seqs(items, config) == expected
        assert index_items(items).pinned(config) == expected
