"""Compaction (DESIGN step 8): plan (pure, in policies), one LLM call per chunk, one fenced commit.

When a projection crosses the trigger, `policies` returns a `CompactionPlan`: the oldest uncovered
groups, in chunks small enough that each summarizer request fits. The job summarizes them rolling
(previous summary + next chunk), checks every summary (`check_summary`: no new URLs or images, no
invented constraint quotes, not empty, not larger than its source, not longer than
`summarizer.summary_max_tokens` -- an over-long summary is asked for once more, shorter) and commits a checkpoint with
compare-and-set on (parent generation, chain hash of the last covered event). Anything else --
a failed or rejected summary, a time-out, a concurrent commit, a deleted conversation -- leaves
the previous checkpoint active; the request is served by pruning meanwhile.

At most one job per branch runs in this process (single-flight); a branch whose job failed waits
(exponential back-off, 30 s to 10 min) before the next attempt, so a history that cannot be
summarized (one giant tool result) never loops compaction on every request.

Across replicas sharing a store, a job first takes the branch's lease (`Store.acquire_lease`,
renewed every third of its TTL while the summarizer runs); a branch leased by another replica is
skipped. The lease's fencing token travels with the candidate: a job whose lease expired and was
taken over cannot commit, whatever its generation says.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import time
from dataclasses import dataclass

from policies.base import Checkpoint, CompactionPlan, Item
from policies.compaction import next_checkpoint
from policies.pins import pinned_items
from policies.summary_prompt import build_summary_messages, check_summary
from policies.text import message_text

from .config import Policy, Route
from .errors import ConversationGone, StoreError
from .projection import Projector
from .protocols.base import Wire
from .record import Recorder
from .store.base import CheckpointCandidate, Store, StoredCheckpoint
from .summarizer import Summarizer, SummaryResult
from .types import Message

log = logging.getLogger("ctxproxy.compaction")

FORMAT_VERSION = 1
LEASE_TTL = 30.0


@dataclass(frozen=True)
class CompactionJob:
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


def _value(stored: StoredCheckpoint | None) -> Checkpoint | None:
    if stored is None:
        return None
    return Checkpoint(stored.generation, stored.covered_through_seq, stored.summary, stored.tokens)


class Compactor:
    def __init__(self, store: Store, summarizer: Summarizer, projector: Projector, recorder: Recorder) -> None:
        self.store = store
        self.summarizer = summarizer
        self.projector = projector
        self.recorder = recorder
        self._jobs: dict[str, asyncio.Task[StoredCheckpoint | None]] = {}
        self._backoff: dict[str, tuple[float, int]] = {}
        self.completed = 0
        self.failed = 0
        self.owner = "cmp_" + secrets.token_hex(8)
        """This process's lease owner id."""
        self.lease_ttl = LEASE_TTL

    def running_jobs(self) -> int:
        """How many compaction jobs of this process are still running."""
        return sum(1 for task in self._jobs.values() if not task.done())

    def running(self, branch_id: str) -> asyncio.Task[StoredCheckpoint | None] | None:
        task = self._jobs.get(branch_id)
        return task if task is not None and not task.done() else None

    def request(self, job: CompactionJob) -> asyncio.Task[StoredCheckpoint | None] | None:
        """Start (or join) the branch's compaction; None while the branch is backing off."""
        existing = self.running(job.branch_id)
        if existing is not None:
            return existing
        until, _ = self._backoff.get(job.branch_id, (0.0, 0))
        if time.monotonic() < until:
            return None
        task = asyncio.create_task(self._run(job), name=f"compact:{job.branch_id}")
        self._jobs[job.branch_id] = task
        task.add_done_callback(functools.partial(self._done, job.branch_id))
        return task

    def _done(self, branch_id: str, task: asyncio.Task[StoredCheckpoint | None]) -> None:
        if self._jobs.get(branch_id) is task:
            del self._jobs[branch_id]
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error("compaction of branch %s crashed: %r", branch_id, task.exception())

    async def drain(self, timeout: float) -> None:
        """On shutdown: let running jobs finish (their commits are fenced), then cancel the rest."""
        tasks = [t for t in self._jobs.values() if not t.done()]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()

    def _fail(self, branch_id: str) -> None:
        _, failures = self._backoff.get(branch_id, (0.0, 0))
        failures += 1
        self._backoff[branch_id] = (time.monotonic() + min(600.0, 30.0 * 2 ** (failures - 1)), failures)
        if len(self._backoff) > 100_000:
            self._backoff.pop(next(iter(self._backoff)))
        self.failed += 1
        self._count("failed")

    def _count(self, result: str) -> None:
        self.recorder.metrics.observe_compaction(result)

    async def _run(self, job: CompactionJob) -> StoredCheckpoint | None:
        try:
            token = await self.store.acquire_lease(job.branch_id, self.owner, self.lease_ttl)
        except StoreError as exc:
            log.error("compaction lease of branch %s not taken: %s", job.branch_id, exc)
            self._fail(job.branch_id)
            return None
        if token is None:
            log.info("compaction of branch %s skipped: another replica holds its lease", job.branch_id)
            self._count("skipped")
            return None
        renewer = asyncio.create_task(self._renew(job.branch_id, token), name=f"lease:{job.branch_id}")
        try:
            return await self._compact(job, token)
        finally:
            renewer.cancel()
            try:
                await self.store.release_lease(job.branch_id, self.owner, token)
            except StoreError as exc:
                log.warning("compaction lease of branch %s not released (it expires): %s", job.branch_id, exc)

    async def _renew(self, branch_id: str, token: int) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            try:
                renewed = await self.store.renew_lease(branch_id, self.owner, token, self.lease_ttl)
            except StoreError as exc:
                log.warning("compaction lease of branch %s not renewed: %s", branch_id, exc)
                continue
            if not renewed:
                log.warning("compaction lease of branch %s lost; its commit will be refused", branch_id)
                return

    async def _compact(self, job: CompactionJob, token: int) -> StoredCheckpoint | None:
        plan = job.plan
        released = set(plan.released_pins)  # summarized like other history: not shown as kept verbatim
        pinned = [item for item in pinned_items(job.items, job.policy.pins) if item.seq not in released]
        allowed = [message_text(item.message) for item in pinned] + [message_text(m) for m in job.prefix]
        summary = job.previous.summary if job.previous else None
        candidate = self._candidate(job, summary or "", 0, token)
        try:
            for chunk in plan.chunks:
                text, error = await self._summarize_chunk(job, summary, chunk, pinned, allowed)
                if text is None:
                    await self.store.record_failed_checkpoint(candidate, error or "summary failed")
                    log.warning("compaction of branch %s failed: %s", job.branch_id, error)
                    self._fail(job.branch_id)
                    return None
                summary = text
            assert summary is not None
            checkpoint = next_checkpoint(_value(job.previous), plan, summary, self.projector.counter(job.model))
            committed = await self.store.commit_checkpoint(self._candidate(job, summary, checkpoint.tokens, token))
        except ConversationGone:
            self._count("discarded")
            return None  # deleted while we worked: nothing may be written back
        except StoreError as exc:
            log.error("compaction of branch %s could not be stored: %s", job.branch_id, exc)
            self._fail(job.branch_id)
            return None
        if committed is None:
            log.info("compaction of branch %s discarded: the branch moved on", job.branch_id)
            self._count("discarded")
            return None
        self._backoff.pop(job.branch_id, None)
        self.completed += 1
        self._count("committed")
        return committed

    def _candidate(self, job: CompactionJob, summary: str, tokens: int, token: int | None) -> CheckpointCandidate:
        plan = job.plan
        return CheckpointCandidate(
            conversation_id=job.conversation_id,
            branch_id=job.branch_id,
            parent_generation=job.previous.generation if job.previous else 0,
            from_seq=plan.from_seq,
            covered_through_seq=plan.through_seq,
            source_hash=job.hashes[plan.through_seq - 1],
            summary=summary,
            tokens=tokens,
            model=job.policy.summarizer.model or job.model,
            format_version=FORMAT_VERSION,
            lease_token=token,
        )

    async def _summarize_chunk(
        self,
        job: CompactionJob,
        previous: str | None,
        chunk: tuple[Item, ...],
        pinned: list[Item],
        allowed: list[str],
    ) -> tuple[str | None, str | None]:
        cap = self.projector.summary_max_tokens(job.policy, job.model)
        messages = build_summary_messages(previous, chunk, pinned, max_tokens=cap)
        budget = self.projector.summarizer_budget(job.policy, job.model)
        counter = self.projector.counter(job.policy.summarizer.model or job.model)
        needed = budget.fixed_tokens + sum(counter(message) for message in messages)
        if needed > budget.input_budget:
            # The plan sized the chunk to fit; never send a summarizer request over its window.
            return None, (
                f"summarizer request of {needed:,} tokens exceeds the summarizer's input budget of "
                f"{budget.input_budget:,} (window {budget.context_window:,} - reply {budget.max_output_tokens:,})"
            )
        error: str | None = None
        attempts, attempt, asked_shorter = job.policy.summarizer.max_attempts, 0, False
        while attempt < attempts:
            attempt += 1
            result = await self.summarizer.summarize(
                job.wire, job.route, job.policy, job.model, messages, job.client_auth, budget.max_output_tokens
            )
            await self._record(job, result.model, result, chunk)
            if result.text is None:
                error = result.error
                continue
            size = counter.count_text(result.text)
            if size > cap:
                error = f"summary too long: {size:,} tokens > summary_max_tokens {cap:,}"
                if asked_shorter:
                    break  # asked once more, shorter, already: the previous checkpoint stays
                asked_shorter, attempts = True, max(attempts, attempt + 1)
                messages = build_summary_messages(previous, chunk, pinned, max_tokens=cap, too_long_tokens=size)
                continue
            problems = check_summary(result.text, chunk, previous_summary=previous, allowed_texts=allowed)
            if not problems:
                return result.text, None
            error = "summary rejected: " + "; ".join(problems)
        return None, error

    async def _record(self, job: CompactionJob, model: str, result: SummaryResult, chunk: tuple[Item, ...]) -> None:
        call = self.recorder.open(job.tenant, job.route, model, "summary", stream=False)
        call.started_at -= result.latency_ms / 1000
        call.conversation_id, call.branch_id = job.conversation_id, job.branch_id
        call.status = "complete" if result.text is not None else "error"
        call.upstream_status, call.error, call.latency_ms = result.upstream_status, result.error, result.latency_ms
        call.response = {"role": "assistant", "content": result.text} if result.text is not None else None
        call.usage_raw, call.usage = result.usage_raw, result.usage.to_dict()
        call.projection = {"summarized_seqs": [chunk[0].seq, chunk[-1].seq] if chunk else []}
        status = result.upstream_status
        await self.recorder.finish(
            call, job.wire.name, f"http_{status}" if status is not None and status >= 400 else None
        )
