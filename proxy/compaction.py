"""Compaction (DESIGN step 8): plan (pure, in policies), one LLM call per chunk, one fenced commit.

When a projection crosses the trigger, `policies` returns a `CompactionPlan`: the oldest uncovered
groups, in chunks small enough that each summarizer request fits. The job summarizes them rolling
(previous summary + next chunk), checks every summary (`check_summary`: no new URLs or images, no
invented constraint quotes, not empty, not larger than its source) and commits a checkpoint with
compare-and-set on (parent generation, chain hash of the last covered event).

The summarizer calls are `proxy.rolling`'s, which takes what real summarizers do as expected,
not fatal (over-long summaries, windows smaller than planned). A chunk that still fails ends the
job, but the chunks already summarized are committed: the branch gets less than planned, never
less than its previous checkpoint.
Anything else -- a failed or rejected summary for the first chunk, a time-out, a concurrent
commit, a deleted conversation -- leaves the previous checkpoint active; the request is served
by pruning meanwhile (with a marker naming what was dropped).

At most one job per branch runs in this process (single-flight); a branch whose summary failed
waits (exponential back-off, 30 s to 10 min) before the next attempt, so a history that cannot be
summarized (one giant tool result) never loops compaction on every request. A job the store failed
(the lease, the commit) is not the history's fault: its branch retries after a short fixed delay
(`STORE_RETRY`), so a store restart does not cost the conversation its next compactions.

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

from policies.compaction import next_checkpoint
from policies.summary_prompt import durable_facts

from .covered import Covered, checkpoint_of, covered_of
from .errors import ConversationGone, StoreError
from .last_sent import CAPACITY_MB, SharedPrompts
from .memory.actions import extract
from .native_compaction import NativeRolling
from .projector import Projector
from .record import Recorder
from .rolling import CompactionJob, Rolling
from .shared_summary import SharedRolling
from .store.base import CheckpointCandidate, Store, StoredCheckpoint
from .summarizer import Summarizer

log = logging.getLogger("ctxproxy.compaction")

LEASE_TTL = 30.0
STORE_RETRY = 5.0


class Compactor:
    def __init__(
        self,
        store: Store,
        summarizer: Summarizer,
        projector: Projector,
        recorder: Recorder,
        shared_prompts_mb: float = CAPACITY_MB,
    ) -> None:
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
        self.store_retry = STORE_RETRY
        """Seconds a branch waits after the store failed its job (no escalation)."""
        self.shared = SharedPrompts(shared_prompts_mb)
        """Each branch's last answered request, for `summarizer.mode: shared`."""
        self._closing = False
        """Set by `drain`: no job starts, and no job starts another summarizer call."""

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
        if self._closing:
            return None
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
        """On shutdown: start no new summarizer call; let the calls in flight end and be recorded
        (the upstream bills them whether or not anyone reads the answer) and the jobs commit (their
        commits are fenced). After `timeout`, cancel what is left -- a call cut off is recorded all
        the same, its usage unknown -- and wait for those jobs' records before the store closes."""
        self._closing = True
        tasks = [t for t in self._jobs.values() if not t.done()]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)

    def _fail(self, branch_id: str, *, store: bool = False) -> None:
        """Back the branch off: escalating after a failed summary, a short fixed delay (keeping
        the count of summary failures) after a store failure."""
        _, failures = self._backoff.get(branch_id, (0.0, 0))
        if store:
            delay = self.store_retry
        else:
            failures += 1
            delay = min(600.0, 30.0 * 2 ** (failures - 1))
        self._backoff[branch_id] = (time.monotonic() + delay, failures)
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
            self._fail(job.branch_id, store=True)
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
        kind = {"native": NativeRolling, "shared": SharedRolling}.get(job.mode, Rolling)
        rolling = kind(job, self.summarizer, self.projector, self.recorder, lambda: self._closing)
        previous = covered_of(job.previous) if job.previous else Covered()
        covered = previous
        through, error = 0, None
        try:
            for chunk in plan.chunks:
                done, error = await rolling.covering(covered, chunk, through or plan.from_seq - 1)
                if done is None:
                    break
                covered, through = done, chunk[-1].seq
            if not through:
                # nothing summarized: the previous checkpoint stays active
                log.warning("compaction of branch %s failed: %s", job.branch_id, error)
                self._fail(job.branch_id)
                await self._record_failure(job, previous, token, error or "summary failed")
                return None
            if error is not None:
                # the chunks summarized so far still make a checkpoint: less than planned, more than before
                log.warning("compaction of branch %s covers through e%s only: %s", job.branch_id, through, error)
            counter = self.projector.counter(job.model)
            before = checkpoint_of(job.previous, None)
            checkpoint = next_checkpoint(before, plan, covered.text, counter, through, covered.native)
            candidate = self._candidate(job, covered, checkpoint.tokens, token, through)
            committed = await self.store.commit_checkpoint(candidate)
        except ConversationGone:
            self._count("discarded")
            return None  # deleted while we worked: nothing may be written back
        except StoreError as exc:
            log.error("compaction of branch %s could not be stored: %s", job.branch_id, exc)
            self._fail(job.branch_id, store=True)
            return None
        if committed is None:
            log.info("compaction of branch %s discarded: the branch moved on", job.branch_id)
            self._count("discarded")
            return None
        self._backoff.pop(job.branch_id, None)
        self.completed += 1
        self._count("committed")
        if job.memory is not None:
            await self._extract(job, covered.text)
        return committed

    async def _record_failure(self, job: CompactionJob, previous: Covered, token: int, error: str) -> None:
        """The failed attempt's row (the inspector's "failed checkpoint"); a store that cannot take
        it loses the row, and the branch keeps the summary failure's back-off."""
        try:
            await self.store.record_failed_checkpoint(self._candidate(job, previous, 0, token), error)
        except ConversationGone:
            return
        except StoreError as exc:
            log.warning("failed compaction of branch %s not recorded: %s", job.branch_id, exc)

    async def _extract(self, job: CompactionJob, summary: str) -> None:
        """Long-term memory's extraction: the summary's durable facts become unconfirmed candidate
        memories (a failing store loses them, never the checkpoint)."""
        assert job.memory is not None
        facts = durable_facts(summary)
        try:
            events = await self.store.lineage_events(job.branch_id, 0, 1 << 30)
            saved = await extract(job.memory.actor, facts, events)
        except StoreError as exc:
            log.warning("durable facts of branch %s not saved: %s", job.branch_id, exc)
            return
        if saved:
            log.info("compaction of branch %s saved %d candidate memories", job.branch_id, saved)

    def _candidate(
        self, job: CompactionJob, content: Covered, tokens: int, token: int | None, through: int | None = None
    ) -> CheckpointCandidate:
        plan = job.plan
        covered = through or plan.through_seq
        summary, format_version = content.encoded()
        return CheckpointCandidate(
            conversation_id=job.conversation_id,
            branch_id=job.branch_id,
            parent_generation=job.previous.generation if job.previous else 0,
            from_seq=plan.from_seq,
            covered_through_seq=covered,
            source_hash=job.hashes[covered - 1],
            summary=summary,
            tokens=tokens,
            model=job.policy.summarizer.model or job.model,
            format_version=format_version,
            lease_token=token,
        )
