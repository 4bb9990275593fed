"""Real agent transcripts for the tests: a small vendored set, and the large shared set when present.

- Vendored (always there): ``tests/data/transcripts/`` -- SWE-agent and tau-bench runs, MIT, with
  their licences and a note on their source (README.md there).
- Shared (optional): ``$CTXPROXY_TRANSCRIPTS``, else ``shared/transcripts/openai/`` beside the
  checkout (as CI lays it out). It adds the mini-swe-agent runs of up to 378 messages, which are
  not redistributed with the repository.

A test that needs a run many times longer than its window asks for :func:`long_run`: the longest
shared run when the shared set is there, otherwise :data:`GENERATED` -- a session of the vendored
runs' own tool calls and results cycled to the same length (ids renumbered, so every call is unique).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VENDORED = REPO / "tests" / "data" / "transcripts"
LARGE = (  # in the shared set only
    "mini-swe-agent__deepseek_chat_dev_rerun__pylint-dev__astroid-1333.json",
    "mini-swe-agent__deepseek_reasoner_dev__sqlfluff__sqlfluff-1763.json",
)
GENERATED = "generated__swe-agent-tool-calls__180-turns"
_GENERATED_TURNS = 180  # ~95k tokens at the end, like the longest shared run (378 messages, 91k)
_GENERATED_PREFIX = (  # system prompt and task of the generated session: a SWE-bench task, ~1.9k tokens
    "swe-agent__marshmallow-code__marshmallow-1867__default__t-0.20__p-0.95__c-2.00__install-1___install_from_source.json"
)


def shared_dir() -> Path | None:
    """The shared transcript folder, or None when this checkout has none beside it."""
    configured = os.environ.get("CTXPROXY_TRANSCRIPTS")
    if configured:
        path = Path(configured)
        if not path.is_dir():
            raise AssertionError(f"CTXPROXY_TRANSCRIPTS={configured} is not a directory")
        return path
    default = REPO.parent / "shared" / "transcripts" / "openai"
    return default if default.is_dir() else None


def large_available() -> tuple[str, ...]:
    """The names in :data:`LARGE` that the shared set holds (none without it)."""
    shared = shared_dir()
    return tuple(n for n in LARGE if shared is not None and (shared / n).exists())


def long_run() -> str:
    """A run more than 4x a 16k window: the longest shared one, else :data:`GENERATED`."""
    return (large_available() or (GENERATED,))[0]


def path_of(name: str) -> Path:
    """The file of a transcript: vendored first, then the shared set."""
    if (VENDORED / name).exists():
        return VENDORED / name
    shared = shared_dir()
    if shared is not None and (shared / name).exists():
        return shared / name
    raise AssertionError(f"transcript {name} is neither in {VENDORED} nor in the shared set ({shared})")


def load(name: str) -> dict[str, Any]:
    """A transcript as ``{"messages", "tools", ...}``; :data:`GENERATED` is built, not read."""
    if name == GENERATED:
        return long_session(_GENERATED_TURNS)
    data: dict[str, Any] = json.loads(path_of(name).read_text(encoding="utf-8"))
    return data


def write(name: str, directory: Path) -> Path:
    """A file holding the transcript (for a CLI): the transcript's own, or the generated one written out."""
    if name != GENERATED:
        return path_of(name)
    out = directory / f"{GENERATED}.json"
    out.write_text(json.dumps(load(name)), encoding="utf-8")
    return out


def long_session(turns: int) -> dict[str, Any]:
    """System prompt and task of a vendored SWE-agent run, then ``turns`` (tool call, result) pairs
    cycled from the vendored SWE-agent runs (all call one ``bash`` tool), then a final answer."""
    first = json.loads((VENDORED / _GENERATED_PREFIX).read_text(encoding="utf-8"))
    pairs = []
    for path in sorted(VENDORED.glob("swe-agent__*.json")):
        messages = json.loads(path.read_text(encoding="utf-8"))["messages"]
        for a, t in zip(messages, messages[1:], strict=False):
            if a.get("role") == "assistant" and len(a.get("tool_calls") or []) == 1 and t.get("role") == "tool":
                pairs.append((a, t))
    out = list(first["messages"][:2])
    for k in range(turns):
        a, t = pairs[k % len(pairs)]
        call_id = f"call_gen_{k:04d}"
        out.append({**a, "tool_calls": [{**a["tool_calls"][0], "id": call_id}]})
        out.append({**t, "tool_call_id": call_id})
    out.append({"role": "assistant", "content": "Done."})
    return {"source": "generated", "name": GENERATED, "messages": out, "tools": first.get("tools")}
