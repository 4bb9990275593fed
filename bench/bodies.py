"""Request bodies and sessions built from real agent transcripts.

The overhead body and the generated sessions always come from the transcripts vendored with the
tests (tests/data/transcripts/: SWE-agent and tau-bench, MIT), so they are the same in every
checkout. The savings replays and project_micro use the large shared set when present
($CTXPROXY_TRANSCRIPTS, else shared/transcripts/openai/ beside the checkout), else the vendored one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VENDORED = HERE.parent / "tests" / "data" / "transcripts"
_SHARED = Path(os.environ.get("CTXPROXY_TRANSCRIPTS", HERE.parent.parent / "shared" / "transcripts" / "openai"))
TRANSCRIPTS = _SHARED if _SHARED.is_dir() else VENDORED  # what the savings replays read
AGENT_SOURCE = "swe-agent__pydicom__pydicom-1458.json"  # system prompt and task of the bodies (vendored)
AGENT_MIN_RESULT_CHARS = 1000  # the overhead body's pairs: 19 with results >= 1000 chars; ~19.5k tokens in all


def transcript_files() -> list[Path]:
    if not TRANSCRIPTS.is_dir():
        return []
    return sorted(p for p in TRANSCRIPTS.glob("*.json"))


def _load(name: str) -> dict[str, Any]:
    with open(VENDORED / name, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def agent_body(model: str = "gpt-4o") -> dict[str, Any]:
    """A 40-message, ~20k-token agent request from real transcripts: the system prompt and task of
    `AGENT_SOURCE`, then 19 (assistant tool call, tool result) pairs cycled from the vendored
    SWE-agent runs (no vendored run is that long by itself)."""
    data = _load(AGENT_SOURCE)
    messages = data["messages"][:2] + generated_session(19, AGENT_MIN_RESULT_CHARS)["messages"][2:-1]
    assert messages[-1]["role"] == "tool" and len(messages) == 40
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
    """(assistant with one tool call, its tool result) pairs from the vendored SWE-agent transcripts
    (all call the same single `bash` tool)."""
    out = []
    for path in sorted(VENDORED.glob("swe-agent__*.json")):
        with open(path, encoding="utf-8") as fh:
            ms = json.load(fh)["messages"]
        for a, t in zip(ms, ms[1:], strict=False):
            if a.get("role") == "assistant" and len(a.get("tool_calls") or []) == 1 and t.get("role") == "tool":
                out.append((a, t))
    return out


def generated_session(turns: int, min_result_chars: int = 0, offset: int = 0) -> dict[str, Any]:
    """A `turns`-request agent session: system + task, then `turns` (tool call, result) pairs
    cycled from the vendored transcripts (ids renumbered, so every call is unique)."""
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
