"""Recall over all three wires, streamed and not, with the real SDKs.

The scripted upstreams' model uses the tool like a real one would: asked for a value it does not
see in its request, it calls `ctxproxy_recall`, reads the result and answers with the value
(`answer_or_recall`). The early tool result holding the value is trimmed by the route's policy,
so the model only gets it through recall. Each test checks: the client sees one ordinary answer
(the final call's text and usage); the ledger has the recall call (`/admin/usage`, the calls
endpoint); the stored events have none of the detour; the tool definition is byte-identical on
every request of the conversation, from the first on; the follow-up pairs the call with its
result in the wire's own terms.
"""

from __future__ import annotations

import json
import re
import statistics
import time
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.anthropic_upstream import Reply as ClaudeReply
from tests.support.e2e import sent_verbatim_in_all
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, fcall
from tests.support.upstream_server import Reply, UpstreamServer, count_prompt_tokens, tool_call

pytestmark = pytest.mark.slow

FACT = "listen_port = 48443"
ANSWER = "The config sets port 48443."
RECALL = "ctxproxy_recall"
POLICY = {
    "context_window": 128000,
    "max_output_tokens": 4096,
    "trigger": 0.02,  # 2,480 tokens: the 12k-char result puts the request over it, so it is trimmed
    "target": 0.01,
    "late_trim": 0.02,  # trimmed from the trigger on, not only past the whole budget
    "tool_results": {"keep_recent_groups": 1, "old_max_chars": 200, "recent_max_chars": 1000, "clear_at_least": 1},
}
CHAT_TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]
CLAUDE_TOOLS = [{"name": "bash", "description": "run a command", "input_schema": {"type": "object"}}]
RESP_TOOLS = [{"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}}]
THINKING = {"type": "enabled", "budget_tokens": 1024}


def seen_port(body: dict[str, Any]) -> str | None:
    """The value, if the request shows it anywhere (the model 'sees' its whole request)."""
    found = re.search(r"listen_port = (\d+)", json.dumps(body))
    return found.group(1) if found else None


def offers_recall(body: dict[str, Any]) -> bool:
    return RECALL in json.dumps(body.get("tools") or [])


@pytest.fixture(scope="session")
def claude_server() -> Iterator[AnthropicUpstream]:
    server = AnthropicUpstream(api_key=UPSTREAM_KEY).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def resp_server() -> Iterator[ResponsesServer]:
    server = ResponsesServer().start()
    yield server
    server.stop()


@pytest.fixture
def servers(upstream, claude_server, resp_server):
    for server in (claude_server, resp_server):
        server.clear()
    yield {"openai_chat": upstream, "anthropic": claude_server, "openai_responses": resp_server}
    for server in (claude_server, resp_server):
        server.clear()


def config(chat: UpstreamServer, claude: AnthropicUpstream, resp: ResponsesServer, policy: dict[str, Any]) -> dict:
    timeouts = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}

    def route(name: str, model: str, base_url: str, path: str | None = None) -> dict[str, Any]:
        match = {"model": model, **({"path": path} if path else {})}
        upstream = {"base_url": base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts}
        return {"name": name, "match": match, "upstream": upstream, "policy": "default"}

    return {
        "routes": [
            route("claude", "claude-*", claude.url, "/v1/messages"),
            route("responses", "resp-*", resp.base_url),
            route("main", "gpt-*", chat.base_url),
        ],
        "policies": {"default": policy},
    }


# --------------------------------------------------------------------------- one agent per wire


class ChatAgent:
    wire = "openai_chat"
    model = "gpt-4o"

    def __init__(self, p, api_key: str, server: UpstreamServer, thinking: bool = False) -> None:
        self.client, self.server = p.client(api_key), server
        self.history: list[dict[str, Any]] = []
        self.conv: str | None = None
        self.scripted: deque[Any] = deque()
        self.otherwise: Any = None

    def script(self, call_bash: bool, text: str | None = None) -> None:
        if call_bash:
            self.answer_next(Reply(tool_calls=[tool_call("bash", {"cmd": "cat app.conf"})]))
        else:
            self.answer_next(Reply(content=text))

    def answer_next(self, reply: Any) -> None:
        """Queue the model's next answer. Unlike `server.push`, a summary call of a compaction
        running in the background meanwhile does not take it."""
        self.scripted.append(reply)
        if self.server.responder != self._scripted_answer:
            self.otherwise, self.server.responder = self.server.responder, self._scripted_answer

    def _scripted_answer(self, body: dict[str, Any]) -> Any:
        if self.scripted and not _is_summary_call(body):
            return self.scripted.popleft()
        return self.otherwise(body) if self.otherwise is not None else None

    def model_answers(self, preamble: str | None = None) -> None:
        def model(body: dict[str, Any]) -> Reply:
            port = seen_port(body)
            if port is None and offers_recall(body):
                return Reply(content=preamble, tool_calls=[tool_call(RECALL, {"query": "listen_port"})])
            return Reply(content=f"The config sets port {port}." if port else "I do not know.")

        self.server.responder = model

    def ask(self, text: str, stream: bool, **kw: Any) -> tuple[str, list[str], Any]:
        self.history.append({"role": "user", "content": text})
        return self.send(stream, **kw)

    def send(self, stream: bool, **kw: Any) -> tuple[str, list[str], Any]:
        args = {"model": self.model, "messages": self.history, "tools": CHAT_TOOLS, **kw}
        if stream:
            s = self.client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
            chunks = list(s)
            self.conv = s.response.headers["x-conversation-id"]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            names = [t.function.name for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or [] if t.id]
            ids = [t.id for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or [] if t.id]
            usage = chunks[-1].usage
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            calls = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
            if ids:
                arguments = "".join(
                    t.function.arguments or "" for c in calls for t in c.choices[0].delta.tool_calls or []
                )
                message["tool_calls"] = [
                    {"id": ids[0], "type": "function", "function": {"name": names[0], "arguments": arguments}}
                ]
        else:
            raw = self.client.chat.completions.with_raw_response.create(**args)
            self.conv = raw.headers["x-conversation-id"]
            answer = raw.parse()
            message = answer.choices[0].message.model_dump(exclude_none=True)
            text = message.get("content") or ""
            names = [c["function"]["name"] for c in message.get("tool_calls") or []]
            usage = answer.usage
        self.history.append(message)
        return text, names, usage.prompt_tokens

    def tool_result(self, content: str) -> None:
        call = self.history[-1]["tool_calls"][0]
        self.history.append({"role": "tool", "tool_call_id": call["id"], "content": content})

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.server.chat_requests]

    def raws(self) -> list[bytes]:
        return [r.raw for r in self.server.chat_requests]


