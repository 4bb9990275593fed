"""The scripted model and summarizer, over a wire-neutral view of one upstream request.

The model reads only what the request shows it. For the session's own turns it follows the
script (`script.py`). Asked a question, it answers with the latest statement of the fact that
it can see; when it sees none and the request offers the recall tool it calls the tool once
(the fact's key as the query) and answers from the result; otherwise it says "unknown". That
is the behaviour of a model that uses what it is given and nothing else, so its score measures
what the projection (and recall) let it see.

The summarizer is extractive and lossy on purpose: it keeps the goal, every user correction
(its prompt asks for them) and only the newest few fact-like lines, so facts do fall out of the
rolling summary as they would with a real model under a size limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bench.continuity import script

RECALL_TOOL = "ctxproxy_recall"
KEY_FACTS_KEPT = 3
_EVENT = re.compile(r'<event id="e(\d+)"[^>]*>(.*?)</event>', re.S)
_PREVIOUS = re.compile(r"<previous_summary>(.*?)</previous_summary>", re.S)
_FACT_LINE = re.compile(r"[^\n.]*(?: is | = |: )[^\n.]*\d[^\n.]*")
_BULLET = re.compile(r"^- (.+)$", re.M)


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


def respond(view: View, steps: int) -> Action:
    if view.summary_request:
        return Action(text=summarize(view.body_text))
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


def summarize(body_text: str) -> str:
    previous = _PREVIOUS.search(body_text)
    corrections: list[str] = []
    facts: list[str] = []
    if previous:
        old = previous.group(1)
        sections = re.split(r"^## ", old, flags=re.M)
        for section in sections:
            bullets = _BULLET.findall(section)
            if section.startswith("Corrections"):
                corrections += bullets
            elif section.startswith("Key facts"):
                facts += bullets
    for event_id, text in _EVENT.findall(body_text):
        for line in re.findall(r"Correction: [^\n]*?\.(?=\s|$)", text):
            corrections.append(f"{line[len('Correction: ') :]} [e{event_id}]")
        for line in _FACT_LINE.findall(text):
            line = line.strip()
            if 8 < len(line) < 120 and not any(w in line for w in ("Correction", "Question", "run-check")):
                facts.append(f"{line} [e{event_id}]")
    facts = list(dict.fromkeys(facts))[-KEY_FACTS_KEPT:]
    corrections = list(dict.fromkeys(corrections))
    return (
        f"## Goal\n{script.OBJECTIVE}\n## Constraints\nnone\n## Corrections\n"
        + ("\n".join(f"- {c}" for c in corrections) or "none")
        + "\n## Decisions\nnone\n## Key facts\n"
        + ("\n".join(f"- {f}" for f in facts) or "none")
        + "\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue with the next episode."
    )
