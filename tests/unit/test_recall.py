"""proxy.recall's pure parts: when the tool is offered, its stable definition per wire, the results."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from proxy.policy_settings import Policy
from proxy.protocols import DEFAULT
from proxy.protocols import WIRES as REGISTERED
from proxy.recall.answer import answer, recall
from proxy.recall.memory import RejectedTool
from proxy.recall.read import relay_now
from proxy.recall.tool import definition, offered, with_tool
from proxy.recall.toolbox import Toolbox

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
AUTO = Policy()
W = {wire.name: wire for wire in REGISTERED}
WIRES = (W["openai_chat"], W["anthropic"], W["openai_responses"])
tool_name = DEFAULT.tool_name


@dataclass(frozen=True)
class Ev:
    seq: int
    role: str
    message: dict[str, Any]
    branch_id: str = "br"
    created_at: float = 0.0


RECALL = "ctxproxy_recall"


def test_offered_follows_the_policy():
    none = RejectedTool()
    body = {"model": "m", "messages": [], "tools": TOOLS}
    assert AUTO.recall.enabled == "auto"  # the default
    for wire in WIRES:
        assert offered(AUTO, wire, body, none, "r", "m")
        assert not offered(Policy(recall={"enabled": False}), wire, body, none, "r", "m")
        assert not offered(AUTO, wire, {"model": "m", "messages": []}, none, "r", "m")  # auto: no client tools
        assert offered(Policy(recall={"enabled": True}), wire, {"model": "m", "messages": []}, none, "r", "m")
    assert not offered(AUTO, W["openai_chat"], {**body, "tool_choice": "none"}, none, "r", "m")
    assert not offered(AUTO, W["openai_responses"], {**body, "tool_choice": "none"}, none, "r", "m")
    assert not offered(AUTO, W["anthropic"], {**body, "tool_choice": {"type": "none"}}, none, "r", "m")
    assert offered(AUTO, W["anthropic"], {**body, "tool_choice": {"type": "auto"}}, none, "r", "m")
    assert offered(AUTO, W["anthropic"], {**body, "tool_choice": {"type": "any"}}, none, "r", "m")
    assert offered(AUTO, W["openai_chat"], {**body, "tool_choice": "required"}, none, "r", "m")
    forced = {"type": "function", "function": {"name": "bash"}}
    assert not offered(AUTO, W["openai_chat"], {**body, "tool_choice": forced}, none, "r", "m")  # forced elsewhere
    assert not offered(AUTO, W["anthropic"], {**body, "tool_choice": {"type": "tool", "name": "bash"}}, none, "r", "m")
    prefill = {**body, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "{"}]}
    assert not offered(AUTO, W["anthropic"], prefill, none, "r", "m")  # a prefill continues the last turn
    rejected = RejectedTool()
    rejected.remember("r", "m", "tools: unknown type", 60)
    assert not offered(AUTO, W["openai_chat"], body, rejected, "r", "m")
    assert offered(AUTO, W["openai_chat"], body, rejected, "r", "other-model")
    mine = {**body, "tools": [*TOOLS, definition(W["openai_chat"], AUTO.recall)]}
    assert not offered(AUTO, W["openai_chat"], mine, none, "r", "m")  # the client declares one itself


def test_definition_is_a_function_of_the_policy_and_wire_alone():
    for wire in WIRES:
        a = json.dumps(with_tool({"tools": TOOLS, "messages": [1]}, wire, AUTO.recall)["tools"][-1])
        b = json.dumps(with_tool({"tools": [], "messages": [2, 3]}, wire, AUTO.recall)["tools"][-1])
        assert a == b == json.dumps(definition(wire, AUTO.recall))
        assert tool_name(definition(wire, AUTO.recall)) == "ctxproxy_recall"
    assert definition(W["openai_chat"], AUTO.recall)["function"]["parameters"]["required"] == ["query"]
    assert set(definition(W["anthropic"], AUTO.recall)) == {"name", "description", "input_schema"}
    responses = definition(W["openai_responses"], AUTO.recall)
    assert responses["type"] == "function" and responses["strict"] is False and "parameters" in responses
    body = {"tools": TOOLS, "tool_choice": "auto"}
    assert with_tool(body, W["openai_chat"], AUTO.recall) is not body and body["tools"] == TOOLS
    name = frozenset({AUTO.recall.tool_name})
    assert W["openai_chat"].without_tools(with_tool(body, W["openai_chat"], AUTO.recall), name) == body
    assert W["anthropic"].without_tools(with_tool({"tool_choice": "auto"}, W["anthropic"], AUTO.recall), name) == {}


def test_recall_calls_and_answers():
    call = {"id": "c", "type": "function", "function": {"name": "ctxproxy_recall", "arguments": '{"query": "port"}'}}
    other = {"id": "d", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    tools = Toolbox((recall(AUTO.recall),), AUTO.recall.max_rounds)
    assert tools.calls({"role": "assistant", "tool_calls": [other, call]}) == [call]
    assert tools.calls(None) == []
    events = [Ev(1, "user", {"role": "user", "content": "the port is 8443"})]
    assert "[event 1 | user" in answer(events, call, AUTO.recall, len)
    fetch = {**call, "function": {"name": "ctxproxy_recall", "arguments": '{"query": "", "event": 1}'}}
    assert "the port is 8443" in answer(events, fetch, AUTO.recall, len)
    missing = {**call, "function": {"name": "ctxproxy_recall", "arguments": '{"query": "x", "event": 9}'}}
    assert "No stored event 9" in answer(events, missing, AUTO.recall, len)
    bad = {**call, "function": {"name": "ctxproxy_recall", "arguments": "not json"}}
    assert answer(events, bad, AUTO.recall, len).startswith("Error:")
    # nested past the interpreter's recursion limit: the model is told, nothing raises
    deep = {**call, "function": {"name": "ctxproxy_recall", "arguments": "[" * 5_000 + "]" * 5_000}}
    assert answer(events, deep, AUTO.recall, len).startswith("Error:")


def test_relay_now():
    assert not relay_now(None)
    assert not relay_now({"role": "assistant", "content": None})
    assert relay_now({"role": "assistant", "content": "Hi"})
    named = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "ctxproxy_recall"}}]}
    assert not relay_now(named)
    other = {"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "function": {"name": "bash"}}]}
    assert not relay_now(other)  # a tool call: read to the end, a recall call may follow


def test_intermediate_turn_keeps_only_recall_calls_per_wire():
    recalled = {"id": "r", "type": "function", "function": {"name": RECALL, "arguments": '{"query":"x"}'}}
    bash = {"id": "b", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    chat = W["openai_chat"].detour_turn(
        {"role": "assistant", "content": "t", "tool_calls": [bash, recalled]}, frozenset({RECALL})
    )
    assert chat == {"role": "assistant", "content": "t", "tool_calls": [recalled]}


def test_the_tool_counts_in_the_budget_on_every_wire():
    from proxy.catalog import ModelCatalog
    from proxy.projector import Projector

    projector = Projector(ModelCatalog())
    policy = Policy(context_window=20000, max_output_tokens=1000)
    counter = projector.counter("gpt-4o")
    client_tools = {
        W["openai_chat"]: TOOLS,
        W["anthropic"]: [{"name": "bash", "input_schema": {"type": "object"}}],
        W["openai_responses"]: [{"type": "function", "name": "bash", "parameters": {"type": "object"}}],
    }
    for wire, tools in client_tools.items():
        body = {"model": "m", "tools": tools}
        plain, _ = projector.budget(policy, "m", body, counter)
        offered_body = with_tool(body, wire, AUTO.recall)
        with_recall, _ = projector.budget(policy, "m", offered_body, counter)
        added = with_recall.fixed_tokens - plain.fixed_tokens
        assert added == counter.count_tools(offered_body["tools"]) - counter.count_tools(tools)
        assert added >= len(json.dumps(definition(wire, AUTO.recall))) // 8, (wire, added)


def test_answers_fit_the_room_left():
    call = {"id": "c", "type": "function", "function": {"name": "ctxproxy_recall", "arguments": '{"query": "port"}'}}
    events = [Ev(i, "user", {"role": "user", "content": f"port {i} " + "x" * 400}) for i in range(1, 40)]
    assert answer(events, call, AUTO.recall, len, 10).startswith("Error: the context window has no room")
    short = answer(events, call, AUTO.recall, lambda text: len(text) // 4, 300)
    assert len(short) // 4 <= 300 + 40 and "[event 39 | user" in short  # the newest hits are kept
    full = answer(events, call, AUTO.recall, lambda text: len(text) // 4)
    assert len(full) > len(short)


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def test_splice_continues_the_clients_stream():
    from proxy.sse import parse_event

    relayed = [
        _sse("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ]
    go = W["anthropic"].continuation(relayed)
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 9, "cache_read_input_tokens": 2}}}
    assert go(parse_event(_sse("message_start", start))) is None
    assert go(parse_event(_sse("ping", {"type": "ping"}))) is None
    block = go(parse_event(_sse("content_block_start", {"type": "content_block_start", "index": 0})))
    assert block is not None and json.loads(parse_event(block).data or "")["index"] == 1
    delta = go(parse_event(_sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": 3}})))
    usage = json.loads(parse_event(delta or b"").data or "")["usage"]
    assert usage == {"input_tokens": 9, "cache_read_input_tokens": 2, "output_tokens": 3}  # the final call's

    item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]}
    relayed = [
        _sse("response.created", {"type": "response.created", "sequence_number": 0}),
        _sse(
            "response.output_item.done",
            {"type": "response.output_item.done", "sequence_number": 7, "output_index": 0, "item": item},
        ),
    ]
    go = W["openai_responses"].continuation(relayed)
    assert go(parse_event(_sse("response.created", {"type": "response.created", "sequence_number": 0}))) is None
    added = go(
        parse_event(
            _sse(
                "response.output_item.added",
                {"type": "response.output_item.added", "sequence_number": 2, "output_index": 0},
            )
        )
    )
    assert json.loads(parse_event(added or b"").data or "") == {
        "type": "response.output_item.added",
        "sequence_number": 8,
        "output_index": 1,
    }
    final = {"type": "response.completed", "sequence_number": 3, "response": {"output": [{"type": "message"}]}}
    done = json.loads(parse_event(go(parse_event(_sse("response.completed", final))) or b"").data or "")
    assert done["sequence_number"] == 9 and done["response"]["output"] == [item, {"type": "message"}]
    chat = parse_event(b'data: {"choices": []}\n\n')
    assert W["openai_chat"].continuation([])(chat) == chat.raw


def test_rejected_pairs_are_bounded_oldest_forgotten_first():
    rejected = RejectedTool(limit=3)
    for model in ("a", "b", "c"):
        rejected.remember("r", model, "rejected", 60)
    rejected.remember("r", "a", "rejected", 60)  # remembered again: now the newest
    rejected.remember("r", "d", "rejected", 60)
    assert len(rejected) == 3
    assert ("r", "b") not in rejected
    assert all(("r", m) in rejected for m in ("a", "c", "d"))


def test_a_rejection_mark_expires_and_says_why():
    now = [100.0]
    rejected = RejectedTool(clock=lambda: now[0])
    rejected.remember("r", "m", "a tool or schema rejection: tools.0: unknown type", 60)
    assert ("r", "m") in rejected and rejected.pairs() == [("r", "m")]
    (mark,) = rejected.describe()
    assert mark["reason"].startswith("a tool or schema rejection") and mark["expires_in"] == 60
    now[0] += 59.9
    assert ("r", "m") in rejected
    now[0] += 0.2  # expired: offered again
    assert ("r", "m") not in rejected and rejected.pairs() == [] and len(rejected) == 0
    rejected.remember("r", "m", "again", 60)
    assert rejected.forget() == 1 and ("r", "m") not in rejected


def test_a_long_event_reads_on_page_by_page_until_every_byte_is_back():
    # 35,000 chars, every position distinct: far over the 2,000 tokens an answer holds
    text = "".join(f"<{i:05d}>" for i in range(5_000))
    events = [Ev(7, "tool", {"role": "tool", "tool_call_id": "t", "content": text})]
    call = {"id": "c", "type": "function", "function": {"name": RECALL}}
    read, offset, answers = "", 0, 0
    while True:
        arguments = {"query": "", "event": 7, **({"offset": offset} if offset else {})}
        out = answer(
            events, {**call, "function": {**call["function"], "arguments": json.dumps(arguments)}}, AUTO.recall, len
        )
        answers += 1
        assert len(out) <= AUTO.recall.max_result_tokens  # `len` counts a char a token
        body = out.split("\n", 3)[3].rsplit("\n", 1)[0]  # the event's text: after the headers, before the block's end
        marker = re.search(
            r'\n\[\.\.\. [\d,]+ of 35,000 chars left out \(chars [\d,]+ to [\d,]+\); "offset": (\d+) reads on', body
        )
        if marker is None:
            read += body
            break
        if offset:  # reading on: the next page, nothing after the marker
            assert body.endswith(" reads on from there ...]")
        else:  # the first answer: head + tail, as before
            assert text.endswith(body[body.index("\n", marker.end()) + 1 :])
        head = body[: marker.start()]
        assert text[offset:].startswith(head) and int(marker.group(1)) == offset + len(head)
        read += head
        offset = int(marker.group(1))
        assert answers < 40  # each page reads on by what an answer holds
    assert read == text and answers > 2
    assert f"from char {offset:,} of 35,000" in out
    bad = {**call, "function": {**call["function"], "arguments": '{"query": "", "event": 7, "offset": -1}'}}
    assert answer(events, bad, AUTO.recall, len).startswith("Error: `offset`")
    assert "offset" in definition(W["openai_chat"], AUTO.recall)["function"]["parameters"]["properties"]
