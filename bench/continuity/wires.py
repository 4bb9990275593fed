"""The three wires, both sides: what the client sends and keeps, what the model reads and answers.

Each wire has a client half (the request body from the client's full history, and how an answer
extends that history) and a model half (a request body as a `model.View`, an `model.Action` as
the scripted server's reply object). The servers are the scripted upstreams of the test suite
(`tests/support`), which validate requests and enforce their model's window like the real APIs.
"""

from __future__ import annotations

import json
from typing import Any

from bench.continuity import script
from bench.continuity.model import Action, View
from tests.support import anthropic_upstream, responses_upstream, upstream_server

SYSTEM = "You are a careful coding agent. Use the bash tool to run checks."
MAX_TOKENS = 1024
SUMMARY_MARK = "You compress the history"

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": script.TOOL,
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": script.TOOL,
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    }
]
RESPONSES_TOOLS = [{"type": "function", **CHAT_TOOLS[0]["function"]}]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _tool_names(tools: Any) -> list[str]:
    out = []
    for tool in tools or []:
        if isinstance(tool, dict):
            out.append(str(tool.get("name") or (tool.get("function") or {}).get("name") or ""))
    return out


def _view(body: dict[str, Any], texts: list[str], last_user: str, since: int, last_tool: str | None) -> View:
    """The model reads decoded text: a summarizer request's events are in `body_text` as sent."""
    decoded = "\n".join(texts)
    return View(texts, last_user, since, last_tool, _tool_names(body.get("tools")), SUMMARY_MARK in decoded, decoded)


class Chat:
    name = "chat"
    path = "/chat/completions"
    count = staticmethod(upstream_server.count_prompt_tokens)

    def first(self, text: str) -> list[dict[str, Any]]:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]

    def body(self, model: str, history: list[dict[str, Any]]) -> dict[str, Any]:
        return {"model": model, "messages": history, "tools": CHAT_TOOLS, "max_tokens": MAX_TOKENS}

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def extend(self, history: list[dict[str, Any]], answer: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
        message = answer["choices"][0]["message"]
        history.append({k: v for k, v in message.items() if v is not None and k in ("role", "content", "tool_calls")})
        calls = [(c["id"], json.loads(c["function"]["arguments"])["command"]) for c in message.get("tool_calls") or []]
        return message.get("content") or "", calls

    def results(self, history: list[dict[str, Any]], outputs: list[tuple[str, str]]) -> None:
        history += [{"role": "tool", "tool_call_id": cid, "content": out} for cid, out in outputs]

    def view(self, body: dict[str, Any]) -> View:
        messages = body.get("messages") or []
        texts = [_text(m.get("content")) for m in messages]
        last_user, since, last_tool = "", 0, None
        for m in messages:
            if m.get("role") == "user":
                last_user, since = _text(m.get("content")), 0
            elif m.get("role") == "tool":
                since += 1
        if messages and messages[-1].get("role") == "tool":
            last_tool = _text(messages[-1].get("content"))
        return _view(body, texts, last_user, since, last_tool)

    def reply(self, action: Action) -> upstream_server.Reply:
        calls = [upstream_server.tool_call(n, a) for n, a in action.calls]
        return upstream_server.Reply(content=action.text, tool_calls=calls or None, chunks=2)


class Anthropic:
    name = "anthropic"
    path = "/messages"
    count = staticmethod(anthropic_upstream.estimate_tokens)

    def first(self, text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": text}]

    def body(self, model: str, history: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "model": model,
            "system": SYSTEM,
            "messages": history,
            "tools": ANTHROPIC_TOOLS,
            "max_tokens": MAX_TOKENS,
        }

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def extend(self, history: list[dict[str, Any]], answer: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
        blocks = answer["content"]
        history.append({"role": "assistant", "content": blocks})
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        calls = [(b["id"], b["input"]["command"]) for b in blocks if b["type"] == "tool_use"]
        return text, calls

    def results(self, history: list[dict[str, Any]], outputs: list[tuple[str, str]]) -> None:
        blocks = [{"type": "tool_result", "tool_use_id": cid, "content": out} for cid, out in outputs]
        history.append({"role": "user", "content": blocks})

    def view(self, body: dict[str, Any]) -> View:
        texts = [_text(body.get("system"))]
        last_user, since, last_tool = "", 0, None
        for m in body.get("messages") or []:
            content = m.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            last_tool = None
            for b in blocks:
                if b.get("type") == "text":
                    texts.append(b["text"])
                    if m.get("role") == "user":
                        last_user, since = b["text"], 0
                elif b.get("type") == "tool_result":
                    last_tool = _text(b.get("content"))
                    texts.append(last_tool)
                    since += 1
        return _view(body, texts, last_user, since, last_tool)

    def reply(self, action: Action) -> anthropic_upstream.Reply:
        uses = [{"name": n, "input": a} for n, a in action.calls]
        return anthropic_upstream.Reply(text=action.text, tool_uses=uses or None, chunks=2)


class Responses:
    name = "responses"
    path = "/responses"

    @staticmethod
    def count(body: dict[str, Any]) -> int:
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        return responses_upstream.count_input_tokens(body.get("instructions"), items, body.get("tools"))

    def first(self, text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": text}]

    def body(self, model: str, history: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "model": model,
            "instructions": SYSTEM,
            "input": history,
            "tools": RESPONSES_TOOLS,
            "max_output_tokens": MAX_TOKENS,
            "store": False,
        }

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def extend(self, history: list[dict[str, Any]], answer: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
        text, calls = "", []
        for item in answer["output"]:
            history.append({k: v for k, v in item.items() if k != "status" or item["type"] != "function_call"})
            if item["type"] == "message":
                text += _text(item.get("content"))
            elif item["type"] == "function_call":
                calls.append((item["call_id"], json.loads(item["arguments"])["command"]))
        return text, calls

    def results(self, history: list[dict[str, Any]], outputs: list[tuple[str, str]]) -> None:
        history += [{"type": "function_call_output", "call_id": cid, "output": out} for cid, out in outputs]

    def view(self, body: dict[str, Any]) -> View:
        texts = [_text(body.get("instructions"))]
        last_user, since, last_tool = "", 0, None
        items = body.get("input") or []
        for item in [{"role": "user", "content": items}] if isinstance(items, str) else items:
            last_tool = None
            if item.get("type") == "function_call_output":
                last_tool = _text(item.get("output"))
                texts.append(last_tool)
                since += 1
            elif item.get("type", "message") == "message":
                text = _text(item.get("content"))
                texts.append(text)
                if item.get("role") == "user":
                    last_user, since = text, 0
        return _view(body, texts, last_user, since, last_tool)

    def reply(self, action: Action) -> responses_upstream.ResponsesReply:
        calls = [responses_upstream.fcall(n, a) for n, a in action.calls]
        return responses_upstream.ResponsesReply(text=action.text, calls=calls or None, chunks=2)


WIRES = {w.name: w for w in (Chat(), Anthropic(), Responses())}
