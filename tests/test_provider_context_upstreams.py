"""The scripted upstreams speak the providers' own context management, checked through the real
`openai` SDK: OpenAI's ``/v1/responses/compact``, compaction items, ``context_management``
thresholds, ``compaction_trigger`` and ``/v1/responses/input_tokens``
(tests/support/responses_context.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support import responses_context
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, count_input_tokens

MODEL = "gpt-5"
LONG = "the quick brown fox jumps over the lazy dog " * 40


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
