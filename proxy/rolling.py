"""The rolling summary of a compaction plan's chunks: one summarizer call per chunk, each recorded.

Each chunk is summarized with the summary so far (rolling), checked (`check_summary`) and
recorded as a call with purpose `summary`, whatever became of it. What real summarizers do is
expected, not fatal:
- A summary over `summarizer.summary_max_tokens` (models overshoot length instructions) is kept
  when it fits the room the plan left for it (`CompactionPlan.summary_room`), else cut at a line
  boundary to that room (`fit_summary`); one longer than its source allows (`summary_bound`:
  padding a small chunk) is cut to that. It is never thrown away for its length.
- A chunk the summarizer's window cannot take -- by our estimate, or by the summarizer's own
  overflow error, which teaches its window (`Estimator.overflowed`) -- is halved and each half
  summarized in turn (`SPLITS`).
- The summary the model wrote is followed by the key lines of the tool results the chunk held,
  copied by ctxproxy (`policies.key_lines`: deterministic, data); the summary is asked to be
  shorter by what they take, so the checkpoint is not longer; the next chunk's summarizer call
  sees the model's summary only, and the lines are carried forward.
- A call started is recorded even when the job is cancelled meanwhile (a shutdown's last
  resort): the upstream bills it whether or not anyone reads the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from policies.base import Item
from policies.key_lines import KeyLine, joined, key_lines_section, section_budget, split
from policies.outcome import CompactionPlan
from policies.pins import pinned_items
from policies.summary_prompt import build_summary_messages, check_summary, fit_summary, summary_bound
from policies.summary_tail import split_chunk
from policies.text import message_text

from . import record
from .config import Route
from .covered import Covered
from .last_sent import SharedPrompt
from .memory.access import Recollection
from .policy_settings import Policy, SummaryMode
from .projector import Projector
from .protocols.base import Wire
from .record import Recorder
from .store.base import StoredCheckpoint
from .summarizer import Summarizer, SummaryResult
from .types import Message
from .upstream.classify import window_of
from .windows import summarizer_key

SHUTTING_DOWN = "the proxy is shutting down: no new summarizer call"
CUT_OFF = "cut off at shutdown while the summarizer was answering; the upstream may bill it (usage unknown)"
SPLITS = 3
"""How many times a chunk is halved for a summarizer window smaller than planned (to an eighth)."""


@dataclass(frozen=True)
class CompactionJob:
    """What a compaction is given: the branch, its history as the plan saw it, the plan, the
    checkpoint it replaces and how to reach the summarizer."""

    tenant: str
    conversation_id: str
    branch_id: str
    route: Route
    policy: Policy
    model: str
    prefix: list[Message]
    items: list[Item]
    hashes: list[str]
    plan: CompactionPlan
    previous: StoredCheckpoint | None
    client_auth: dict[str, str]
    wire: Wire
    memory: Recollection | None = None
    """the request's long-term memory when its policy extracts durable facts at compaction"""
    mode: SummaryMode = "text"
    """how the job asks for its summary: the policy's `summarizer.mode` resolved for this route
    and request (`Summarizer.resolved`)"""
    shared: SharedPrompt | None = None
    """the branch's last answered request, in `shared` mode (`proxy.shared_summary`)"""


