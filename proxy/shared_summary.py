"""Compaction through the conversation's own prompt cache (`summarizer.mode: shared`).

Problem: ctxproxy's own summarizer request (`proxy.rolling`) sends the history as tagged data
under another system prompt, so the provider bills all of it as plain input, although the same
history went upstream moments ago and sits in the provider's prompt cache. On Anthropic a cache
read costs a tenth of plain input; for a run that outgrows a 32k window the summary calls were
most of what made it dearer than no proxy at all (bench/optimisations.md).

With `mode: shared`, a compaction asks the route's own upstream for the summary with the branch's
last answered request exactly as it went upstream (`SharedPrompt`: body, messages, headers),
plus one user message (`policies.shared_prompt`): summarize up to the plan's boundary, call no
tool. The provider reads the whole conversation from its cache; only the ask and the summary are
paid in full. One call covers the whole plan: the request already fit the model's window.

Any reason it cannot be used falls back to ctxproxy's own summarizer for the rest of the job,
logged and counted (`ctxproxy_compactions_total{result="shared_fallback"}`): no request of the
branch answered in this process yet (a restart, another replica), a litellm route, long-term
memory's extraction (which needs event ids), a plan reaching past that request, a request too
large to take the ask, a request whose tool choice forces a tool call (no call is made), an
error answer, an answer that calls a tool, says nothing or has no `## Goal` (the model went on
with the task), a summary the checks (`check_summary`) refuse. The failed call is recorded like
every summarizer call.

`mode: auto` (the default) is this mode where it can apply: a litellm route or memory's
extraction make the job ctxproxy's own summarizer from the start, quietly
(`Summarizer.resolved`); the fallbacks at run time are counted as above, logged at info (a
warning with an explicit `mode: shared`, which was asked for).

What each branch last sent is kept by `proxy.last_sent`.
"""

from __future__ import annotations

import asyncio
import logging
import re

from policies.base import Item
from policies.key_lines import joined, split
from policies.shared_prompt import boundary_of, shared_ask
from policies.summary_prompt import check_summary, fit_summary, summary_bound

from .covered import Covered
from .last_sent import SharedPrompt
from .protocols.base import Wire
from .rolling import CUT_OFF, Rolling
from .summarizer import SummaryResult
from .types import Message

log = logging.getLogger("ctxproxy.compaction")

GOAL = re.compile(r"^\W{0,6}goal\b", re.IGNORECASE | re.MULTILINE)
"""The format's first section: an answer without it went on with the task instead."""


class SharedRolling(Rolling):
    """One compaction job's calls in `shared` mode: the whole plan in one call that reads the
    conversation from the provider's cache, ctxproxy's own summarizer from the first failure on."""

    fallback: str | None = None
    """Why the job went on with ctxproxy's own summarizer (None: it has not)."""
    whole: Covered | None = None
    """The summary through the plan's end, once the shared call made it."""

    async def covering(
        self, covered: Covered, chunk: tuple[Item, ...], through: int
    ) -> tuple[Covered | None, str | None]:
        if self.whole is None and self.fallback is None:
            self.whole, why = await self._shared(covered)
            if self.whole is None:
                self.fallback = why
                asked = self.job.policy.summarizer.mode == "shared"  # `auto` expects a fallback now and then
                log.log(
                    logging.WARNING if asked else logging.INFO,
                    "shared summary of branch %s fell back to the own summarizer: %s",
                    self.job.branch_id,
                    why,
                )
                self.recorder.metrics.observe_compaction("shared_fallback")
        if self.whole is not None:
            return self.whole, None  # the one call covered every chunk of the plan
        return await super().covering(covered, chunk, through)

    async def _shared(self, covered: Covered) -> tuple[Covered | None, str]:
        job, projector = self.job, self.projector
        prompt = job.shared
        through = job.plan.through_seq
        if prompt is None:
            return None, "no request of the branch was answered in this process yet"
        if job.route.upstream.model:
            return None, "a litellm route reads no cache of the client's provider"
        if job.memory is not None:
            return None, "long-term memory's extraction needs event ids, which the conversation does not show"
        if prompt.wire != job.wire.name or prompt.last_seq < through:
            return None, f"the branch's last answered request ends at e{prompt.last_seq}, before e{through}"
        if not job.wire.answers_in_text(prompt.body):
            return None, "the request it would repeat forces a tool call (its tool choice): no text answer can come"
        source = tuple(item for item in job.items if job.plan.from_seq <= item.seq <= prompt.last_seq)
        previous, carried = split(covered.text)
        section, reserved = self.key_lines(carried, tuple(item for item in source if item.seq <= through))
        limit = projector.summary_max_tokens(job.policy, job.model, job.route)
        cap = limit - reserved
        ask: Message = {"role": "user", "content": shared_ask(boundary_of(job.items, through), cap)}
        counter = projector.counter(job.model)
        budget, _ = projector.budget(job.policy, job.model, prompt.body, counter, job.route)
        room = budget.nominal_input or budget.context_window - budget.max_output_tokens
        needed = prompt.input_tokens + counter(ask)
        if needed > room:
            return None, f"the request of {prompt.input_tokens:,} tokens leaves no room for the ask within {room:,}"
        if self.closing():
            return None, "the proxy is shutting down"
        request = _request(job.wire, job.model, prompt, ask)
        covers = tuple(i for i in source if i.seq <= through)
        try:
            result = await self.summarizer.shared(job.wire, job.route, job.policy, job.model, request)
        except asyncio.CancelledError:  # cut off by the drain: the upstream may bill it, so it is recorded
            cut = SummaryResult(None, job.model, error=CUT_OFF)
            await asyncio.shield(self.record(cut, covers, needed, shared=True))
            raise
        await asyncio.shield(self.record(result, covers, needed, shared=True))
        if result.text is None:
            return None, result.error or "the model answered no summary"
        if not GOAL.search(result.text):
            return None, "the answer has no '## Goal' section: the model did not write the summary it was asked for"
        text = fit_summary(result.text, max(limit, job.plan.summary_room or limit) - reserved, counter.count_text)
        text = fit_summary(text, summary_bound(source, previous or None), len)
        problems = check_summary(text, source, previous_summary=previous or None, allowed_texts=self.allowed)
        if problems:
            return None, "the summary was refused: " + "; ".join(problems)
        return Covered(covered.native, joined(text, section), covered.wire), ""


def _request(wire: Wire, model: str, prompt: SharedPrompt, ask: Message) -> tuple[str, bytes, dict[str, str]]:
    """Path, bytes and headers of the shared request: the last one, whole instead of streamed,
    with the ask after its messages."""
    body = wire.unstreamed(prompt.body)
    encoded, _ = wire.encode(body, [*prompt.messages, ask], False, None)
    assert encoded is not None  # messages were given: the body is always encoded
    return wire.upstream_path_for(model, False), encoded, prompt.headers
