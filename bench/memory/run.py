"""The memory bench's sessions, through a real proxy, with memory on and off.

Per wire and project, one session of four conversations (the client holds each history and
re-sends it, as agents do; the project comes by `X-Ctxproxy-Project`):

1. states the project's facts (`Remember: subject: value`, one per turn);
2. corrects one (`Correction: ...`) and forgets another (`Forget: subject`);
3. distractors: the same subjects with other values, saved in another project of the tenant
   and by another tenant in this very project;
4. asks for every fact (`Question: subject?`): the expected answer is the latest value, or
   `unknown` for the forgotten one.

The same sessions run on a route whose policy has memory off (the bill without it). Answers
and the upstream requests of conversation 4 are scored: right, stale (a value the correction
replaced), leaked (a distractor's value: another project or tenant), forgotten (the forgotten
value came back); the injected block's tokens are counted in every request that carries one.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.memory.model import responder
from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.proxy_process import ADMIN_TOKEN, UPSTREAM_KEY, ProxyProcess, subprocess_env
from tests.support.responses_upstream import ResponsesServer
from tests.support.upstream_server import UpstreamServer, count_text_tokens

WIRES = {"chat": "openai_chat", "anthropic": "anthropic", "responses": "openai_responses"}
SUBJECTS = ("deploy target", "db port", "editor", "region", "ci runner", "log level")
KEYS = {"team-a": "sk-bench-memory-a-0001", "team-b": "sk-bench-memory-b-0002"}
BASH = {"type": "object", "properties": {"command": {"type": "string"}}}


@dataclass
class Score:
    asked: int = 0
    right: int = 0
    stale: int = 0
    leaked: int = 0
    forgotten: int = 0
    block_tokens: list[int] = field(default_factory=list)
    requests: int = 0
    calls: int = 0
    input_tokens: int = 0


def value(project: int, subject: int, kind: str) -> str:
    return f"{kind}{project}x{subject}"


def _model(wire: str, memory: bool) -> str:
    return f"{wire}-{'mem' if memory else 'plain'}"


def proxy_config(urls: dict[str, str]) -> dict[str, Any]:
    timeouts = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}
    routes = []
    for wire in WIRES:
        for memory in (True, False):
            match: dict[str, Any] = {"model": _model(wire, memory)}
            if wire == "anthropic":
                match["path"] = "/v1/messages"
            upstream = {"base_url": urls[wire], "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts}
            routes.append({"name": _model(wire, memory), "match": match, "upstream": upstream, "policy": str(memory)})
    base = {"context_window": 128000, "max_output_tokens": 2048}
    return {
        "admin_token_env": "CTXPROXY_ADMIN_TOKEN",
        "clients": [
            {"name": f"client-{t}", "key_sha256": hashlib.sha256(k.encode()).hexdigest(), "tenant": t}
            for t, k in KEYS.items()
        ],
        "routes": routes,
        "policies": {
            "default": base,
            "True": {**base, "memory": {"enabled": True, "scopes": ["project"], "inject_tokens": 800}},
            "False": base,
        },
    }


class Client:
    """One conversation: its history, re-sent whole on every turn (raw HTTP, the wire's JSON)."""

    def __init__(self, http: httpx.Client, base: str, wire: str, memory: bool, tenant: str, project: str) -> None:
        self.http, self.base, self.wire, self.model = http, base, wire, _model(wire, memory)
        self.headers = {"X-Ctxproxy-Project": project}
        if wire == "anthropic":
            self.headers.update({"x-api-key": KEYS[tenant], "anthropic-version": "2023-06-01"})
        else:
            self.headers["Authorization"] = f"Bearer {KEYS[tenant]}"
        self.system = f"You are a coding agent working on {project}."
        self.history: list[Any] = []

    def ask(self, text: str) -> str:
        self.history.append({"role": "user", "content": f"{text}\n[{id(self)}:{len(self.history)}]"})
        if self.wire == "chat":
            tools = [{"type": "function", "function": {"name": "bash", "parameters": BASH}}]
            body = {"model": self.model, "messages": [{"role": "system", "content": self.system}, *self.history]}
            answer = self._post("/v1/chat/completions", {**body, "tools": tools})
            message = answer["choices"][0]["message"]
            self.history.append({"role": "assistant", "content": message.get("content")})
            return str(message.get("content") or "")
        if self.wire == "anthropic":
            tools = [{"name": "bash", "input_schema": BASH}]
            body = {"model": self.model, "max_tokens": 512, "system": self.system, "messages": self.history}
            answer = self._post("/v1/messages", {**body, "tools": tools})
            self.history.append({"role": "assistant", "content": answer["content"]})
            return "".join(b.get("text", "") for b in answer["content"] if b.get("type") == "text")
        tools = [{"type": "function", "name": "bash", "parameters": BASH}]
        body = {"model": self.model, "instructions": self.system, "input": self.history, "tools": tools}
        answer = self._post("/v1/responses", body)
        self.history += answer["output"]
        return "".join(
            part.get("text", "")
            for item in answer["output"]
            if item.get("type") == "message"
            for part in item.get("content", [])
        )

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(self.base + path, json=body, headers=self.headers, timeout=120)
        r.raise_for_status()
        return dict(r.json())


def session(http: httpx.Client, base: str, wire: str, memory: bool, project: int, server: Any) -> Score:
    path = f"/srv/bench-{wire}-{project}"
    facts = {s: value(project, i, "v") for i, s in enumerate(SUBJECTS)}
    corrected, forgotten = SUBJECTS[0], SUBJECTS[2]
    old = facts[corrected]
    one = Client(http, base, wire, memory, "team-a", path)
    for subject, fact in facts.items():
        one.ask(f"Remember: {subject}: {fact}")
    two = Client(http, base, wire, memory, "team-a", path)
    facts[corrected] = value(project, 0, "c")
    two.ask(f"Correction: {corrected}: {facts[corrected]}")
    two.ask(f"Forget: {forgotten}")
    distractors = set()
    for tenant, where, kind in (("team-a", f"{path}-other", "o"), ("team-b", path, "t")):
        other = Client(http, base, wire, memory, tenant, where)
        for i, subject in enumerate(SUBJECTS):
            distractors.add(value(project, i, kind))
            other.ask(f"Remember: {subject}: {value(project, i, kind)}")
    mark = len(server.requests)
    three = Client(http, base, wire, memory, "team-a", path)
    score = Score()
    for subject in SUBJECTS:
        answer = three.ask(f"Question: {subject}?").partition(": ")[2].strip()
        expected = "unknown" if subject == forgotten else facts[subject]
        score.asked += 1
        score.right += answer == expected
        score.stale += answer == old
        score.leaked += answer in distractors
        score.forgotten += subject == forgotten and answer == value(project, 2, "v")
    seen = [json.dumps(r.body) for r in server.requests[mark:]]
    score.leaked += sum(1 for text in seen for d in distractors if d in text)
    score.forgotten += sum(1 for text in seen if value(project, 2, "v") in text)
    return score


def blocks(server: Any) -> list[int]:
    """Tokens of the injected block in every request that carries one."""
    return [count_text_tokens(text) for r in server.requests for text in _strings(r.body) if "<memories" in text]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def run(projects: int, wires: list[str]) -> dict[str, Any]:
    servers = {
        "chat": UpstreamServer().start(),
        "anthropic": AnthropicUpstream(api_key=UPSTREAM_KEY).start(),
        "responses": ResponsesServer().start(),
    }
    for wire, server in servers.items():
        server.responder = responder(WIRES[wire])
        server.record_replies = False
    urls = {
        "chat": servers["chat"].base_url,
        "anthropic": servers["anthropic"].url,
        "responses": servers["responses"].base_url,
    }
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            proxy = ProxyProcess(proxy_config(urls), Path(tmp), subprocess_env()).start()
            try:
                with httpx.Client() as http:
                    for wire in wires:
                        for memory in (True, False):
                            server = servers[wire]
                            server.clear()
                            server.responder = responder(WIRES[wire])
                            total = Score()
                            for project in range(projects):
                                _add(total, session(http, proxy.url, wire, memory, project, server))
                            total.block_tokens = blocks(server)
                            total.requests = len(server.requests)
                            usage = http.get(
                                f"{proxy.url}/admin/usage",
                                params={"route": _model(wire, memory)},
                                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                            ).json()
                            total.input_tokens = int(usage["totals"].get("input_total") or 0)
                            total.calls = int(usage["totals"].get("calls") or 0)
                            results[f"{wire}/{'memory' if memory else 'none'}"] = total.__dict__
            finally:
                proxy.stop()
    finally:
        for server in servers.values():
            server.stop()
    return results


def _add(total: Score, one: Score) -> None:
    for name in ("asked", "right", "stale", "leaked", "forgotten"):
        setattr(total, name, getattr(total, name) + getattr(one, name))