class Rolling:
    """One compaction job's summarizer calls. `closing()`: whether the proxy is shutting down (no
    new call then)."""

    def __init__(
        self,
        job: CompactionJob,
        summarizer: Summarizer,
        projector: Projector,
        recorder: Recorder,
        closing: Callable[[], bool],
    ) -> None:
        self.job = job
        self.summarizer = summarizer
        self.projector = projector
        self.recorder = recorder
        self.closing = closing
        released = set(job.plan.released_pins)  # summarized like other history: not shown as kept verbatim
        self.pinned = [item for item in pinned_items(job.items, job.policy.pins) if item.seq not in released]
        self.allowed = [message_text(item.message) for item in self.pinned] + [message_text(m) for m in job.prefix]

    async def covering(
        self, covered: Covered, chunk: tuple[Item, ...], through: int
    ) -> tuple[Covered | None, str | None]:
        """What the checkpoint stands for once `chunk` is summarized after `covered` (which covers
        through `through`), or (None, why)."""
        previous, carried = split(covered.text)
        section, reserved = self.key_lines(carried, chunk)
        text, error = await self.through(previous or None, chunk, reserved=reserved)
        return (replace(covered, text=joined(text, section)), None) if text is not None else (None, error)

    def key_lines(self, carried: list[KeyLine], chunk: tuple[Item, ...]) -> tuple[str, int]:
        """The section of key lines that follows the summary of `chunk` (`policies.key_lines`) and
        its tokens, which the summary's own length limit gives up (`summarizer.key_lines_share`)."""
        job = self.job
        cap = self.projector.summary_max_tokens(job.policy, job.model, job.route)
        count = self.projector.counter(job.model).count_text
        section = key_lines_section(carried, chunk, section_budget(cap, job.policy.summarizer.key_lines_share), count)
        return section, count(section) if section else 0

    async def through(
        self, previous: str | None, chunk: tuple[Item, ...], depth: int = 0, reserved: int = 0
    ) -> tuple[str | None, str | None]:
        """The rolling summary through `chunk`, or (None, why); `reserved`: tokens of the summary's
        length limit (and room) the key lines after it take. A chunk the summarizer's window
        cannot take (by our estimate, or by its own overflow error) is split in two and each half
        summarized in turn, at most `SPLITS` times over."""
        job, projector, policy = self.job, self.projector, self.job.policy
        limit = projector.summary_max_tokens(policy, job.model, job.route)
        cap = limit - reserved
        room = max(limit, job.plan.summary_room or limit) - reserved
        messages = build_summary_messages(previous, chunk, self.pinned, max_tokens=cap, durable=job.memory is not None)
        budget = projector.summarizer_budget(policy, job.model, job.route)
        name = policy.summarizer.model or job.model
        counter = projector.counter(name)
        needed = budget.fixed_tokens + sum(counter(message) for message in messages)
        if needed > budget.input_budget:
            # the plan sized the chunk for a window the summarizer does not have (any more)
            return await self._halves(previous, chunk, depth, budget.input_budget, needed, reserved)
        key = summarizer_key(policy, job.model, job.route.name)
        prediction = projector.estimator.predict(key, None, (), needed, budget.fixed_tokens, policy.safety_margin)
        error: str | None = None
        for _ in range(policy.summarizer.max_attempts):
            if self.closing():
                return None, SHUTTING_DOWN  # a call started now would be cut off, billed and lost
            result = await self._summarize(messages, budget.max_output_tokens, chunk, needed)
            if result.rejection is not None and result.rejection.kind == "overflow":
                rejection = result.rejection
                window = window_of(rejection, budget.max_output_tokens)
                projector.estimator.overflowed(prediction, rejection.input_tokens, window)
                self.recorder.metrics.observe_overflow(job.route.name, "summary", "retried")
                return await self._halves(previous, chunk, depth, budget.input_budget, needed, reserved)
            if result.text is None:
                error = result.error
                continue
            projector.estimator.observe(prediction, result.usage.input_total, baseline=False)
            text = fit_summary(result.text, room, counter.count_text)
            text = fit_summary(text, summary_bound(chunk, previous), len)  # padding past its source goes
            problems = check_summary(text, chunk, previous_summary=previous, allowed_texts=self.allowed)
            if not problems:
                return text, None
            error = "summary rejected: " + "; ".join(problems)
        return None, error

    async def _halves(
        self, previous: str | None, chunk: tuple[Item, ...], depth: int, room: int, needed: int, reserved: int
    ) -> tuple[str | None, str | None]:
        """Summarize `chunk` as two halves, rolling; its groups stay whole (a single group is cut)."""
        too_large = f"summarizer request of {needed:,} tokens does not fit its input budget of {room:,}"
        if depth >= SPLITS:
            return None, too_large + f" even after {SPLITS} halvings"
        counter = self.projector.counter(self.job.policy.summarizer.model or self.job.model)
        halves = split_chunk(chunk, counter)
        if halves is None:
            return None, too_large
        summary = previous
        for half in halves:
            text, error = await self.through(summary, half, depth + 1, reserved)
            if text is None:
                return None, error
            summary = text
        return summary, None

    async def _summarize(
        self, messages: list[Message], max_tokens: int, chunk: tuple[Item, ...], estimated: int
    ) -> SummaryResult:
        """One summarizer call and its call record, whatever happens to the job meanwhile: a call
        cancelled after its request went out (the drain's last resort) may still be billed, so it
        is recorded too, with unknown usage; the record is written shielded from cancellation."""
        job = self.job
        try:
            result = await self.summarizer.summarize(
                job.wire, job.route, job.policy, job.model, messages, job.client_auth, max_tokens
            )
        except asyncio.CancelledError:
            cut = SummaryResult(None, job.policy.summarizer.model or job.model, error=CUT_OFF)
            await asyncio.shield(self.record(cut, chunk, estimated))
            raise
        await asyncio.shield(self.record(result, chunk, estimated))
        return result

    async def record(self, result: SummaryResult, chunk: tuple[Item, ...], estimated: int, **facts: Any) -> None:
        """The call's record, purpose `summary`; `facts`: how it was asked, kept with its projection."""
        job = self.job
        call = self.recorder.open(job.tenant, job.route, job.wire, result.model, "summary", stream=False)
        record.attach(call, job.conversation_id, job.branch_id)
        record.summarized(call, result, chunk[0].seq if chunk else None, chunk[-1].seq if chunk else None, estimated)
        record.noted(call, **facts)
        status = result.upstream_status
        await self.recorder.finish(call, job.wire, f"http_{status}" if status is not None and status >= 400 else None)
