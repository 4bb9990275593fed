"""Decision equivalence (proxy/shadow/equivalence.py): the same next step, or not, and why."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.protocols import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES
from proxy.shadow.equivalence import TEXT_SIMILARITY, Step, compare, similarity, step_of


def calls(*pairs: tuple[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
            for i, (name, args) in enumerate(pairs)
        ],
    }


def text(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def same(a: dict[str, Any] | None, b: dict[str, Any] | None, fa: str | None = "stop", fb: str | None = "stop") -> bool:
    return compare(step_of(a, fa), step_of(b, fb)).equivalent


def test_kinds_of_next_step() -> None:
    assert step_of(calls(("ls", {})), "tool_calls").kind == "tool_call"
    assert step_of(text("done"), "stop").kind == "text"
    assert step_of(text("  "), "stop").kind == "stop"
    assert step_of(None, None).kind == "stop"
    assert step_of({**calls(("ls", {})), "content": "let me look"}, "tool_calls").kind == "tool_call"


def test_a_different_kind_diverges() -> None:
    verdict = compare(step_of(calls(("ls", {})), "tool_calls"), step_of(text("I am done."), "stop"))
    assert verdict == type(verdict)(False, {"kind": ["tool_call", "text"]})


def test_tool_arguments_compare_as_canonical_json() -> None:
    assert same(calls(("read", '{"path": "a.py", "n": 1}')), calls(("read", '{"n":1,"path":"a.py"}')))
    verdict = compare(
        step_of(calls(("read", {"path": "a.py"})), None), step_of(calls(("read", {"path": "b.py"})), None)
    )
    assert not verdict.equivalent
    assert verdict.difference == {"arguments": {"read": [[{"path": "a.py"}, {"path": "b.py"}]]}}
    assert not same(calls(("read", {"n": 1})), calls(("read", {"n": "1"})))  # a type is part of the value
    assert not same(calls(("read", {"n": 1})), calls(("read", {"n": 1, "all": True})))


def test_tool_names_are_a_multiset_and_parallel_calls_pair_in_any_order() -> None:
    assert same(calls(("a", {"x": 1}), ("b", {})), calls(("b", {}), ("a", {"x": 1})))
    verdict = compare(step_of(calls(("a", {}), ("a", {})), None), step_of(calls(("a", {})), None))
    assert verdict.difference == {"tools": [["a", "a"], ["a"]]}
    assert not same(calls(("a", {})), calls(("b", {})))


def test_free_text_arguments_are_tolerated_by_similarity() -> None:
    one = "Fix the off by one error in the pagination of the billing report"
    two = "Fix the off-by-one error in pagination of the billing report"
    assert similarity(one, two) >= TEXT_SIMILARITY
    assert same(calls(("commit", {"message": one})), calls(("commit", {"message": two})))
    other = "Add a retry with exponential backoff to the queue consumer loop"
    assert not same(calls(("commit", {"message": one})), calls(("commit", {"message": other})))
    # short strings are identifiers, never free text: one character apart is another value
    assert not same(calls(("read", {"path": "src/app.py"})), calls(("read", {"path": "src/app.pyc"})))


def test_unparseable_arguments_compare_as_strings() -> None:
    assert same(calls(("sh", "ls -la")), calls(("sh", "ls -la")))
    assert not same(calls(("sh", "ls -la")), calls(("sh", "rm -rf")))


def test_text_answers_need_the_same_finish_and_similar_text() -> None:
    assert same(text("The tests pass. I am done."), text("The tests pass; I am done!"))
    assert not same(text("The tests pass."), text("The tests pass."), "stop", "length")
    verdict = compare(step_of(text("The tests pass."), "stop"), step_of(text("Deploying to prod now."), "stop"))
    assert not verdict.equivalent and verdict.difference["text_similarity"] < TEXT_SIMILARITY
    blocks = [{"type": "text", "text": "The tests "}, {"type": "text", "text": "pass."}]
    assert same(text(blocks), text("the tests pass"))


def test_similarity_bounds() -> None:
    assert similarity("", "") == 1.0
    assert similarity("a b c", "a b c") == 1.0
    assert similarity("a b c", "x y z") == 0.0
    assert similarity("A, b; C!", "a b c") == 1.0


def test_stop_answers_compare_finish_reasons() -> None:
    assert same(text(""), text(None))
    assert not same(text(""), text(None), "stop", "length")


@pytest.mark.parametrize("wire", [OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC], ids=lambda w: w.name)
def test_every_wire_reads_into_the_same_steps(wire: Any) -> None:
    """Each wire's own parser turns its answer into the common model: equivalence never asks
    which API an answer came from."""
    answers = {
        "openai_chat": {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"d":"."}'}}
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        },
        "anthropic": {
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"d": "."}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
        "openai_responses": {
            "status": "completed",
            "output": [{"type": "function_call", "call_id": "c1", "name": "ls", "arguments": '{"d": "."}'}],
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    }
    message, finish, _ = wire.response(answers[wire.name])
    step = step_of(message, finish)
    assert step == Step("tool_call", (("ls", {"d": "."}),), step.text, finish)
    assert compare(step, step_of(message, finish)).equivalent
