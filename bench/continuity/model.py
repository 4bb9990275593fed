"""The scripted model and summarizer, over a wire-neutral view of one upstream request.

The model reads only what the request shows it. For the session's own turns it follows the
script (`script.py`). Asked a question, it answers with the latest statement of the fact that
it can see; when it sees none and the request offers the recall tool it calls the tool once
(the fact's key as the query) and answers from the result; otherwise it says "unknown". That
is the behaviour of a model that uses what it is given and nothing else, so its score measures
what the projection (and recall) let it see.

The summarizer is extractive and lossy on purpose: it keeps the goal, every user correction
(its prompt asks for them) and only the newest few fact-like lines, so facts do fall out of the
rolling summary as they would with a real model under a size limit. And like a real model it
overshoots its length instruction ("Keep the whole summary under N tokens."): given the
upstream's own token count it pads its answer to 1.1-1.3 x N with plausible content, verbose
notes on the checks it read (never a planted fact: those stay under the rules above), within
what the source holds.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.continuity import script

RECALL_TOOL = "ctxproxy_recall"
KEY_FACTS_KEPT = 3
_EVENT = re.compile(r'<event id="e(\d+)"[^>]*>(.*?)</event>', re.S)
_PREVIOUS = re.compile(r"<previous_summary>(.*?)</previous_summary>", re.S)
_FACT_LINE = re.compile(r"[^\n.]*(?: is | = |: )[^\n.]*\d[^\n.]*")
_BULLET = re.compile(r"^- (.+)$", re.M)
_LIMIT = re.compile(r"Keep the whole summary under ([\d,]+) tokens\.")
_HISTORY = re.compile(r"<history[^>]*>(.*?)</history>", re.S)
OVERSHOOT = (1.1, 1.3)
"""the summary's size as a multiple of the limit asked for, by the upstream's count"""


@dataclass
class View:
    """One upstream request as the model sees it."""

    texts: list[str]  # every text in order: system, messages, tool results
    last_user: str  # the newest user text (not a tool result)
    tool_results_since_user: int
    last_tool_result: str | None  # the newest item when it is a tool result
    tools: list[str]
    summary_request: bool = False
    body_text: str = ""


@dataclass
class Action:
    text: str | None = None
    calls: list[tuple[str, dict[str, object]]] = field(default_factory=list)


def _latest(pattern: str, texts: list[str]) -> str | None:
    found = None
    for text in texts:
        for match in re.finditer(pattern, text, re.I):
            found = match.group(1)
    return found


def respond(view: View, steps: int, count: Callable[[str], int] | None = None) -> Action:
    """The model's next action; `count`: the upstream's token count of a text, which the
    summarizer overshoots its length instruction by."""
    if view.summary_request:
        return Action(text=summarize(view.body_text, count))
    asked = script.QUESTION.search(view.last_user)
    if asked:
        return _answer(view, script.fact_named(asked.group(1)))
    episode_match = re.search(r"Episode (\d+):", view.last_user)
    episode = int(episode_match.group(1)) if episode_match else 0
    step = view.tool_results_since_user
    text = script.assistant_text(episode, step, steps)
    if step >= steps - 1:
        return Action(text=text)
    return Action(text=text, calls=[(script.TOOL, {"command": script.tool_command(episode, step + 1)})])


def _answer(view: View, fact: script.Fact | None) -> Action:
    if fact is None:
        return Action(text="unknown")
    recalled = view.last_tool_result
    if recalled is not None and "conversation_history_search" in recalled:
        return Action(text=_latest(fact.pattern, [recalled]) or "unknown")
    visible = [t for t in view.texts if not script.QUESTION.search(t)]
    value = _latest(fact.pattern, visible)
    if value is not None:
        return Action(text=value)
    if RECALL_TOOL in view.tools:
        return Action(calls=[(RECALL_TOOL, {"query": fact.key})])
    return Action(text="unknown")


def summarize(body_text: str, count: Callable[[str], int] | None = None) -> str:
    """The summary of a summarizer request; with `count`, padded past its length instruction."""
    previous = _PREVIOUS.search(body_text)
    corrections: list[str] = []
    facts: list[str] = []
    notes: list[str] = []
    if previous:
        old = previous.group(1)
        sections = re.split(r"^## ", old, flags=re.M)
        for section in sections:
            bullets = _BULLET.findall(section)
            if section.startswith("Corrections"):
                corrections += bullets
            elif section.startswith("Key facts"):
                facts += bullets
            elif section.startswith("Decisions"):
                notes += bullets
    for event_id, text in _EVENT.findall(body_text):
        for line in re.findall(r"Correction: [^\n]*?\.(?=\s|$)", text):
            corrections.append(f"{line[len('Correction: ') :]} [e{event_id}]")
        for line in _FACT_LINE.findall(text):
            line = line.strip()
            if 8 < len(line) < 120 and not any(w in line for w in ("Correction", "Question", "run-check")):
                facts.append(f"{line} [e{event_id}]")
    facts = list(dict.fromkeys(facts))[-KEY_FACTS_KEPT:]
    corrections = list(dict.fromkeys(corrections))
    limit = _LIMIT.search(body_text)
    decisions: list[str] = []
    if limit is not None and count is not None:
        target = int(limit.group(1).replace(",", "")) * _overshoot(body_text)
        core = count(_render(corrections, [], facts))
        room = int(0.8 * _source_chars(body_text))  # the proxy rejects a summary longer than its source
        decisions = _padding(notes + _notes(body_text), target - core, count, room)
    return _render(corrections, decisions, facts)


def _render(corrections: list[str], decisions: list[str], facts: list[str]) -> str:
    return (
        f"## Goal\n{script.OBJECTIVE}\n## Constraints\nnone\n## Corrections\n"
        + ("\n".join(f"- {c}" for c in corrections) or "none")
        + "\n## Decisions\n"
        + ("\n".join(f"- {d}" for d in decisions) or "none")
        + "\n## Key facts\n"
        + ("\n".join(f"- {f}" for f in facts) or "none")
        + "\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue with the next episode."
    )


def _overshoot(body_text: str) -> float:
    """Within `OVERSHOOT`, a function of the request (reproducible; a retry asking for a shorter
    summary overshoots the same limit again); the last note added may pass the target by a few
    tokens, so the draw stays 3% below the top."""
    low, high = OVERSHOOT
    return low + (high - 0.03 - low) * (zlib.crc32(body_text.encode()) / 0xFFFFFFFF)


_PLANTED = re.compile("|".join(f.pattern for f in script.FACTS) + "|Correction|Question|Remember", re.I)


def _notes(body_text: str) -> list[str]:
    """Verbose notes on what the history shows (the checks run and what they printed), oldest
    first, none of them a planted fact: a wordy model's filler, true to its source."""
    out = []
    for event_id, text in _EVENT.findall(body_text):
        for line in text.splitlines():
            line = line.strip()
            if len(line) > 12 and not _PLANTED.search(line) and not line.startswith("[tool call"):
                out.append(f"Reviewed in e{event_id}: {line}; nothing in it changes the plan. [e{event_id}]")
    return out


def _source_chars(body_text: str) -> int:
    history = _HISTORY.search(body_text)
    previous = _PREVIOUS.search(body_text)
    return len(history.group(1) if history else "") + len(previous.group(1) if previous else "")


def _padding(notes: list[str], tokens: float, count: Callable[[str], int], max_chars: int) -> list[str]:
    """The newest notes, in order, until they add `tokens` (within `max_chars` of text: a summary
    longer than its source is rejected as runaway, and a wordy model still writes less than it read)."""
    picked: list[str] = []
    added = chars = 0
    for note in reversed(list(dict.fromkeys(notes))):
        if added >= tokens or chars + len(note) > max_chars:
            break
        picked.append(note)
        added += count(f"- {note}\n")
        chars += len(note) + 3
    return picked[::-1]
