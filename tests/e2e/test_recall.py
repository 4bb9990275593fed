"""Recall: the proxy offers the model a search tool over the stored history and answers it itself.

A scripted model, asked for a fact it no longer sees (trimmed out of an old tool result), calls
`ctxproxy_recall`, reads the result and answers. The client sees one ordinary answer; the ledger
has the recall call; the stored events have none of the detour; the tool definition is
byte-identical on every request.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from tests.support.e2e import sent_verbatim_in_all, user
from tests.support.upstream_server import Reply, tool_call

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a command",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]
POLICY = {
    "context_window": 128000,
    "max_output_tokens": 4096,
    "trigger": 0.02,  # 2,480 tokens: the 12k-char result puts the request over it, so it is trimmed
    "target": 0.01,
    "late_trim": 0.02,  # trimmed from the trigger on, not only past the whole budget
    "tool_results": {"keep_recent_groups": 1, "old_max_chars": 200, "recent_max_chars": 1000, "clear_at_least": 1},
    "recall": {"enabled": "auto"},
}
FACT = "listen_port = 48443"


def _history(p, upstream, api_key, marker):
    client = p.client(api_key)
    call = tool_call("bash", {"cmd": "cat /etc/app.conf"})
    upstream.push(Reply(tool_calls=[call]))
    history = [user(f"{marker} Read the config, please.")]
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, tools=TOOLS)
    conv = raw.headers["x-conversation-id"]
    history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
    history.append({"role": "tool", "tool_call_id": call["id"], "content": "a" * 6000 + f" {FACT} " + "b" * 6000})
    for i in range(3):
        upstream.push(Reply(content=f"noted {i}"))
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, tools=TOOLS)
        history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        history.append(user(f"carry on {i}"))
    return client, conv, history


@pytest.mark.parametrize("stream", [False, True])
def test_recall_detour_is_invisible_to_the_client(proxy, upstream, api_key, stream):
    p = proxy(policies={"default": POLICY})
    client, conv, history = _history(p, upstream, api_key, f"recall-{stream}-{uuid.uuid4().hex}")
    before = len(upstream.chat_requests)
    history.append(user("Which port does the config set?"))
    upstream.push(
        Reply(tool_calls=[tool_call("ctxproxy_recall", {"query": "listen_port"}, id="call_recall_1")], chunks=3)
    )
    upstream.push(Reply(content="The config sets port 48443.", chunks=3))
    if stream:
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, tools=TOOLS, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "The config sets port 48443."
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        assert all(c.usage is None for c in chunks)  # the client did not ask for usage
    else:
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, tools=TOOLS)
        answer = raw.parse()
        assert answer.choices[0].message.content == "The config sets port 48443."
        assert not answer.choices[0].message.tool_calls
        assert raw.headers["x-conversation-id"] == conv

    first, second = upstream.chat_requests[before:]
    # the model could not see the fact: the old tool result was trimmed in the projection
    assert "48443" not in first.raw.decode()
    follow = second.body["messages"]
    assert follow[:-2] == first.body["messages"]
    assert follow[-2]["tool_calls"][0]["function"]["name"] == "ctxproxy_recall"
    result = follow[-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_recall_1"
    assert result["content"].startswith("<conversation_history_search>") and FACT in result["content"]
    tool_seq = next(e["seq"] for e in p.events(conv) if e["role"] == "tool")
    assert f"[event {tool_seq} | tool bash" in result["content"]

    # the tool definition: byte-identical on every request of the conversation, from the first on
    requests = upstream.chat_requests[before - 4 :]
    defs = [r.body["tools"][-1] for r in requests]
    assert all(d["function"]["name"] == "ctxproxy_recall" for d in defs)
    assert sent_verbatim_in_all(defs[0], [r.raw for r in requests])
    assert [t["function"]["name"] for t in first.body["tools"]] == ["bash", "ctxproxy_recall"]

    # the detour is not history: the stored events are the client's messages and the final answer
    events = p.events(conv)
    assert [e["message"].get("content") for e in events[-2:]] == [
        "Which port does the config set?",
        "The config sets port 48443.",
    ]
    assert not any("ctxproxy_recall" in json.dumps(e["message"]) for e in events)
    calls = p.wait_calls(conv, 6)
    purposes = [c["purpose"] for c in calls]
    assert purposes.count("recall") == 1 and purposes.count("main") == 5, purposes
    usage = p.admin_json("usage", params={"conversation": conv})
    assert usage["totals"]["calls_by_purpose"]["recall"] == 1


def test_recall_off_and_tool_choice_none_leave_requests_alone(proxy, upstream, api_key):
    p = proxy(policies={"default": {**POLICY, "recall": {"enabled": False}}})
    client = p.client(api_key)
    client.chat.completions.create(model="gpt-4o", messages=[user(f"off {uuid.uuid4().hex}")], tools=TOOLS)
    assert [t["function"]["name"] for t in upstream.last_chat.body["tools"]] == ["bash"]

    p = proxy(policies={"default": POLICY})
    client = p.client(api_key)
    client.chat.completions.create(
        model="gpt-4o", messages=[user(f"none {uuid.uuid4().hex}")], tools=TOOLS, tool_choice="none"
    )
    assert [t["function"]["name"] for t in upstream.last_chat.body["tools"]] == ["bash"]
    client.chat.completions.create(model="gpt-4o", messages=[user(f"no tools {uuid.uuid4().hex}")])
    assert "tools" not in upstream.last_chat.body


def test_recall_rounds_are_bounded_and_the_last_has_no_tool(proxy, upstream, api_key):
    p = proxy(policies={"default": {**POLICY, "recall": {"enabled": "auto", "max_rounds": 2}}})
    client, conv, history = _history(p, upstream, api_key, f"rounds-{uuid.uuid4().hex}")
    before = len(upstream.chat_requests)
    history.append(user("Which port?"))
    for i in range(2):
        upstream.push(Reply(tool_calls=[tool_call("ctxproxy_recall", {"query": f"nothing-{i}"})]))
    upstream.push(Reply(content="I could not find it."))
    answer = client.chat.completions.create(model="gpt-4o", messages=history, tools=TOOLS)
    assert answer.choices[0].message.content == "I could not find it."
    sent = upstream.chat_requests[before:]
    assert len(sent) == 3
    assert [t["function"]["name"] for t in sent[-1].body["tools"]] == ["bash"]
    assert "No stored event matches" in sent[1].body["messages"][-1]["content"]
    purposes = [c["purpose"] for c in p.wait_calls(conv, 7)]
    assert purposes.count("recall") == 2


def test_a_long_event_reads_on_by_offset_to_the_fact_in_its_middle(proxy, upstream, api_key):
    # the 12,013-char result is longer than an answer's 8,000 chars: read whole it comes back
    # head + tail, the fact in its middle left out; the marker's offset reads on to the fact
    p = proxy(policies={"default": POLICY})
    client, conv, history = _history(p, upstream, api_key, f"offset-{uuid.uuid4().hex}")
    seq = next(e["seq"] for e in p.events(conv) if e["role"] == "tool")
    before = len(upstream.chat_requests)
    history.append(user("Which port does the config set?"))

    def model(body):
        last = body["messages"][-1]
        if last["role"] != "tool":
            return Reply(tool_calls=[tool_call("ctxproxy_recall", {"query": "", "event": seq}, id="call_read_0")])
        if FACT in last["content"]:
            return Reply(content="The config sets port 48443.")
        offset = int(re.search(r'"offset": (\d+) reads on from there', last["content"]).group(1))
        arguments = {"query": "", "event": seq, "offset": offset}
        return Reply(tool_calls=[tool_call("ctxproxy_recall", arguments, id="call_read_1")])

    upstream.responder = model
    answer = client.chat.completions.create(model="gpt-4o", messages=history, tools=TOOLS)
    assert answer.choices[0].message.content == "The config sets port 48443."
    last = upstream.chat_requests[before:][-1].body["messages"]
    first, second = (m["content"] for m in last if m.get("tool_call_id") in ("call_read_0", "call_read_1"))
    assert FACT not in first and "chars left out" in first and first.count("a") > 1000 and first.count("b") > 1000
    assert FACT in second and re.search(rf"Stored event {seq}, from char 4,000 of 12,0\d\d \(data", second)
    assert [c["purpose"] for c in p.wait_calls(conv, 7)].count("recall") == 2