class ClaudeAgent(ChatAgent):
    wire = "anthropic"
    model = "claude-test-1"

    def __init__(self, p, api_key: str, server: AnthropicUpstream, thinking: bool = False) -> None:
        self.client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=30)
        self.server, self.thinking = server, thinking
        self.history = []
        self.conv = None
        self.scripted, self.otherwise = deque(), None

    def _think(self) -> str | None:
        return "The user wants a value; let me think." if self.thinking else None

    def script(self, call_bash: bool, text: str | None = None) -> None:
        if call_bash:
            self.answer_next(ClaudeReply(thinking=self._think(), tool_uses=[{"name": "bash", "input": {"cmd": "cat"}}]))
        else:
            self.answer_next(ClaudeReply(thinking=self._think(), text=text))

    def model_answers(self, preamble: str | None = None) -> None:
        def model(body: dict[str, Any]) -> ClaudeReply:
            port = seen_port(body)
            if port is None and offers_recall(body):
                use = {"name": RECALL, "input": {"query": "listen_port"}}
                thought = "It is not in view; search the history."
                return ClaudeReply(thinking=thought, redacted=True, text=preamble, tool_uses=[use])
            return ClaudeReply(thinking=self._think(), text=f"The config sets port {port}." if port else "Unknown.")

        self.server.responder = model

    def send(self, stream: bool, **kw: Any) -> tuple[str, list[str], Any]:
        args = {"model": self.model, "max_tokens": 2048, "messages": self.history, "tools": CLAUDE_TOOLS, **kw}
        if self.thinking:
            args["thinking"] = THINKING
        if stream:
            with self.client.messages.stream(**args) as s:
                reply = s.get_final_message()
                self.conv = s.response.headers["x-conversation-id"]
        else:
            raw = self.client.messages.with_raw_response.create(**args)
            self.conv = raw.headers["x-conversation-id"]
            reply = raw.parse()
        self.history.append({"role": "assistant", "content": reply.content})
        text = "".join(b.text for b in reply.content if b.type == "text")
        names = [b.name for b in reply.content if b.type == "tool_use"]
        return text, names, reply.usage.input_tokens

    def tool_result(self, content: str) -> None:
        use = next(b for b in self.history[-1]["content"] if b.type == "tool_use")
        self.history.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": content}]}
        )

    def bodies(self) -> list[dict[str, Any]]:
        # the agent's requests: the low trigger (POLICY) may also bring a summarizer call here
        return [r.body for r in self.server.message_requests if not _is_summary_request(r.body)]

    def raws(self) -> list[bytes]:
        return [r.raw for r in self.server.message_requests if not _is_summary_request(r.body)]


