"""The generated agent session: episodes of tool steps, facts planted early, some corrected later.

A session is `episodes` episodes. Each opens with a user message, runs `steps - 1` tool calls of
about 2.5 KB of output each and closes with an assistant text, so one episode is `steps`
requests. Facts are planted in user text (the pinned first message included), in assistant
text and in the middle of tool outputs (where trimming cuts), a few of them corrected later.
Questions about every fact planted so far are asked halfway and at the end.

Everything is a pure function of (episode, step), so the scripted model (`model.py`) and the
client (`run.py`) agree on it without sharing state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TOOL = "bash"
OBJECTIVE = "Objective: migrate the billing service to the new queue and keep every report."
FILLER = (
    "checked the handler module and found nothing unusual in it",
    "the worker pool drained cleanly after the restart of the consumer",
    "no warnings came from the linter on the touched files today",
    "the queue adapter keeps its retry policy from the older client",
    "integration checks passed for the invoice and refund flows",
    "the schema files match the generated models without drift",
)


@dataclass(frozen=True)
class Fact:
    key: str  # what a question names and a recall query searches for
    pattern: str  # regex; group 1 is the value
    value: str  # the latest value: what a correct answer says
    where: str  # user, assistant, tool, pinned


FACTS = (
    Fact("budget", r"budget is (\d+) hours", "120", "pinned"),
    Fact("deploy ticket", r"deploy ticket is (TKT-\d+)", "TKT-48213", "user"),
    Fact("reviewer name", r"reviewer name is ([A-Z][a-z]+ [A-Z][a-z]+)", "Priya Raman", "user"),
    Fact("report path", r"report path is (/srv/reports/[\w-]+\.md)", "/srv/reports/q3-7731.md", "assistant"),
    Fact("migration id", r"migration id is (mig-\d+-[a-z])", "mig-20261104-a", "assistant"),
    Fact("listen_port", r"listen_port = (\d+)", "48443", "tool"),
    Fact("db_host", r"db_host: ([\w.-]+\.internal)", "pg-replica-17.internal", "tool"),
    Fact("max_workers", r"max_workers = (\d+)", "12", "tool"),
    Fact("cache ttl", r"cache ttl is (\d+) seconds", "900", "user"),
)

# (episode, step) -> sentences planted there. Step 0 is the user message, steps 1..steps-1 the
# tool outputs, step `steps` the closing assistant text; ("a", e, k) an assistant text before
# the k-th tool call of episode e.
USER_PLANTS = {
    0: "The budget is 150 hours.",
    1: "The deploy ticket is TKT-48213.",
    2: "Our reviewer name is Priya Raman.",
    3: "Remember: the cache ttl is 300 seconds.",
}
ASSISTANT_PLANTS = {
    (1, 3): "The report path is /srv/reports/q3-7731.md.",
    (2, 5): "The migration id is mig-20261104-a.",
}
TOOL_PLANTS = {(1, 4): "listen_port = 48443", (2, 2): "db_host: pg-replica-17.internal", (3, 6): "max_workers = 8"}
CORRECTIONS_USER = {
    9: "Correction: the budget is 120 hours, not 150.",
    11: "Correction: the cache ttl is 900 seconds, not 300.",
}
CORRECTIONS_TOOL = {(12, 3): "max_workers = 12"}


def user_text(run: str, episode: int) -> str:
    parts = [f"[{run}] Episode {episode}: run the next checks."]
    if episode == 0:
        parts.insert(0, OBJECTIVE)
    for plants in (USER_PLANTS, CORRECTIONS_USER):
        if episode in plants:
            parts.append(plants[episode])
    return " ".join(parts)


def assistant_text(episode: int, step: int, steps: int) -> str | None:
    """The text of the assistant's answer after `step` tool results of `episode` (None: no text)."""
    if step == steps - 1:
        return f"Episode {episode} finished; all checks are done."
    return ASSISTANT_PLANTS.get((episode, step))


def tool_command(episode: int, step: int) -> str:
    return f"run-check --episode {episode} --step {step}"


_COMMAND = re.compile(r"run-check --episode (\d+) --step (\d+)")


def tool_output(command: str) -> str:
    """What the client's tool prints for a command: ~2.5 KB, planted lines in the middle."""
    match = _COMMAND.search(command)
    episode, step = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    lines = [f"check {episode}.{step} line {FILLER[(i + step) % len(FILLER)]}" for i in range(40)]
    for plants in (TOOL_PLANTS, CORRECTIONS_TOOL):
        if (episode, step) in plants:
            lines.insert(20, plants[(episode, step)])
    return "\n".join(lines)


def planted_by(episode: int) -> list[Fact]:
    """The facts whose first statement happened in episodes before `episode`."""
    first = {"budget": 0, "deploy ticket": 1, "reviewer name": 2, "cache ttl": 3}
    first.update({"report path": 1, "migration id": 2, "listen_port": 1, "db_host": 2, "max_workers": 3})
    return [f for f in FACTS if first[f.key] < episode]


def expected(fact: Fact, episode: int) -> str:
    """The value a correct answer gives when asked before `episode` (corrections applied)."""
    if fact.key == "budget" and episode <= 9:
        return "150"
    if fact.key == "cache ttl" and episode <= 11:
        return "300"
    if fact.key == "max_workers" and episode <= 12:
        return "8"
    return fact.value


def question(run: str, fact: Fact) -> str:
    return f"[{run}] Question: what is the {fact.key}? Reply with the value only."


QUESTION = re.compile(r"Question: what is the (.+?)\? Reply with the value only\.")


def fact_named(key: str) -> Fact | None:
    return next((f for f in FACTS if f.key == key), None)
