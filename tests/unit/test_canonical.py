"""Identity rules for what clients re-serialize: one test per rule, per wire (DESIGN step 2)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy import identify
from proxy.protocols import openai_chat, responses
from proxy.protocols.anthropic import convert as anthropic
from proxy.protocols.responses import convert as responses_convert

CC = {"type": "ephemeral"}


def chat_hashes(messages: list[dict[str, Any]]) -> list[str]:
    return identify.chain("t", identify.split_prefix(openai_chat.WIRE.messages({"messages": messages}))[1])


def anthropic_hashes(messages: list[dict[str, Any]]) -> list[str]:
    return identify.chain("t", identify.split_prefix(anthropic.to_common({"messages": messages}))[1])


def responses_hashes(items: list[dict[str, Any]] | str) -> list[str]:
    return identify.chain("t", identify.split_prefix(responses_convert.request_messages({"input": items}))[1])


# --------------------------------------------------------------------------- canonical arguments


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ('{"command": "ls"}', '{"command":"ls"}'),
        ('{"b": 1, "a": 2}', '{"a":2,"b":1}'),
        ('{\n  "path": "\\u00e9"\n}', '{"path":"é"}'),
        ("[1, 2]", "[1,2]"),
    ],
)
def test_arguments_equal_as_parsed_json(a: str, b: str) -> None:
    assert identify.canonical_arguments(a) == identify.canonical_arguments(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ('{"command": "ls"}', '{"command": "ls -la"}'),
        ('{"n": 1}', '{"n": "1"}'),
        ('"abc"', "abc"),  # a JSON string and a raw string that does not parse
        ("{not json", "{not  json"),  # unparsable: compared as the raw string
    ],
)
def test_arguments_that_differ(a: str, b: str) -> None:
    assert identify.canonical_arguments(a) != identify.canonical_arguments(b)


def test_unparsable_arguments_stay_raw() -> None:
    assert identify.canonical_arguments("{not json") == "{not json"
    assert identify.canonical_arguments("") == ""
    assert identify.canonical_arguments(None) == ""


# --------------------------------------------------------------------------- chat


def _chat_call(arguments: str) -> list[dict[str, Any]]:
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": arguments}}
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]


def test_chat_respelled_arguments_same_chain() -> None:
    assert chat_hashes(_chat_call('{"command": "ls", "cwd": "/"}')) == chat_hashes(
        _chat_call('{"cwd":"/","command":"ls"}')
    )


def test_chat_other_argument_value_forks() -> None:
    a, b = chat_hashes(_chat_call('{"command": "ls"}')), chat_hashes(_chat_call('{"command": "pwd"}'))
    assert a[0] == b[0] and a[1] != b[1]


@pytest.mark.parametrize("marker", [None, CC])
def test_chat_single_text_part_is_the_string(marker: Any) -> None:
    part: dict[str, Any] = {"type": "text", "text": "P"}
    if marker:
        part["cache_control"] = marker
    assert chat_hashes([{"role": "user", "content": [part]}]) == chat_hashes([{"role": "user", "content": "P"}])


def test_chat_bytes_untouched_by_canonical_form() -> None:
    messages = _chat_call('{"command": "ls"}')
    common = openai_chat.WIRE.messages({"messages": messages})
    assert common[1]["tool_calls"][0]["function"]["arguments"] == '{"command": "ls"}'


# --------------------------------------------------------------------------- anthropic


@pytest.mark.parametrize("marker", [None, CC])
def test_anthropic_single_text_block_is_the_string(marker: Any) -> None:
    block: dict[str, Any] = {"type": "text", "text": "P"}
    if marker:
        block["cache_control"] = marker
    assert anthropic_hashes([{"role": "user", "content": [block]}]) == anthropic_hashes(
        [{"role": "user", "content": "P"}]
    )


def test_anthropic_two_blocks_are_not_one_string() -> None:
    two = [{"type": "text", "text": "P"}, {"type": "text", "text": "Q"}]
    assert anthropic_hashes([{"role": "user", "content": two}]) != anthropic_hashes([{"role": "user", "content": "PQ"}])


def _answered(answer: Any) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "n"},
    ]


@pytest.mark.parametrize("marker", [None, CC])
def test_anthropic_answer_as_one_text_block_is_the_string(marker: Any) -> None:
    """An SDK app sends the answer back as `reply.content[0].text`: the stored answer's block copy
    adds nothing to that string, so both are one message (and `citations: null` is no citation)."""
    block: dict[str, Any] = {"type": "text", "text": "A", "citations": None}
    if marker:
        block["cache_control"] = marker
    assert anthropic_hashes(_answered([block])) == anthropic_hashes(_answered("A"))


@pytest.mark.parametrize(
    ("blocks", "string"),
    [
        ([{"type": "text", "text": "A"}, {"type": "text", "text": "B"}], "A\nB"),
        ([{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "A"}], "A"),
        ([{"type": "text", "text": "A", "citations": [{"type": "char_location", "cited_text": "x"}]}], "A"),
        ([{"type": "text", "text": "A"}], "B"),
    ],
    ids=["two-text-blocks", "thinking", "citations", "other-text"],
)
def test_anthropic_answer_blocks_with_more_than_one_text_are_not_the_string(blocks: Any, string: str) -> None:
    a, b = anthropic_hashes(_answered(blocks)), anthropic_hashes(_answered(string))
    assert a[0] == b[0] and a[1] != b[1]


def test_anthropic_answer_keeps_its_blocks_and_the_string_stays_a_string() -> None:
    """The rule is for matching only: the stored answer keeps its block copy (sent back exactly),
    a client's string goes back as that string."""
    blocks = [{"type": "text", "text": "A"}]
    common = anthropic.to_common({"messages": _answered(blocks)})
    assert common[1][anthropic.PRIVATE] == {"content": blocks}
    assert anthropic.to_native(common) == _answered(blocks)
    assert anthropic.to_native(anthropic.to_common({"messages": _answered("A")})) == _answered("A")