class ResponsesAgent(ChatAgent):
    wire = "openai_responses"
    model = "resp-4o"

    def __init__(self, p, api_key: str, server: ResponsesServer, thinking: bool = False) -> None:
        self.client, self.server = p.client(api_key), server
        self.history = []
        self.conv = None
        self.scripted, self.otherwise = deque(), None

    def script(self, call_bash: bool, text: str | None = None) -> None:
        if call_bash:
            self.answer_next(ResponsesReply(calls=[fcall("bash", {"cmd": "cat"})]))
        else:
            self.answer_next(ResponsesReply(text=text))

    def model_answers(self, preamble: str | None = None) -> None:
        def model(body: dict[str, Any]) -> ResponsesReply:
            port = seen_port(body)
            if port is None and offers_recall(body):
                return ResponsesReply(reasoning=True, text=preamble, calls=[fcall(RECALL, {"query": "listen_port"})])
            return ResponsesReply(text=f"The config sets port {port}." if port else "Unknown.")

        self.server.responder = model

    def send(self, stream: bool, **kw: Any) -> tuple[str, list[str], Any]:
        args = {"model": self.model, "input": self.history, "tools": RESP_TOOLS, **kw}
        if stream:
            s = self.client.responses.create(**args, stream=True)
            events = list(s)
            self.conv = s.response.headers["x-conversation-id"]
            response = next(e.response for e in events if e.type == "response.completed")
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        else:
            raw = self.client.responses.with_raw_response.create(**args)
            self.conv = raw.headers["x-conversation-id"]
            response = raw.parse()
            text = response.output_text
        self.history += list(response.output)
        names = [o.name for o in response.output if o.type == "function_call"]
        return text, names, response.usage.input_tokens

    def tool_result(self, content: str) -> None:
        call = next(o for o in reversed(self.history) if getattr(o, "type", None) == "function_call")
        self.history.append({"type": "function_call_output", "call_id": call.call_id, "output": content})

    def bodies(self) -> list[dict[str, Any]]:
        return [b for b in self.server.bodies]

    def raws(self) -> list[bytes]:
        return [r.raw for r in self.server.requests]


def _is_summary_request(body: dict[str, Any]) -> bool:
    return str(body.get("system", "")).startswith("You compress the history")


def _is_summary_call(body: dict[str, Any]) -> bool:
    """A compaction's summary call, on any of the three wires."""
    first = body.get("system") or body.get("instructions") or (body.get("messages") or body.get("input") or [])[:1]
    return "You compress the history" in json.dumps(first)


AGENTS = {"openai_chat": ChatAgent, "anthropic": ClaudeAgent, "openai_responses": ResponsesAgent}


def conversation(p, api_key: str, servers: dict[str, Any], wire: str, stream: bool, thinking: bool = False):
    """An agent that read a config file (its value now trimmed from view) and went on twice."""
    agent = AGENTS[wire](p, api_key, servers[wire], thinking)
    agent.script(call_bash=True)
    _, names, _ = agent.ask(f"{uuid.uuid4().hex} Read the config, please.", stream)
    assert names == ["bash"]
    agent.tool_result("a" * 6000 + f" {FACT} " + "b" * 6000)
    agent.script(call_bash=False, text="noted 0")
    agent.send(stream)
    for i in range(1, 3):
        agent.script(call_bash=False, text=f"noted {i}")
        agent.ask(f"carry on {i}", stream)
    return agent


