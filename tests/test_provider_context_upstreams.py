"""The scripted upstreams speak the providers' own context management, checked through the real
`openai` and `anthropic` SDKs: OpenAI's ``/v1/responses/compact``, compaction items,
``context_management`` thresholds, ``compaction_trigger`` and ``/v1/responses/input_tokens``
(tests/support/responses_context.py); Anthropic's ``context_management`` edits, compaction
blocks, ``usage.iterations`` and ``count_tokens`` (tests/support/anthropic_context.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.support import anthropic_context, responses_context
from tests.support.anthropic_upstream import AnthropicUpstream, Reply, estimate_tokens, sign
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, count_input_tokens

MODEL = "gpt-5"
CLAUDE = "claude-test-1"
CM = "context-management-2025-06-27"
COMPACT = "compact-2026-01-12"
LONG = "the quick brown fox jumps over the lazy dog " * 40
HUGE = "the quick brown fox jumps over the lazy dog " * 6000
"""Past the lowest compaction trigger the API takes (50,000 input tokens)."""


@pytest.fixture(scope="module")
def responses_server() -> Iterator[ResponsesServer]:
    with ResponsesServer() as server:
        yield server


@pytest.fixture
def oai_up(responses_server: ResponsesServer) -> Iterator[ResponsesServer]:
    responses_server.clear()
    yield responses_server
    responses_server.clear()


@pytest.fixture
def oai(oai_up: ResponsesServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=oai_up.base_url, api_key="sk-test", max_retries=0)


@pytest.fixture(scope="module")
def anthropic_server() -> Iterator[AnthropicUpstream]:
    with AnthropicUpstream() as server:
        yield server


@pytest.fixture
def claude_up(anthropic_server: AnthropicUpstream) -> Iterator[AnthropicUpstream]:
    anthropic_server.clear()
    yield anthropic_server
    anthropic_server.clear()


@pytest.fixture
def claude(claude_up: AnthropicUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=claude_up.url, api_key="sk-ant-test", max_retries=0)


def _user(text: str) -> Any:
    return {"role": "user", "content": text}


def _compaction(oai: openai.OpenAI, items: list[Any]) -> Any:
    compacted = oai.responses.compact(model=MODEL, input=items)
    return compacted.output[-1].model_dump(exclude_none=True)


# ---- OpenAI Responses


def test_compact_answers_the_user_messages_then_one_opaque_compaction_item(
    oai: openai.OpenAI, oai_up: ResponsesServer
) -> None:
    items = [_user("plan the migration"), {"role": "assistant", "content": "sure"}, _user("now the queue")]
    compacted = oai.responses.compact(model=MODEL, input=items, instructions="be brief")

    assert compacted.object == "response.compaction"
    assert [(o.type, getattr(o, "role", None)) for o in compacted.output] == [
        ("message", "user"),
        ("message", "user"),
        ("compaction", None),
    ]
    item = compacted.output[-1]
    assert item.type == "compaction" and item.id.startswith("cmp_")
    summary = oai_up.compactions[-1]["summary"]
    assert summary not in item.encrypted_content and responses_context.summary_of(item.model_dump()) == summary
    counted = count_input_tokens("be brief", [{"type": "message", **i} for i in items])
    assert compacted.usage.input_tokens == counted
    assert compacted.usage.total_tokens == counted + compacted.usage.output_tokens
    sent = oai_up.last
    assert sent.path == "/v1/responses/compact"
    assert json.loads(sent.raw) == {"model": MODEL, "input": items, "instructions": "be brief"}


def test_compact_by_previous_response_id_and_replay_its_output(oai: openai.OpenAI, oai_up: ResponsesServer) -> None:
    """As the Agents SDK's OpenAIResponsesCompactionSession does: compact a stored response by
    id, then send the compacted output back as input."""
    first = oai.responses.create(model=MODEL, input=LONG)
    compacted = oai.responses.compact(model=MODEL, previous_response_id=first.id)
    assert [o.type for o in compacted.output] == ["message", "compaction"]
    assert json.loads(oai_up.last.raw) == {"model": MODEL, "previous_response_id": first.id}
    replay: Any = [o.model_dump(exclude_unset=True, warnings=False) for o in compacted.output]
    answer = oai.responses.create(model=MODEL, input=[*replay, _user("next")])
    assert answer.output_text == "ok: next"


def test_a_compaction_item_costs_a_fixed_amount_and_the_items_before_it_still_count(
    oai: openai.OpenAI, oai_up: ResponsesServer
) -> None:
    item = _compaction(oai, [_user(LONG)])
    alone = oai.responses.create(model=MODEL, input=[_user("next")]).usage
    after = oai.responses.create(model=MODEL, input=[item, _user("next")]).usage
    with_prefix = oai.responses.create(model=MODEL, input=[_user(LONG), item, _user("next")]).usage
    assert alone and after and with_prefix
    framing = oai_up.counting.message_tokens
    assert after.input_tokens - alone.input_tokens == responses_context.COMPACTION_ITEM_TOKENS + framing
    long_message = count_input_tokens(None, [{"type": "message", **_user(LONG)}]) - 3
    assert with_prefix.input_tokens - after.input_tokens == long_message
    assert json.loads(oai_up.last.raw)["input"][1] == item  # forwarded byte for byte


@pytest.mark.parametrize("tamper", ["altered", "unknown", "not base64"])
def test_a_compaction_item_that_does_not_verify_gets_invalid_encrypted_content(
    oai: openai.OpenAI, oai_up: ResponsesServer, tamper: str
) -> None:
    item = _compaction(oai, [_user("hello")])
    blob = item["encrypted_content"]
    if tamper == "altered":
        item["encrypted_content"] = blob[:20] + ("A" if blob[20] != "A" else "B") + blob[21:]
    elif tamper == "unknown":
        item["encrypted_content"] = "gAAAAABpZ" + "x" * 60 + "=="
    else:
        item["encrypted_content"] = "not an encrypted blob!"
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model=MODEL, input=[item, _user("next")])
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "invalid_encrypted_content"
    assert error["type"] == "invalid_request_error" and error["param"] is None
    shown = item["encrypted_content"]
    assert error["message"] == (
        f"The encrypted content {shown[:4]}...{shown[-4:]} could not be verified. "
        "Reason: Encrypted content could not be decrypted or parsed."
    )
    assert oai_up.rejections[-1]["error"] == error


def test_context_management_compacts_once_the_input_crosses_the_threshold(
    oai: openai.OpenAI, oai_up: ResponsesServer
) -> None:
    management: Any = [{"type": "compaction", "compact_threshold": 200}]
    below = oai.responses.create(model=MODEL, input="short", context_management=management)
    assert [o.type for o in below.output] == ["message"] and oai_up.compactions == []

    oai_up.push(ResponsesReply(text="answered", compaction_summary="the fox story so far"))
    above = oai.responses.create(model=MODEL, input=LONG, context_management=management)
    assert [o.type for o in above.output] == ["compaction", "message"]
    assert above.output_text == "answered"
    assert responses_context.summary_of(above.output[0].model_dump()) == "the fox story so far"
    assert oai_up.compactions[-1]["via"] == "threshold"
    assert json.loads(oai_up.last.raw)["context_management"] == management


def test_the_stream_carries_the_compaction_item_and_its_compacting_event(
    oai: openai.OpenAI, oai_up: ResponsesServer
) -> None:
    management: Any = [{"type": "compaction", "compact_threshold": 100}]
    with oai.responses.stream(model=MODEL, input=LONG, context_management=management) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    added = kinds.index("response.output_item.added")
    assert kinds[added : added + 3] == [
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
    ]
    compacting: Any = events[added + 1]
    assert compacting.item_id == final.output[0].id and compacting.output_index == 0  # type: ignore[union-attr]
    assert [o.type for o in final.output] == ["compaction", "message"]


def test_context_management_is_validated(oai: openai.OpenAI, oai_up: ResponsesServer) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model=MODEL, input="hi", context_management=[{"type": "truncation"}])
    assert caught.value.body == {
        "message": "Invalid value: 'truncation'. Supported values are: 'compaction'.",
        "type": "invalid_request_error",
        "param": "context_management[0].type",
        "code": "invalid_value",
    }


def test_a_compaction_trigger_answers_the_compaction_item_alone_and_must_be_last(
    oai: openai.OpenAI, oai_up: ResponsesServer
) -> None:
    oai_up.compactor = lambda items: f"{len(items)} items"
    answer = oai.responses.create(model=MODEL, input=[_user("a"), _user("b"), {"type": "compaction_trigger"}])
    assert [o.type for o in answer.output] == ["compaction"]
    assert responses_context.summary_of(answer.output[0].model_dump()) == "2 items"
    assert oai_up.compactions[-1]["via"] == "trigger"
    # chained by id, the trigger is not part of what is stored
    follow = oai.responses.create(model=MODEL, input="go on", previous_response_id=answer.id)
    assert follow.output_text == "ok: go on"
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model=MODEL, input=[{"type": "compaction_trigger"}, _user("b")])
    assert caught.value.body == {**caught.value.body, "param": "input[0]", "code": "invalid_value"}  # type: ignore[dict-item]


def test_input_tokens_counts_like_the_create_request_bills(oai: openai.OpenAI, oai_up: ResponsesServer) -> None:
    item = _compaction(oai, [_user(LONG)])
    items: Any = [item, _user("next"), {"role": "assistant", "content": "ok"}, _user("more")]
    counted = oai.responses.input_tokens.count(model=MODEL, input=items, instructions="hi")
    assert counted.object == "response.input_tokens"
    billed = oai.responses.create(model=MODEL, input=items, instructions="hi").usage
    assert billed is not None and counted.input_tokens == billed.input_tokens
    assert oai_up.requests[-2].path == "/v1/responses/input_tokens"
    with pytest.raises(openai.BadRequestError):
        bogus: Any = {**item, "encrypted_content": "bogus"}
        oai.responses.input_tokens.count(input=[bogus, _user("next")])


# ---- Anthropic Messages


def _tool_conversation(n: int, result: str = LONG) -> Any:
    messages: list[dict[str, Any]] = [_user("read the files")]
    for k in range(n):
        use = {"type": "tool_use", "id": f"toolu_{k}", "name": "grep" if k % 2 else "read", "input": {"k": k}}
        messages.append({"role": "assistant", "content": [use]})
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": result}]}
        )
    messages[-1]["content"].append({"type": "text", "text": "what now?"})
    return messages


def _bad(call: Any) -> dict[str, Any]:
    with pytest.raises(anthropic.BadRequestError) as caught:
        call()
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    error: dict[str, Any] = body["error"]
    return error


def test_context_management_without_its_beta_header_is_refused(
    claude: anthropic.Anthropic, claude_up: AnthropicUpstream
) -> None:
    edits = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    error = _bad(
        lambda: claude.messages.create(
            model=CLAUDE, max_tokens=64, messages=[_user("hi")], extra_body={"context_management": edits}
        )
    )
    assert error == {"type": "invalid_request_error", "message": "context_management: Extra inputs are not permitted"}
    assert claude_up.rejections[-1][1]["error"] == error


def test_unknown_or_unlicensed_edits_are_refused(claude: anthropic.Anthropic) -> None:
    def create(betas: Any, *edits: Any) -> Any:
        return lambda: claude.beta.messages.create(
            model=CLAUDE,
            max_tokens=64,
            messages=[_user("hi")],
            betas=betas,
            context_management={"edits": list(edits)},
        )

    unknown = _bad(create([CM, COMPACT], {"type": "clear_everything_20990101"}))
    assert unknown["message"] == (
        "context_management.edits.0: Input tag 'clear_everything_20990101' found using 'type' does not match any "
        "of the expected tags: 'clear_tool_uses_20250919', 'clear_thinking_20251015', 'compact_20260112'"
    )
    compact_without_beta = _bad(create([CM], {"type": "compact_20260112"}))
    assert "Input tag 'compact_20260112'" in compact_without_beta["message"]
    clearing_without_beta = _bad(create([COMPACT], {"type": "clear_tool_uses_20250919"}))
    assert "Input tag 'clear_tool_uses_20250919'" in clearing_without_beta["message"]
    thinking_second = _bad(create([CM], {"type": "clear_tool_uses_20250919"}, {"type": "clear_thinking_20251015"}))
    assert thinking_second["message"].startswith("context_management.edits.1: `clear_thinking_20251015` must be")


def test_clear_tool_uses_clears_the_oldest_results_and_reports_it(
    claude: anthropic.Anthropic, claude_up: AnthropicUpstream
) -> None:
    messages = _tool_conversation(5)
    edit: Any = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 1000},
        "keep": {"type": "tool_uses", "value": 2},
    }
    full = estimate_tokens({"messages": messages})
    answer = claude.beta.messages.create(
        model=CLAUDE,
        max_tokens=64,
        messages=messages,
        betas=[CM],
        context_management={"edits": [edit]},
    )
    assert answer.context_management is not None
    (applied,) = answer.context_management.applied_edits
    assert applied.type == "clear_tool_uses_20250919" and applied.cleared_tool_uses == 3
    assert answer.usage.input_tokens == full - applied.cleared_input_tokens
    # the edit is applied to what the model sees: the client's messages and the recorded request are untouched
    assert [m["content"][0]["content"] for m in messages[2::2]] == [LONG] * 5
    assert json.loads(claude_up.message_requests[-1].raw)["messages"] == messages
    counted = claude.beta.messages.count_tokens(
        model=CLAUDE,
        messages=messages,
        betas=[CM],
        context_management={"edits": [edit]},
    )
    assert counted.input_tokens == answer.usage.input_tokens
    assert counted.context_management is not None and counted.context_management.original_input_tokens == full


def test_clear_tool_uses_respects_trigger_exclusions_inputs_and_clear_at_least(
    claude: anthropic.Anthropic, claude_up: AnthropicUpstream
) -> None:
    messages = _tool_conversation(4)

    def applied(**edit: Any) -> list[Any]:
        management: Any = {"edits": [{"type": "clear_tool_uses_20250919", **edit}]}
        answer = claude.beta.messages.create(
            model=CLAUDE,
            max_tokens=64,
            messages=messages,
            betas=[CM],
            context_management=management,
        )
        assert answer.context_management is not None
        return list(answer.context_management.applied_edits)

    assert applied() == []  # the default trigger: 100,000 input tokens
    assert applied(trigger={"type": "tool_uses", "value": 4}) == []
    (some,) = applied(trigger={"type": "tool_uses", "value": 3}, keep={"type": "tool_uses", "value": 1})
    assert some.cleared_tool_uses == 3
    (reads,) = applied(
        trigger={"type": "tool_uses", "value": 1}, keep={"type": "tool_uses", "value": 0}, exclude_tools=["grep"]
    )
    assert reads.cleared_tool_uses == 2
    (inputs,) = applied(
        trigger={"type": "tool_uses", "value": 1}, keep={"type": "tool_uses", "value": 0}, clear_tool_inputs=True
    )
    assert inputs.cleared_input_tokens > some.cleared_input_tokens
    floor = {"type": "input_tokens", "value": 10 * reads.cleared_input_tokens}
    assert applied(trigger={"type": "tool_uses", "value": 1}, clear_at_least=floor) == []


def test_clear_thinking_keeps_the_most_recent_thinking_turns(claude: anthropic.Anthropic) -> None:
    def turn(k: int) -> dict[str, Any]:
        thought = f"thinking about step {k} " * 20
        return {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": thought, "signature": sign(thought)},
                {"type": "text", "text": f"step {k}"},
            ],
        }

    messages = [_user("go"), turn(1), _user("more"), turn(2), _user("more"), turn(3), _user("and?")]
    answer = claude.beta.messages.create(
        model=CLAUDE,
        max_tokens=2048,
        messages=messages,
        betas=[CM],
        thinking={"type": "enabled", "budget_tokens": 1024},
        context_management={
            "edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]
        },
    )
    assert answer.context_management is not None
    (applied,) = answer.context_management.applied_edits
    assert applied.type == "clear_thinking_20251015" and applied.cleared_thinking_turns == 2
    assert applied.cleared_input_tokens > 0


def _compacting(trigger: int, pause: bool = False) -> Any:
    return {
        "edits": [
            {
                "type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": trigger},
                "pause_after_compaction": pause,
            }
        ]
    }


def test_compaction_paused_answers_the_block_alone_with_iterations(
    claude: anthropic.Anthropic, claude_up: AnthropicUpstream
) -> None:
    messages = [_user(HUGE)]
    full = estimate_tokens({"messages": messages})
    claude_up.push(Reply(compaction_summary="the user pasted a fox story"))
    answer = claude.beta.messages.create(
        model=CLAUDE,
        max_tokens=64,
        messages=messages,
        betas=[COMPACT],
        context_management=_compacting(50_000, pause=True),
    )
    assert answer.stop_reason == "compaction"
    (block,) = answer.content
    assert block.type == "compaction" and block.content == "the user pasted a fox story"
    assert block.encrypted_content and "fox" not in block.encrypted_content
    (iteration,) = answer.usage.iterations or []
    assert iteration.type == "compaction" and iteration.input_tokens == full
    # the compaction iteration is not in the top-level usage
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (0, 0)
    assert answer.context_management is not None and answer.context_management.applied_edits == []


def test_a_compaction_trigger_below_the_minimum_is_refused(claude: anthropic.Anthropic) -> None:
    error = _bad(
        lambda: claude.beta.messages.create(
            model=CLAUDE, max_tokens=64, messages=[_user("hi")], betas=[COMPACT], context_management=_compacting(49_999)
        )
    )
    assert error["message"] == (
        "context_management.edits.0.trigger.value: Input should be greater than or equal to 50000"
    )


def test_compaction_below_the_trigger_reports_one_message_iteration(claude: anthropic.Anthropic) -> None:
    answer = claude.beta.messages.create(
        model=CLAUDE,
        max_tokens=64,
        messages=[_user("hi")],
        betas=[COMPACT],
        context_management=_compacting(50_000),
    )
    assert [b.type for b in answer.content] == ["text"]
    (iteration,) = answer.usage.iterations or []
    assert iteration.type == "message" and iteration.input_tokens == answer.usage.input_tokens


def test_compaction_streams_the_block_then_the_answer(
    claude: anthropic.Anthropic, claude_up: AnthropicUpstream
) -> None:
    claude_up.push(Reply(text="continuing", compaction_summary="summary of the fox"))
    with claude.beta.messages.stream(
        model=CLAUDE,
        max_tokens=64,
        messages=[_user(HUGE)],
        betas=[COMPACT],
        context_management=_compacting(50_000),
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["compaction", "text"]
    block = final.content[0]
    assert block.type == "compaction" and block.content == "summary of the fox"
    compaction, message = final.usage.iterations or []
    assert (compaction.type, message.type) == ("compaction", "message")
    assert final.usage.input_tokens == message.input_tokens < compaction.input_tokens
    events = [e.decode().split("\n", 2) for e in claude_up.replies_sent[-1].sent_events]
    data = {name[len("event: ") :]: [] for name, _, _ in events}  # type: dict[str, list[Any]]
    for name, line, _ in events:
        data[name[len("event: ") :]].append(json.loads(line[len("data: ") :]))
    assert data["content_block_start"][0]["content_block"] == {
        "type": "compaction",
        "content": None,
        "encrypted_content": None,
    }
    (delta,) = [d["delta"] for d in data["content_block_delta"] if d["index"] == 0]
    assert delta == {"type": "compaction_delta", "content": block.content, "encrypted_content": block.encrypted_content}
    (ending,) = data["message_delta"]
    assert ending["usage"]["iterations"] == [i.model_dump(exclude_none=True) for i in final.usage.iterations or []]
    assert ending["context_management"] == {"applied_edits": []}


def test_a_compaction_block_sent_back_drops_what_came_before_it(
    claude: anthropic.Anthropic, claude_up: AnthropicUpstream
) -> None:
    claude_up.push(Reply(compaction_summary="fox summary"))
    paused = claude.beta.messages.create(
        model=CLAUDE,
        max_tokens=64,
        messages=[_user(HUGE)],
        betas=[COMPACT],
        context_management=_compacting(50_000, pause=True),
    )
    block = paused.content[0].model_dump(exclude_none=True)
    history = [_user(HUGE), {"role": "assistant", "content": [block]}, _user("go on")]
    answer = claude.beta.messages.create(model=CLAUDE, max_tokens=64, messages=history, betas=[COMPACT])
    seen = {"messages": [{"role": "assistant", "content": [block]}, _user("go on")]}
    assert answer.usage.input_tokens == estimate_tokens(seen)
    counted = claude.beta.messages.count_tokens(model=CLAUDE, messages=history, betas=[COMPACT])
    assert counted.input_tokens == estimate_tokens(seen)

    altered = [
        _user(HUGE),
        {"role": "assistant", "content": [{**block, "content": "a different summary"}]},
        _user("go on"),
    ]
    error = _bad(lambda: claude.beta.messages.create(model=CLAUDE, max_tokens=64, messages=altered, betas=[COMPACT]))
    assert error["message"] == "messages.1.content.0: Invalid `encrypted_content` in `compaction` block"
    # a failed compaction (content null) is a no-op: nothing is dropped
    failed = [
        _user("before"),
        {"role": "assistant", "content": [{"type": "compaction", "content": None}]},
        _user("go on"),
    ]
    kept = claude.beta.messages.create(model=CLAUDE, max_tokens=64, messages=failed, betas=[COMPACT])
    assert kept.usage.input_tokens == estimate_tokens({"messages": [_user("before"), _user("go on")]})


def test_compaction_blocks_verify_against_the_server_key() -> None:
    block = anthropic_context.compaction_block("summary")
    assert anthropic_context.request_problem({"messages": [{"role": "assistant", "content": [block]}]}, {}) is None
    forged = {**block, "encrypted_content": responses_context.compaction_item("summary", [], 0)["encrypted_content"]}
    assert anthropic_context.request_problem({"messages": [{"role": "assistant", "content": [forged]}]}, {}) is not None


def test_compacted_keeps_the_compaction_iteration_out_of_the_top_level() -> None:
    block = anthropic_context.compaction_block("summary")
    answer = {"input_tokens": 9, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 400}
    summarizing = {"input_tokens": 180_000, "output_tokens": 3_000}
    text = [{"type": "text", "text": "a"}]
    content, usage, stop = anthropic_context.compacted(text, answer, block, summarizing, 3_200, paused=False)
    assert stop is None and content == [block, *text]
    assert (usage["input_tokens"], usage["output_tokens"]) == (3_200, 400)
    assert [(i["type"], i["input_tokens"], i["output_tokens"]) for i in usage["iterations"]] == [
        ("compaction", 180_000, 3_000),
        ("message", 3_200, 400),
    ]
    content, usage, stop = anthropic_context.compacted(text, answer, block, summarizing, 3_200, paused=True)
    assert (content, stop) == ([block], "compaction")
    assert [i["type"] for i in usage["iterations"]] == ["compaction"] and usage["input_tokens"] == 0


def test_plan_never_mutates_the_request() -> None:
    block = anthropic_context.compaction_block("summary")
    messages = [*_tool_conversation(4), {"role": "assistant", "content": [{"type": "text", "text": "x"}, block]}]
    messages.append(_user("go on"))
    clear_all = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 0},
        "keep": {"type": "tool_uses", "value": 0},
    }
    body = {"messages": _tool_conversation(4), "context_management": {"edits": [clear_all]}}
    for request in (body, {**body, "messages": messages}):
        before = json.dumps(request, sort_keys=True)
        anthropic_context.plan(request, estimate_tokens)
        assert json.dumps(request, sort_keys=True) == before
    seen = anthropic_context.plan({**body, "messages": messages}, estimate_tokens)
    assert seen.body["messages"] == [{"role": "assistant", "content": [block]}, _user("go on")]
    assert anthropic_context.plan(body, estimate_tokens).applied_edits[0]["cleared_tool_uses"] == 4
