"""Request bodies and sessions built from the real transcripts in shared/transcripts/openai/."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TRANSCRIPTS = Path(os.environ.get("CTXPROXY_TRANSCRIPTS", HERE.parent.parent / "shared" / "transcripts" / "openai"))
AGENT_SOURCE = "mini-swe-agent__deepseek_lite_dev_noparallel__sqlfluff__sqlfluff-1733.json"
AGENT_WINDOW = 126  # messages[126:164] + system + task: 40 messages, ~20k tokens, ends with a tool result


def transcript_files() -> list[Path]:
    if not TRANSCRIPTS.is_dir():
        return []
    return sorted(p for p in TRANSCRIPTS.glob("*.json"))


def _load(name: str) -> dict[str, Any]:
    with open(TRANSCRIPTS / name, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def agent_body(model: str = "gpt-4o") -> dict[str, Any]:
    """A 40-message, ~20k-token agent request from a real transcript: the system prompt, the task,
    then 38 consecutive turns (assistant tool calls and their results) from the middle of the run."""
    data = _load(AGENT_SOURCE)
    messages = data["messages"][:2] + data["messages"][AGENT_WINDOW : AGENT_WINDOW + 38]
    assert messages[-1]["role"] in ("tool", "user") and len(messages) == 40
    body: dict[str, Any] = {"model": model, "messages": messages}
    if data.get("tools"):
        body["tools"] = data["tools"]
    return body


def _text_pool() -> str:
    parts = []
    for path in transcript_files()[:20]:
        with open(path, encoding="utf-8") as fh:
            for m in json.load(fh)["messages"][1:]:
                if isinstance(m.get("content"), str):
                    parts.append(m["content"])
    return "\n".join(parts) or ("lorem ipsum dolor sit amet " * 10000)


def scaling_body(events: int, total_chars: int = 80_000, model: str = "gpt-4o") -> dict[str, Any]:
    """A conversation of `events - 1` alternating user/assistant messages (ending with a user
    message; the reply makes it `events` stored events) whose text adds up to ~`total_chars`
    whatever the count, so the bodies differ in event count, not in bytes."""
    pool = _text_pool()
    n = events - 1 if events % 2 == 0 else events
    n = max(1, n - (1 - n % 2))
    size = max(8, (total_chars - 45 * n) // n)  # ~45 bytes of JSON framing per message
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful coding agent."}]
    pos = 0
    for i in range(n):
        if pos + size > len(pool):
            pos = 0
        text = pool[pos : pos + size]
        pos += size
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"[{i}] {text}"})
    return {"model": model, "messages": messages}


def _pairs() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(assistant with one tool call, its tool result) pairs from the mini-swe-agent transcripts."""
    out = []
    for path in transcript_files():
        if not path.name.startswith("mini-swe-agent"):
            continue
        with open(path, encoding="utf-8") as fh:
            ms = json.load(fh)["messages"]
        for a, t in zip(ms, ms[1:], strict=False):
            if a.get("role") == "assistant" and len(a.get("tool_calls") or []) == 1 and t.get("role") == "tool":
                out.append((a, t))
    return out


def generated_session(turns: int, min_result_chars: int = 0, offset: int = 0) -> dict[str, Any]:
    """A `turns`-request agent session: system + task, then `turns` (tool call, result) pairs
    cycled from real transcripts (ids renumbered, so every call is unique)."""
    pairs = [p for p in _pairs() if len(str(p[1].get("content") or "")) >= min_result_chars]
    first = _load(AGENT_SOURCE)["messages"][:2]
    messages = list(first)
    for k in range(turns):
        a, t = pairs[(offset + k) % len(pairs)]
        call_id = f"call_gen_{k:04d}"
        call = {**a["tool_calls"][0], "id": call_id}
        messages.append({**a, "tool_calls": [call]})
        messages.append({**t, "tool_call_id": call_id})
    messages.append({"role": "assistant", "content": "Done."})  # the last request's answer
    return {
        "name": f"generated-{turns}-turns" + (f"-results>={min_result_chars}" if min_result_chars else ""),
        "messages": messages,
        "tools": _load(AGENT_SOURCE).get("tools"),
    }