def recall_tool(wire: str, body: dict[str, Any]) -> dict[str, Any]:
    tool = body["tools"][-1]
    assert (tool["function"]["name"] if wire == "openai_chat" else tool["name"]) == RECALL, body["tools"]
    return tool


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("wire", list(AGENTS))
def test_recall_detour_is_invisible_on_every_wire(proxy, servers, api_key, wire, stream):
    p = proxy(**config(servers["openai_chat"], servers["anthropic"], servers["openai_responses"], POLICY))
    agent = conversation(p, api_key, servers, wire, stream)
    before = len(agent.bodies())
    agent.model_answers()
    text, names, client_usage = agent.ask("Which port does the config set?", stream)
    assert (text, names) == (ANSWER, [])
    first, second = agent.bodies()[before:]
    assert seen_port(first) is None, "the model saw the value: nothing was trimmed"
    # the client-visible usage is the final call's
    assert client_usage == usage_input(wire, servers[wire].replies_sent[-1])

    # the follow-up pairs the call with its result in the wire's own terms
    if wire == "openai_chat":
        call, result = second["messages"][-2:]
        assert second["messages"][:-2] == first["messages"]
        assert call["tool_calls"][0]["function"]["name"] == RECALL
        assert result["tool_call_id"] == call["tool_calls"][0]["id"]
        content = result["content"]
    elif wire == "anthropic":
        call, result = second["messages"][-2:]
        assert second["messages"][:-2] == first["messages"]
        use = next(b for b in call["content"] if b["type"] == "tool_use")
        assert use["name"] == RECALL
        assert result["role"] == "user" and result["content"][0]["tool_use_id"] == use["id"]
        content = result["content"][0]["content"]
    else:
        added = second["input"][len(first["input"]) :]
        assert second["input"][: len(first["input"])] == first["input"]
        assert [i["type"] for i in added] == ["reasoning", "function_call", "function_call_output"]
        assert added[0]["encrypted_content"].startswith("enc_")
        assert added[1]["name"] == RECALL and added[2]["call_id"] == added[1]["call_id"]
        content = added[2]["output"]
    assert content.startswith("<conversation_history_search>") and FACT in content
    tool_seq = next(e["seq"] for e in p.events(agent.conv) if e["role"] == "tool")
    assert f"[event {tool_seq} | tool bash" in content

    # the tool definition: byte-identical on every request of the conversation, from the first on
    bodies, raws = agent.bodies(), agent.raws()
    definition = recall_tool(wire, bodies[0])
    assert all(recall_tool(wire, b) == definition for b in bodies)
    assert sent_verbatim_in_all(definition, raws)

    # the detour is not history; the ledger has it
    events = p.events(agent.conv)
    assert not any(RECALL in json.dumps(e["message"]) for e in events)
    assert [e["role"] for e in events[-2:]] == ["user", "assistant"]
    assert ANSWER in json.dumps(events[-1]["message"])
    calls = p.wait_calls(agent.conv, 6, until=lambda cs: all(c["status"] != "pending" for c in cs))
    purposes = [c["purpose"] for c in calls]
    assert purposes.count("recall") == 1 and purposes.count("main") == 5, purposes
    recall_call = next(c for c in calls if c["purpose"] == "recall")
    assert recall_call["status"] == "complete" and RECALL in json.dumps(recall_call["response"])
    assert p.admin_json("usage", params={"conversation": agent.conv})["totals"]["calls_by_purpose"]["recall"] == 1


