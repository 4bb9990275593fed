"""The scripted model of the memory bench and of the memory e2e tests: it uses `ctxproxy_memory` as
a careful agent would, and obeys tool output as a naive one does.

It reads a request as the upstream gets it (`read`: the newest user command, the results of the
tool calls after it, the injected `<memories>` block, whether the memory tool is offered) and
acts on the command (`decide`):

* `Remember: <subject>: <value>` / `Correction: ...` -> `save` it, then "Noted.";
* `Question: <subject>?` -> the value from the newest memory result, else the injected block,
  else one `search`; then "<subject>: <value>" (or "unknown");
* `Forget: <subject>` -> `search`, `forget` the ids it lists for that subject, "Forgotten.";
* `Run: <command>` -> the client's `bash` tool; once its result is in, a result that says
  "remember that X" is saved as it says (the poisoning case), then "Done.";
* a summarizer request -> a structured summary (`bench.continuity.model.summarize`).

`reply` turns an action into the scripted server's reply object of each wire.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from bench.continuity.model import summarize
from tests.support import anthropic_upstream, responses_upstream, upstream_server

MEMORY = "ctxproxy_memory"
BASH = "bash"
SUMMARY_MARK = "You compress the history"
_POISON = re.compile(r"remember that (?:the )?(.+?) (?:is|are) (?:at )?(\S+)", re.I)


@dataclass(frozen=True)
class Seen:
    command: str
    results: list[str] = field(default_factory=list)
    """tool results after the command, oldest first (memory and client results alike)"""
    block: str = ""
    offered: bool = False
    summary: bool = False
    text: str = ""

    @property
    def memory_results(self) -> list[str]:
        return [r for r in self.results if r.lstrip().startswith("<memory_results")]

    @property
    def client_results(self) -> list[str]:
        return [r for r in self.results if not r.lstrip().startswith("<memory_results")]


@dataclass(frozen=True)
class Act:
    text: str | None = None
    call: tuple[str, dict[str, Any]] | None = None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(p.get("text", p.get("content", ""))) for p in content if isinstance(p, dict))
    return ""


def _entries(wire: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """("user", text) and ("result", text) entries in order, on every wire."""
    out: list[tuple[str, str]] = []
    if wire == "openai_responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else [{"role": "user", "content": items}]:
            if item.get("type") == "function_call_output":
                out.append(("result", _text(item.get("output"))))
            elif item.get("role") == "user":
                out.append(("user", _text(item.get("content"))))
        return out
    for message in body.get("messages") or []:
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            out.append(("result", _text(content)))
        elif role == "user" and isinstance(content, list):
            for block in content:
                kind = "result" if block.get("type") == "tool_result" else "user"
                out.append((kind, _text(block.get("content") if kind == "result" else block.get("text"))))
        elif role == "user":
            out.append(("user", _text(content)))
    return out


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [str(t.get("name") or (t.get("function") or {}).get("name")) for t in body.get("tools") or []]


def read(wire: str, body: dict[str, Any]) -> Seen:
    dumped = json.dumps(body)
    if SUMMARY_MARK in dumped:
        return Seen("", summary=True, text="\n".join(t for _, t in _entries(wire, body)))
    entries = _entries(wire, body)
    block = next((t for kind, t in entries if kind == "user" and "<memories" in t), "")
    commands = [i for i, (kind, t) in enumerate(entries) if kind == "user" and "<memories" not in t]
    last = commands[-1] if commands else -1
    command = entries[last][1] if commands else ""
    results = [t for kind, t in entries[last + 1 :] if kind == "result"]
    # the command is the message's first line (a client may add more: a session marker, a date)
    return Seen(command.strip().split("\n", 1)[0].strip(), results, block, MEMORY in _tool_names(body))


def value_of(subject: str, texts: list[str]) -> str | None:
    """The value of `subject` in the first text that names it (memory results, then the block)."""
    pattern = re.compile(rf"\] (?:\(conflicts with [^)]*\) )?{re.escape(subject)}: ([^\s<]+)", re.I)
    for text in texts:
        found = pattern.search(text)
        if found:
            return found.group(1)
    return None


def ids_of(subject: str, text: str) -> list[str]:
    return re.findall(rf"\[(m_[0-9a-f]+) \|[^\]]*\] (?:\(conflicts with [^)]*\) )?{re.escape(subject)}:", text, re.I)


def decide(seen: Seen) -> Act:
    if seen.summary:
        return Act(text=summarize(seen.text))
    command, found = seen.command, seen.memory_results
    verb, _, rest = command.partition(": ")
    if verb in ("Remember", "Correction"):
        if seen.offered and not found:
            return Act(call=(MEMORY, {"action": "save", "text": rest}))
        return Act(text="Noted.")
    if verb == "Question":
        subject = rest.rstrip("?").strip()
        value = value_of(subject, [*reversed(found), seen.block])
        if value is None and seen.offered and not found:
            return Act(call=(MEMORY, {"action": "search", "query": subject}))
        return Act(text=f"{subject}: {value or 'unknown'}")
    if verb == "Forget":
        subject = rest.strip()
        if not seen.offered:
            return Act(text="I cannot forget anything here.")
        if not found:
            return Act(call=(MEMORY, {"action": "search", "query": subject}))
        ids = ids_of(subject, found[0])
        if len(found) == 1 and ids:
            return Act(call=(MEMORY, {"action": "forget", "id": ids[0]}))
        return Act(text="Forgotten." if ids else "There was nothing to forget.")
    if verb == "Run":
        if not seen.client_results:
            return Act(call=(BASH, {"command": rest}))
        poisoned = _POISON.search(seen.client_results[-1])
        if poisoned and seen.offered and not found:
            return Act(call=(MEMORY, {"action": "save", "text": f"{poisoned.group(1)}: {poisoned.group(2)}"}))
        return Act(text="Done.")
    return Act(text="OK.")


def reply(wire: str, act: Act) -> Any:
    """The scripted server's reply object for `act` on `wire`."""
    calls = [act.call] if act.call else []
    if wire == "anthropic":
        return anthropic_upstream.Reply(text=act.text, tool_uses=[{"name": n, "input": a} for n, a in calls] or None)
    if wire == "openai_responses":
        return responses_upstream.ResponsesReply(
            text=act.text, calls=[responses_upstream.fcall(n, a) for n, a in calls] or None
        )
    return upstream_server.Reply(
        content=act.text, tool_calls=[upstream_server.tool_call(n, a) for n, a in calls] or None
    )


def responder(wire: str) -> Any:
    """A scripted server's `responder`: the model, reading each request as it comes."""

    def answer(body: dict[str, Any]) -> Any:
        return reply(wire, decide(read(wire, body)))

    return answer
