"""Compaction done by the provider (`summarizer.mode: native`), and checkpoints that hold it.

With `summarizer.mode: native` a compaction job asks the route's own upstream to compact each
chunk of the plan its own way (`Wire.native_compaction`): the Responses API's
`/responses/compact`, whose opaque compaction item becomes the checkpoint's content and is sent
back verbatim in every later projection, or Anthropic's server-side compaction, whose readable
summary becomes the checkpoint's text. Each chunk goes with what the checkpoint so far stands
for (its opaque messages, its summary block), so the provider's compaction rolls like ctxproxy's.

Any failure falls back to ctxproxy's own summarizer for that chunk and the rest of the job, and
says why (log, `ctxproxy_compactions_total{result="native_fallback"}`, the failed call's record):
an API without compaction (Chat Completions), a litellm route, a range below the provider's
minimum (Anthropic compacts only prompts of 50,000 tokens or more), an error answer, an answer
that compacted nothing, a summary the checks refuse. The fallback's summary then follows the
provider's compaction in the checkpoint, so nothing already covered is lost.

What a checkpoint then holds, and how it is stored, is `proxy.covered`'s.
"""

from __future__ import annotations

import logging

from policies.base import Item
from policies.summary_prompt import check_summary, checkpoint_block, fit_summary

from .covered import Covered
from .protocols.base import NativeRequest
from .rolling import Rolling
from .types import Message
from .windows import summarizer_key

log = logging.getLogger("ctxproxy.compaction")


class NativeRolling(Rolling):
    """One compaction job's calls when the policy asks the provider to compact: each chunk the
    provider's way while it works, ctxproxy's own summarizer from the first failure on."""

    fallback: str | None = None
    """Why the job went on with ctxproxy's own summarizer (None: it has not)."""

    async def covering(
        self, covered: Covered, chunk: tuple[Item, ...], through: int
    ) -> tuple[Covered | None, str | None]:
        """What the checkpoint stands for once `chunk` is added to `covered` (covering through
        `through` before it), or (None, why)."""
        if self.fallback is None:
            done, why = await self._native(covered, chunk, through)
            if done is not None:
                return done, None
            self.fallback = why
            job = self.job
            log.warning("native compaction of branch %s fell back to the own summarizer: %s", job.branch_id, why)
            self.recorder.metrics.observe_compaction("native_fallback")
        return await super().covering(covered, chunk, through)

    async def _native(self, covered: Covered, chunk: tuple[Item, ...], through: int) -> tuple[Covered | None, str]:
        job, projector = self.job, self.projector
        wire = job.wire
        if job.route.upstream.model:
            return None, "a litellm route has no provider compaction to call"
        if covered.wire is not None and covered.wire != wire.name:
            return None, f"the checkpoint holds the provider compaction of {covered.wire}"
        before = (
            checkpoint_block(covered.text, through, native=covered.native) if covered.text or covered.native else ()
        )
        messages: list[Message] = [dict(m) for m in (*before, *(item.message for item in chunk))]
        budget = projector.summarizer_budget(job.policy, job.model, job.route)
        request = wire.native_compaction(job.model, messages, budget.max_output_tokens)
        if request is None:
            return None, f"the {wire.name} API has no compaction of its own"
        counter = projector.counter(job.model)
        needed = budget.fixed_tokens + sum(counter(message) for message in messages)
        key = summarizer_key(job.policy, job.model, job.route.name)
        prediction = projector.estimator.predict(key, None, (), needed, budget.fixed_tokens, job.policy.safety_margin)
        if prediction.predicted < request.minimum_tokens:
            return None, (
                f"the range is about {prediction.predicted:,} tokens; the provider compacts only "
                f"prompts of {request.minimum_tokens:,} or more"
            )
        if needed > budget.input_budget:
            return (
                None,
                f"the range of {needed:,} tokens does not fit the model's input budget of {budget.input_budget:,}",
            )
        return await self._call(covered, chunk, request, needed)

    async def _call(
        self, covered: Covered, chunk: tuple[Item, ...], request: NativeRequest, needed: int
    ) -> tuple[Covered | None, str]:
        job = self.job
        if self.closing():
            return None, "the proxy is shutting down"
        result = await self.summarizer.compact(job.wire, job.route, job.policy, job.model, request, job.client_auth)
        await self.record(result, chunk, needed)
        if result.native:
            return Covered(result.native, "", job.wire.name), ""
        if result.text is None:
            return None, result.error or "the provider compacted nothing"
        counter = self.projector.counter(job.model)
        cap = self.projector.summary_max_tokens(job.policy, job.model, job.route)
        text = fit_summary(result.text, max(cap, job.plan.summary_room or cap), counter.count_text)
        previous = covered.text or None
        problems = check_summary(text, chunk, previous_summary=previous, allowed_texts=self.allowed)
        if problems:
            return None, "the provider's summary was refused: " + "; ".join(problems)
        return Covered(text=text), ""  # the provider summarized all it was sent: it replaces both