def usage_input(wire: str, reply: Any) -> int:
    if wire == "openai_chat":
        return int(reply.sent_usage["prompt_tokens"])
    return int(reply.usage["input_tokens"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_thinking_keeps_its_signed_blocks_before_the_tool_use(proxy, servers, api_key, stream):
    p = proxy(**config(servers["openai_chat"], servers["anthropic"], servers["openai_responses"], POLICY))
    agent = conversation(p, api_key, servers, "anthropic", stream, thinking=True)
    before = len(agent.bodies())
    agent.model_answers()
    text, names, _ = agent.ask("Which port does the config set?", stream)
    assert (text, names) == (ANSWER, [])
    assert not servers["anthropic"].rejections  # every signature verified, thinking first
    second = agent.bodies()[before + 1]
    turn = second["messages"][-2]["content"]
    assert [b["type"] for b in turn] == ["thinking", "redacted_thinking", "tool_use"]
    assert turn[0]["thinking"] == "It is not in view; search the history." and turn[0]["signature"]


@pytest.mark.parametrize("wire", list(AGENTS))
def test_client_tool_calls_beside_a_recall_call_are_dropped(proxy, servers, api_key, wire):
    """The model calls a client tool and recall together: that answer is consumed whole, the
    follow-up carries only the recall call, and the model issues its client call again."""
    p = proxy(**config(servers["openai_chat"], servers["anthropic"], servers["openai_responses"], POLICY))
    agent = conversation(p, api_key, servers, wire, stream=True)
    before = len(agent.bodies())
    server = servers[wire]
    if wire == "openai_chat":
        both = [tool_call("bash", {"cmd": "ls"}), tool_call(RECALL, {"query": "listen_port"})]
        server.push(Reply(tool_calls=both), Reply(tool_calls=[tool_call("bash", {"cmd": "ls"})]))
    elif wire == "anthropic":
        both = [{"name": "bash", "input": {"cmd": "ls"}}, {"name": RECALL, "input": {"query": "listen_port"}}]
        server.push(ClaudeReply(tool_uses=both), ClaudeReply(tool_uses=[{"name": "bash", "input": {"cmd": "ls"}}]))
    else:
        both = [fcall("bash", {"cmd": "ls"}), fcall(RECALL, {"query": "listen_port"})]
        server.push(ResponsesReply(calls=both), ResponsesReply(calls=[fcall("bash", {"cmd": "ls"})]))
    _, names, _ = agent.ask("List the files, and which port was it?", True)
    assert names == ["bash"]
    second = agent.bodies()[before + 1]
    assert json.dumps(second).count('"bash"') == json.dumps(agent.bodies()[before]).count('"bash"')
    assert RECALL in json.dumps(second.get("messages") or second.get("input"))


def test_retry_without_the_tool_when_the_upstream_rejects_it(proxy, upstream, api_key):
    """A 400 to the request carrying the tool: sent once more without it; the route and model are
    remembered (no tool on the next request), and the rejected call is a recall record saying why."""
    model = f"gpt-notools-{uuid.uuid4().hex[:8]}"
    p = proxy(policies={"default": POLICY})
    client = p.client(api_key)
    upstream.push(Reply(status=400, error_body={"error": {"message": "tools[1]: unsupported", "type": "x"}}))
    upstream.push(Reply(content="fine without it"))
    messages = [{"role": "user", "content": f"hi {uuid.uuid4().hex}"}]
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, tools=CHAT_TOOLS)
    assert raw.parse().choices[0].message.content == "fine without it"
    conv = raw.headers["x-conversation-id"]
    first, second = upstream.chat_requests
    assert [t["function"]["name"] for t in first.body["tools"]] == ["bash", RECALL]
    assert [t["function"]["name"] for t in second.body["tools"]] == ["bash"]
    assert first.body["messages"] == second.body["messages"]
    calls = p.wait_calls(conv, 2)
    rejected = next(c for c in calls if c["purpose"] == "recall")
    assert rejected["status"] == "error" and rejected["upstream_status"] == 400
    assert "rejected the request carrying the recall tool" in rejected["error"] and "unsupported" in rejected["error"]
    main = next(c for c in calls if c["purpose"] == "main")
    assert main["status"] == "complete" and main["projection"]["recall_tool"] == "rejected"
    metrics = httpx.get(f"{p.url}/metrics").text
    assert re.search(r'ctxproxy_recall_total\{route="main",outcome="tool_rejected"\} [1-9]', metrics), metrics

    messages += [{"role": "assistant", "content": "fine without it"}, {"role": "user", "content": "again"}]
    client.chat.completions.create(model=model, messages=messages, tools=CHAT_TOOLS)
    assert [t["function"]["name"] for t in upstream.last_chat.body["tools"]] == ["bash"]
    assert len(upstream.chat_requests) == 3


def test_a_400_not_caused_by_the_tool_is_relayed_and_not_remembered(proxy, upstream, api_key):
    model = f"gpt-bad-{uuid.uuid4().hex[:8]}"
    p = proxy(policies={"default": POLICY})
    client = p.client(api_key, max_retries=0)
    bad = {"error": {"message": "temperature out of range", "type": "invalid_request_error"}}
    upstream.push(Reply(status=400, error_body=bad), Reply(status=400, error_body=bad))
    messages = [{"role": "user", "content": f"hi {uuid.uuid4().hex}"}]
    r = p.post_chat(api_key, {"model": model, "messages": messages, "tools": CHAT_TOOLS})
    assert r.status_code == 400 and "temperature out of range" in r.text
    assert len(upstream.chat_requests) == 2
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "new"}], tools=CHAT_TOOLS)
    assert [t["function"]["name"] for t in upstream.last_chat.body["tools"]] == ["bash", RECALL]


