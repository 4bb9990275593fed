"""Re-renderings a client sends for an answer or a message (`proxy.renderings`), as the identity
chain sees them. smolagents' renderings are made by smolagents itself (`ActionStep.to_messages`
and `get_clean_message_list` with its tool role conversions, what `ToolCallingAgent` sends)."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from smolagents.memory import ActionStep, ToolCall
from smolagents.models import get_clean_message_list, tool_role_conversions
from smolagents.monitoring import Timing

from proxy import identify, renderings
from proxy.protocols.anthropic import convert as anthropic

TASK = {"role": "user", "content": "New task:\nList the rows."}


def answer(calls: list[tuple[str, str, Any]], content: str | None = None) -> dict[str, Any]:
    """The upstream's answer as ctxproxy stores it: arguments as the model's JSON string."""
    tool_calls = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
    ]
    return {"role": "assistant", "content": content, "tool_calls": tool_calls}


def smolagents_rendering(calls: list[tuple[str, str, Any]], content: str | None = None) -> dict[str, Any]:
    """What smolagents sends back for that answer: its memory step rendered by its own code
    (calls sorted by id, as `ToolCallingAgent.process_tool_calls` keeps them)."""
    step = ActionStep(step_number=1, timing=Timing(start_time=0.0), model_output=content)
    step.tool_calls = [ToolCall(name=n, arguments=a, id=i) for i, n, a in sorted(calls)]
    messages = get_clean_message_list(step.to_messages(), role_conversions=tool_role_conversions)
    (rendered,) = [m for m in messages if m["role"] == "assistant"]
    return {"role": "assistant", "content": rendered["content"]}


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return identify.chain("t", [TASK, a]) == identify.chain("t", [TASK, b])


@pytest.mark.parametrize(
    ("calls", "content"),
    [
        ([("call_1", "shell", {"command": "ls"})], None),
        ([("call_1", "shell", {"command": "ls"})], ""),
        ([("call_z", "shell", {"command": "ls b"}), ("call_a", "shell", {"command": "ls a"})], None),
        ([("call_1", "shell", {"command": "ls", "n": 2, "deep": {"x": [1.5, None, True]}})], "I will look."),
        ([("call_1", "shell", {"command": "ls"})], "  I will look.\n"),  # smolagents strips the text
        ([("call_1", "final_answer", {"answer": "é \n 'quoted' \"double\""})], None),
    ],
)
def test_a_smolagents_rendering_is_the_answer_it_renders(
    calls: list[tuple[str, str, Any]], content: str | None
) -> None:
    rendered = smolagents_rendering(calls, content)
    assert "Calling tools:" in json.dumps(rendered)
    assert same(rendered, answer(calls, content))


@pytest.mark.parametrize(
    "other",
    [
        [("call_2", "shell", {"command": "ls"})],  # another call id
        [("call_1", "shell", {"command": "ls -a"})],  # other arguments
        [("call_1", "run", {"command": "ls"})],  # another tool
        [("call_1", "shell", {"command": "ls"}), ("call_2", "shell", {"command": "ls"})],  # one more call
        [("call_1", "shell", {"command": 1})],  # an argument of another type
    ],
)
def test_a_rendering_of_another_answer_is_another_message(other: list[tuple[str, str, Any]]) -> None:
    stored = answer([("call_1", "shell", {"command": "ls"})])
    assert not same(smolagents_rendering(other), stored)


def test_a_rendering_with_other_text_is_another_message() -> None:
    calls = [("call_1", "shell", {"command": "ls"})]
    assert not same(smolagents_rendering(calls, "I will look."), answer(calls, "I will list."))
    assert not same(smolagents_rendering(calls, "I will look."), answer(calls))


def text(value: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": value}]}


CALL = "[{'id': 'call_1', 'type': 'function', 'function': {'name': 'shell', 'arguments': {'command': 'ls'}}}]"


@pytest.mark.parametrize(
    "message",
    [
        text("Calling tools:\n[]"),  # no call
        text("Calling tools: " + CALL),  # not the rendering's line break
        text("x Calling tools:\n" + CALL),  # glued to other text
        text("Calling tools:\n" + CALL + "\nand then"),  # text after the list
        text("Calling tools:\n" + CALL.replace("'type': 'function', ", "")),  # a key missing
        text("Calling tools:\n" + CALL.replace("}}]", "}, 'extra': 1}]")),  # a key more
        text("Calling tools:\n" + CALL.replace("'call_1'", "''")),  # an empty id
        text("Calling tools:\n" + CALL.replace("'call_1'", "1")),  # an id that is no string
        text("Calling tools:\n[__import__('os').system('true')]"),  # not a literal
        text("Calling tools:\n" + "[" * 5000 + "]" * 5000),  # nested beyond the JSON depth limit
        {"role": "user", "content": "Calling tools:\n" + CALL},  # not the assistant's
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "Calling tools:\n" + CALL}],
        },
    ],
)
def test_what_is_not_a_rendering(message: dict[str, Any]) -> None:
    assert renderings.rendered_answer(message) is None
    assert identify.canonical(message)["role"] == message["role"]


def test_the_rendering_reads_back_the_calls() -> None:
    assert renderings.rendered_answer(text("I will look.\nCalling tools:\n" + CALL)) == {
        "role": "assistant",
        "content": "I will look.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": '{"command":"ls"}'}}
        ],
    }


def test_a_huge_text_is_not_parsed() -> None:
    big = "Calling tools:\n[" + "1," * renderings.RENDERING_MAX_CHARS + "]"
    assert renderings.rendered_answer(text(big)) is None


ids = st.text(string.ascii_letters + string.digits + "_", min_size=1, max_size=8)
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@given(values)
def test_a_literal_reads_back_what_repr_wrote(value: Any) -> None:
    """`literal_value` reads what Python's `repr` (smolagents' `str` of its calls) writes for JSON
    data, escapes included."""
    assert renderings.literal_value(repr([value])) == [value]


@pytest.mark.parametrize(
    "literal",
    ["[1+1]", "[(1, 2)]", "[{1, 2}]", "['a\\qb']", "[1,]", "[x]", "[1 2]", "['a' 'b']", "[" + "9" * 30 + "]", "[b'a']"],
)
def test_what_is_not_a_literal_of_json_data(literal: str) -> None:
    assert renderings.literal_value(literal) is None


calls_of = st.lists(
    st.tuples(ids, st.sampled_from(["shell", "read"]), st.dictionaries(st.text(max_size=4), values, max_size=3)),
    min_size=1,
    max_size=3,
    unique_by=lambda c: c[0],
)


@given(calls_of, calls_of)
def test_a_rendering_never_merges_two_different_answers(
    a: list[tuple[str, str, Any]], b: list[tuple[str, str, Any]]
) -> None:
    """A rendering of `a` is the stored answer `b` exactly when they are the same calls."""
    equal = sorted((i, n, json.dumps(x, sort_keys=True)) for i, n, x in a) == sorted(
        (i, n, json.dumps(x, sort_keys=True)) for i, n, x in b
    )
    assert same(smolagents_rendering(a), answer(b)) == equal


# --------------------------------------------------------------------------- transient parts


def reminder(day: str) -> dict[str, str]:
    return {"type": "text", "text": f"<system-reminder>\nToday's date is {day}.\n</system-reminder>"}


PROMPT = {"type": "text", "text": "Read the README."}


def user(*parts: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(parts)}


def test_a_date_reminder_part_is_transient() -> None:
    """Qwen Code's `--continue`: the first user message without the reminder it had."""
    with_it = identify.chain("t", [user(reminder("Friday, December 4, 2026"), PROMPT)])
    assert with_it == identify.chain("t", [user(PROMPT)])
    assert with_it == identify.chain("t", [user(reminder("Saturday, December 5, 2026"), PROMPT)])
    assert with_it == identify.chain("t", [{"role": "user", "content": "Read the README."}])
    changed = {
        "type": "text",
        "text": "<system-reminder>The date has changed. Today's date is now 2026-12-05.</system-reminder>",
    }
    assert with_it == identify.chain("t", [user(PROMPT, changed)])


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (user(reminder("Friday"), PROMPT), user(reminder("Friday"), {"type": "text", "text": "Read the LICENSE."})),
        (user(reminder("Friday")), user(reminder("Saturday"))),  # a reminder alone is the message
        (
            user(
                {
                    "type": "text",
                    "text": "<system-reminder>\n" + "Today's date is Friday.\n" * 40 + "</system-reminder>",
                },
                PROMPT,
            ),
            user(PROMPT),
        ),  # a long reminder is content (Claude Code's project context names the date too)
        (user({"type": "text", "text": "<system-reminder>Plan mode is on.</system-reminder>"}, PROMPT), user(PROMPT)),
        (user({"type": "text", "text": "Today's date is Friday."}, PROMPT), user(PROMPT)),  # not a reminder block
        (
            {"role": "assistant", "content": [reminder("Friday"), PROMPT]},
            {"role": "assistant", "content": [PROMPT]},
        ),  # only user messages carry transient parts
    ],
)
def test_what_is_not_transient(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert identify.chain("t", [a]) != identify.chain("t", [b])


def test_a_date_reminder_block_is_transient_on_the_messages_api_too() -> None:
    """Qwen Code in Anthropic mode sends the same parts as text blocks."""

    def chain(content: Any) -> list[str]:
        return identify.chain("t", anthropic.to_common({"messages": [{"role": "user", "content": content}]}))

    assert chain([reminder("Friday, December 4, 2026"), PROMPT]) == chain([PROMPT]) == chain("Read the README.")