def test_a_private_copy_that_holds_more_than_the_content_is_part_of_the_message() -> None:
    text = {"type": "text", "text": "A"}
    plain = identify.canonical({"role": "assistant", "content": "A"})
    assert identify.canonical({"role": "assistant", "content": "A", "_wire": {"content": [text]}}) == plain
    for copy in (
        {"content": [text], "extra": {"id": "m"}},
        {"content": [{**text, "index": 0}]},
        {"parts": [text]},
        {"content": text},
    ):
        assert identify.canonical({"role": "assistant", "content": "A", "_wire": copy}) != plain
    # only a private key: a visible one is content
    assert identify.canonical({"role": "assistant", "content": "A", "wire": {"content": [text]}}) != plain


def test_anthropic_moving_cache_markers_never_change_identity() -> None:
    """Claude Code moves its breakpoints every turn, inside a message too: its `/compact` after an
    interrupted turn marks the newest block instead of the one marked before; a tool result and
    an assistant answer lose theirs on the next turn."""

    def marked(*at: int) -> list[dict[str, Any]]:
        texts = [{"type": "text", "text": t} for t in ("step 2", "[Request interrupted by user]")]
        for i in set(at) & {0, 1}:
            texts[i] = {**texts[i], "cache_control": CC}
        use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}
        answer = [{"type": "text", "text": "A"}, use]
        if 2 in at:
            answer = [answer[0], {**use, "cache_control": CC}]
            result = {**result, "cache_control": CC}
        return [
            {"role": "user", "content": texts},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": [result]},
        ]

    chains = {tuple(anthropic_hashes(marked(*at))) for at in [(), (0,), (1,), (0, 1), (2,), (1, 2)]}
    assert len(chains) == 1


def test_anthropic_block_prompt_goes_back_as_blocks_with_its_marker() -> None:
    """Identity drops the placing info of a whole user message; the encoding still rebuilds the
    client's blocks, cache_control at its key position."""
    native = [
        {"role": "user", "content": [{"type": "text", "cache_control": CC, "text": "P"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Q"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
            ],
        },
    ]
    common = anthropic.to_common({"messages": native})
    assert anthropic.PRIVATE not in common[0]
    rebuilt = anthropic.to_native(common)
    assert json.dumps(rebuilt) == json.dumps(native)


def test_anthropic_tool_result_message_keeps_its_placing() -> None:
    content = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}, {"type": "text", "text": "next"}]
    native = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}],
        },
        {"role": "user", "content": content},
    ]
    common = anthropic.to_common({"messages": native})
    assert common[-1][anthropic.PRIVATE]["piece"] == 1
    assert anthropic.to_native(common) == native


def test_anthropic_tool_input_key_order_same_chain() -> None:
    def history(tool_input: dict[str, Any]) -> list[dict[str, Any]]:
        use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": tool_input}
        return [{"role": "user", "content": "go"}, {"role": "assistant", "content": [use]}]

    assert anthropic_hashes(history({"command": "ls", "description": "d"})) == anthropic_hashes(
        history({"description": "d", "command": "ls"})
    )


# --------------------------------------------------------------------------- responses


def _responses_call(arguments: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": arguments},
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
    ]


def test_responses_respelled_arguments_same_chain() -> None:
    a = responses_hashes(_responses_call('{"command": "ls", "cwd": "/"}'))
    assert a == responses_hashes(_responses_call('{"cwd":"/","command":"ls"}'))


def test_responses_other_argument_value_forks() -> None:
    a, b = (
        responses_hashes(_responses_call('{"command": "ls"}')),
        responses_hashes(_responses_call('{"command": "pwd"}')),
    )
    assert a[0] == b[0] and a[1] != b[1]


def test_responses_single_input_text_is_the_string() -> None:
    block = [{"role": "user", "content": [{"type": "input_text", "text": "P"}]}]
    assert responses_hashes(block) == responses_hashes([{"role": "user", "content": "P"}]) == responses_hashes("P")


def test_responses_encoding_sends_the_clients_spelling() -> None:
    """The stored (canonical) items are matched to the client's own item: its bytes go upstream."""
    body = {"input": _responses_call('{"command": "ls",  "cwd": "/"}')}
    messages = responses_convert.request_messages(body)
    data, _ = responses.WIRE.encode(body, messages, False, None)
    assert data is not None
    assert json.loads(data)["input"] == body["input"]