@pytest.mark.parametrize("wire", list(AGENTS))
def test_detour_latency_and_rounds(proxy, servers, api_key, wire, record_property):
    """Measured for the report (asserts only the shape): alternating plain and recall questions in
    one conversation; each recall question costs one round, i.e. one more upstream round trip."""
    p = proxy(**config(servers["openai_chat"], servers["anthropic"], servers["openai_responses"], POLICY))
    agent = conversation(p, api_key, servers, wire, stream=False)
    plain: list[float] = []
    recalled: list[float] = []
    for i in range(5):
        agent.server.responder = None
        agent.script(call_bash=False, text=f"plain {i}")
        t0 = time.perf_counter()
        agent.ask(f"a plain question {i}", False)
        plain.append(time.perf_counter() - t0)
        agent.model_answers()
        t0 = time.perf_counter()
        text, _, _ = agent.ask(f"Which port does the config set? ({i})", False)
        recalled.append(time.perf_counter() - t0)
        assert text == ANSWER
    calls = p.wait_calls(agent.conv, 4 + 15)
    assert sum(c["purpose"] == "recall" for c in calls) == 5
    added = statistics.median(recalled) - statistics.median(plain)
    # the proxy's own share: from the consumed answer's end to the follow-up's start (search, encode)
    gaps = [
        (after["started_at"] - before["started_at"]) * 1000 - before["latency_ms"]
        for before, after in zip(calls, calls[1:], strict=False)
        if before["purpose"] == "recall"
    ]
    record_property("recall_added_ms", round(added * 1000, 1))
    print(
        f"\n{wire}: median plain {statistics.median(plain) * 1000:.1f} ms, with one recall round "
        f"{statistics.median(recalled) * 1000:.1f} ms, added {added * 1000:.1f} ms; "
        f"proxy time between the rounds {statistics.median(gaps):.1f} ms"
    )


@pytest.mark.parametrize("wire", list(AGENTS))
def test_recall_after_streamed_text_continues_the_clients_stream(proxy, servers, api_key, wire):
    """The model says something, then calls recall: the text already reached the client, so the
    final answer continues the same stream -- one message, the final call's usage, and the
    client re-sending that message continues the same conversation."""
    p = proxy(**config(servers["openai_chat"], servers["anthropic"], servers["openai_responses"], POLICY))
    agent = conversation(p, api_key, servers, wire, stream=True)
    before = len(agent.bodies())
    preamble = "Let me search the history. "
    agent.model_answers(preamble=preamble)
    text, names, client_usage = agent.ask("Which port does the config set?", True)
    assert (text, names) == (preamble + ANSWER, [])
    assert client_usage == usage_input(wire, servers[wire].replies_sent[-1])
    first, second = agent.bodies()[before:]
    assert preamble in json.dumps(second.get("messages") or second.get("input"))  # the model said it
    events = p.events(agent.conv)
    assert not any(RECALL in json.dumps(e["message"]) for e in events)
    assert preamble.strip() in json.dumps(events[-1]["message"]) and ANSWER in json.dumps(events[-1]["message"])
    calls = p.wait_calls(agent.conv, 6, until=lambda cs: all(c["status"] != "pending" for c in cs))
    assert [c["purpose"] for c in calls].count("recall") == 1
    main = calls[-1] if calls[-1]["purpose"] == "main" else calls[-2]
    assert main["status"] == "complete" and main["projection"]["recall_rounds"] == 1

    agent.script(call_bash=False, text="anything else?")
    agent.ask("thanks", True)
    assert len(p.conversation(agent.conv)["branches"]) == 1  # the spliced message is the stored one


