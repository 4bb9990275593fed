"""Property: recall never breaks tool pairing in the follow-up requests, on any wire.

Hypothesis draws a tool-using history in each wire's native form and up to three intermediate
answers that call recall -- alone, beside client tool calls, after text, after Anthropic thinking
(signed, and redacted) or Responses reasoning items. The follow-up request is built the way the
detour builds it (the wire's own conversion of the answer, `Wire.detour_turn`, one `Wire.tool_result`
per recall call, the wire's encoder) and must pass the scripted upstreams' validators, which check
pairing as the real APIs do (chat `tool_calls` + `tool` messages, Anthropic `tool_use` +
`tool_result` in the next user turn with thinking first and signatures intact, Responses
`function_call` + `function_call_output` by `call_id` and reasoning followed by its item). No
client call of an intermediate answer survives into the follow-up.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.policy_settings import Policy
from proxy.protocols.anthropic.wire import WIRE as ANTHROPIC
from proxy.protocols.openai_chat.wire import WIRE as CHAT
from proxy.protocols.responses.wire import WIRE as RESPONSES
from proxy.recall.answer import recall
from proxy.recall.tool import with_tool
from proxy.recall.toolbox import Toolbox
from tests.support.anthropic_upstream import AnthropicUpstream, sign
from tests.support.lanes import examples
from tests.support.responses_upstream import ResponsesServer
from tests.support.upstream_server import UpstreamServer

SETTINGS = Policy().recall
RECALL = SETTINGS.tool_name
WIRES = {"openai_chat": CHAT, "anthropic": ANTHROPIC, "openai_responses": RESPONSES}
CHAT_CHECK, CLAUDE_CHECK, RESP_CHECK = UpstreamServer(), AnthropicUpstream(), ResponsesServer()

call_names = st.lists(st.sampled_from(("bash", "read_file")), max_size=3)
answers = st.fixed_dictionaries(
    {
        "text": st.sampled_from((None, "Let me look that up.")),
        "thinking": st.booleans(),
        "redacted": st.booleans(),
        "calls": st.lists(st.sampled_from((RECALL, "bash", "read_file")), min_size=1, max_size=4).filter(
            lambda names: RECALL in names
        ),
    }
)
plans = st.fixed_dictionaries(
    {
        "turns": st.lists(call_names, min_size=0, max_size=5),
        "answers": st.lists(answers, min_size=1, max_size=3),
        "thinking": st.booleans(),
    }
)


class Ids:
    def __init__(self, prefix: str) -> None:
        self.prefix, self.n = prefix, 0

    def __call__(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n}"


# --------------------------------------------------------------------------- native histories


def chat_history(turns: list[list[str]], ids: Ids) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for k, names in enumerate(turns):
        out.append({"role": "user", "content": f"step {k}"})
        if not names:
            out.append({"role": "assistant", "content": f"done {k}"})
            continue
        calls = [{"id": ids(), "type": "function", "function": {"name": n, "arguments": "{}"}} for n in names]
        out.append({"role": "assistant", "content": None, "tool_calls": calls})
        out.extend({"role": "tool", "tool_call_id": c["id"], "content": f"out {c['id']}"} for c in calls)
        out.append({"role": "assistant", "content": f"done {k}"})
    out.append({"role": "user", "content": "which port?"})
    return out


def claude_history(turns: list[list[str]], ids: Ids, thinking: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k, names in enumerate(turns):
        out.append({"role": "user", "content": f"step {k}"})
        think = [{"type": "thinking", "thinking": f"t{k}", "signature": sign(f"t{k}")}] if thinking else []
        if not names:
            out.append({"role": "assistant", "content": [*think, {"type": "text", "text": f"done {k}"}]})
            continue
        uses = [{"type": "tool_use", "id": ids(), "name": n, "input": {}} for n in names]
        out.append({"role": "assistant", "content": [*think, *uses]})
        results = [{"type": "tool_result", "tool_use_id": u["id"], "content": f"out {u['id']}"} for u in uses]
        out.append({"role": "user", "content": results})
        out.append({"role": "assistant", "content": [*think, {"type": "text", "text": f"done {k}"}]})
    out.append({"role": "user", "content": "which port?"})
    return out


def responses_history(turns: list[list[str]], ids: Ids, reasoning: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k, names in enumerate(turns):
        out.append({"role": "user", "content": f"step {k}"})
        if reasoning:
            out.append({"type": "reasoning", "id": f"rs_{k}", "summary": [], "encrypted_content": f"enc_{k}"})
        if not names:
            out.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]})
            continue
        calls = [{"type": "function_call", "call_id": ids(), "name": n, "arguments": "{}"} for n in names]
        out.extend(calls)
        out.extend({"type": "function_call_output", "call_id": c["call_id"], "output": "out"} for c in calls)
    out.append({"role": "user", "content": "which port?"})
    return out


# --------------------------------------------------------------------------- native answers


def chat_answer(answer: dict[str, Any], ids: Ids) -> dict[str, Any]:
    calls = [
        {"id": ids(), "type": "function", "function": {"name": n, "arguments": '{"query":"port"}'}}
        for n in answer["calls"]
    ]
    message = {"role": "assistant", "content": answer["text"], "tool_calls": calls}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}


def claude_answer(answer: dict[str, Any], ids: Ids, thinking: bool) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if thinking or answer["thinking"]:
        blocks.append({"type": "thinking", "thinking": "search it", "signature": sign("search it")})
        if answer["redacted"]:
            blocks.append({"type": "redacted_thinking", "data": "redacted:abc"})
    if answer["text"]:
        blocks.append({"type": "text", "text": answer["text"]})
    blocks.extend({"type": "tool_use", "id": ids(), "name": n, "input": {"query": "port"}} for n in answer["calls"])
    return {"content": blocks, "stop_reason": "tool_use"}


def responses_answer(answer: dict[str, Any], ids: Ids, n: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    if answer["thinking"]:
        items.append({"id": f"rs_a{n}", "type": "reasoning", "summary": [], "encrypted_content": "enc_a"})
    if answer["text"]:
        content = [{"type": "output_text", "text": answer["text"], "annotations": []}]
        items.append(
            {"id": f"msg_{n}", "type": "message", "status": "completed", "role": "assistant", "content": content}
        )
    for name in answer["calls"]:
        items.append(
            {
                "id": f"fc_{ids()}",
                "type": "function_call",
                "status": "completed",
                "call_id": ids(),
                "name": name,
                "arguments": "{}",
            }
        )
    return {"status": "completed", "output": items}


# --------------------------------------------------------------------------- the property


def request(wire: str, plan: dict[str, Any]) -> dict[str, Any]:
    ids = Ids("id_")
    turns, thinking = plan["turns"], plan["thinking"]
    if wire == "openai_chat":
        body: dict[str, Any] = {
            "model": "m",
            "messages": chat_history(turns, ids),
            "tools": [{"type": "function", "function": {"name": "bash"}}],
        }
    elif wire == "anthropic":
        body = {
            "model": "m",
            "max_tokens": 100,
            "messages": claude_history(turns, ids, thinking),
            "tools": [{"name": "bash", "input_schema": {}}],
        }
        if thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    else:
        body = {
            "model": "m",
            "input": responses_history(turns, ids, thinking),
            "tools": [{"type": "function", "name": "bash"}],
        }
    return with_tool(body, WIRES[wire], SETTINGS)


def native_answer(wire: str, answer: dict[str, Any], ids: Ids, thinking: bool, n: int) -> dict[str, Any]:
    if wire == "openai_chat":
        return chat_answer(answer, ids)
    if wire == "anthropic":
        return claude_answer(answer, ids, thinking)
    return responses_answer(answer, ids, n)


def problem(wire: str, body: dict[str, Any]) -> Any:
    if wire == "openai_chat":
        return CHAT_CHECK._validate(body)
    if wire == "anthropic":
        return CLAUDE_CHECK.validate(body)
    checked = RESP_CHECK._validate(body)
    return checked if isinstance(checked, dict) else None


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wire=st.sampled_from(sorted(WIRES)), plan=plans)
def test_follow_ups_keep_tool_pairing(wire: str, plan: dict[str, Any]) -> None:
    codec = WIRES[wire]
    body = request(wire, plan)
    assert problem(wire, body) is None, "the drawn request itself must be valid"
    messages = codec.messages(body)
    ids = Ids("new_")
    for n, drawn in enumerate(plan["answers"]):
        message = codec.response(native_answer(wire, drawn, ids, plan["thinking"], n))[0]
        assert message is not None
        calls = Toolbox((recall(SETTINGS),), SETTINGS.max_rounds).calls(message)
        assert len(calls) == drawn["calls"].count(RECALL)
        turn = codec.detour_turn(message, frozenset({SETTINGS.tool_name}))
        messages = [*messages, turn, *(codec.tool_result(c, f"<conversation_history_search>{n}") for c in calls)]
        payload, _ = codec.encode(body, messages, False, None)
        assert payload is not None
        follow = json.loads(payload)
        assert problem(wire, follow) is None, json.dumps(follow)[-1500:]
        # the intermediate turns carry recall calls only: every client call beside them is gone
        assert client_calls(wire, follow) == client_calls(wire, body)
        assert recall_uses(wire, follow) == sum(a["calls"].count(RECALL) for a in plan["answers"][: n + 1])


def _native_calls(wire: str, body: dict[str, Any]) -> list[str]:
    if wire == "openai_chat":
        return [c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []]
    if wire == "anthropic":
        return [
            b["name"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_use"
        ]
    return [i["name"] for i in body["input"] if i.get("type") == "function_call"]


def client_calls(wire: str, body: dict[str, Any]) -> int:
    return sum(name != RECALL for name in _native_calls(wire, body))


def recall_uses(wire: str, body: dict[str, Any]) -> int:
    return sum(name == RECALL for name in _native_calls(wire, body))