def test_responses_with_previous_response_id_get_no_tool(proxy, servers, api_key):
    """The upstream holds that conversation's state: the proxy neither rewrites nor offers recall."""
    resp = servers["openai_responses"]
    p = proxy(**config(servers["openai_chat"], servers["anthropic"], resp, POLICY))
    client = p.client(api_key)
    first = client.responses.create(model="resp-4o", input=f"hi {uuid.uuid4().hex}", tools=RESP_TOOLS)
    assert [t["name"] for t in resp.bodies[-1]["tools"]] == ["bash", RECALL]
    client.responses.create(model="resp-4o", previous_response_id=first.id, input="more", tools=RESP_TOOLS)
    assert [t["name"] for t in resp.bodies[-1]["tools"]] == ["bash"]


def test_follow_ups_stay_within_the_window(proxy, upstream, api_key, monkeypatch):
    """A tight window: the recall results get only the room the projection left, so no follow-up
    goes over the window the upstream enforces (here two whole events that do not fit together)."""
    model, window = "gpt-recall-tight", 2400
    monkeypatch.setitem(upstream.context_windows, model, window)
    tight = {**POLICY, "context_window": window, "max_output_tokens": 200, "recall": {"max_result_tokens": 5000}}
    p = proxy(policies={"default": tight})
    agent = ChatAgent(p, api_key, upstream)
    agent.model = model
    for k in range(2):
        agent.script(call_bash=True)
        agent.ask(f"{uuid.uuid4().hex} Read config part {k}, please.", False)
        agent.tool_result(f"{FACT} " + " ".join(f"line {i} of part {k}" for i in range(140)))
        agent.script(call_bash=False, text="noted")
        agent.send(False)
    agent.script(call_bash=False, text="ok")
    agent.ask("carry on", False)
    seqs = [e["seq"] for e in p.events(agent.conv) if e["role"] == "tool"]
    before = len(upstream.chat_requests)

    def model_(body: dict[str, Any]) -> Reply | None:
        if "You compress the history" in json.dumps(body["messages"][:1]):
            return None  # a summary call of a compaction, if one runs meanwhile
        if body["messages"][-1]["role"] == "tool":
            return Reply(content="The config sets port 48443." if seen_port(body) else "Unknown.")
        calls = [tool_call(RECALL, {"query": "part", "event": seq}) for seq in seqs]
        return Reply(tool_calls=calls)

    upstream.responder = model_
    text, _, _ = agent.ask("Which port does the config set?", False)
    assert text == ANSWER
    follow = next(r for r in upstream.chat_requests[before:] if r.body["messages"][-1]["role"] == "tool")
    results = [m["content"] for m in follow.body["messages"][-2:]]
    assert all(m["role"] == "tool" for m in follow.body["messages"][-2:])
    assert all(FACT in r for r in results)
    assert any("chars left out" in r for r in results), "the two events were not cut to the room left"
    assert all(count_prompt_tokens(r.body) <= window - 200 for r in upstream.chat_requests[before:])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_retry_without_the_tool(proxy, servers, api_key, stream):
    """The retry on the Messages wire, streamed too: the 400 comes before any byte."""
    claude = servers["anthropic"]
    p = proxy(**config(servers["openai_chat"], claude, servers["openai_responses"], POLICY))
    model = f"claude-notools-{uuid.uuid4().hex[:8]}"
    rejected = {"type": "error", "error": {"type": "invalid_request_error", "message": "tools.1: not allowed"}}
    claude.push(ClaudeReply(status=400, error=rejected), ClaudeReply(text="fine without it"))
    agent = ClaudeAgent(p, api_key, claude)
    agent.model = model
    text, _, _ = agent.ask(f"hi {uuid.uuid4().hex}", stream)
    assert text == "fine without it"
    first, second = agent.bodies()
    assert [t["name"] for t in first["tools"]] == ["bash", RECALL]
    assert [t["name"] for t in second["tools"]] == ["bash"]
    calls = p.wait_calls(agent.conv, 2)
    assert "not allowed" in next(c for c in calls if c["purpose"] == "recall")["error"]
    agent.script(call_bash=False, text="again")
    agent.ask("more", stream)
    assert [t["name"] for t in agent.bodies()[-1]["tools"]] == ["bash"]
