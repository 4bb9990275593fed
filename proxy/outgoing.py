"""What one client request sends upstream (DESIGN step 4, project), made again for each attempt.

`Outgoing.prepare` turns the request into the bytes of the attempt under way
(`Exchange.attempt`): the client's own bytes when nothing needs rewriting, else its projection
(`Projector.project_request`) within the budget less the attempt's `cut` (an overflow's measured
overshoot), encoded by the wire. The projection may start a compaction (`Compactor.request`), and
waits for it (bounded, `overflow_wait`) only when the request could not be served without
dropping history. What the projection did goes to the attempt's call record; the prediction of
the upstream's count to the attempt, which the answer's bill is compared with.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from . import record, stored_counts, tracing
from .errors import BadRequest, ContextLengthExceeded
from .exchange import Exchange
from .memory.access import Recollection
from .projector import Asked, Projected
from .rolling import CompactionJob
from .store.base import StoredCheckpoint
from .types import Message


class Outgoing:
    def __init__(
        self,
        exchange: Exchange,
        model: str,
        body: dict[str, Any],
        messages: list[Message],
        raw: bytes,
        credentials: dict[str, str] | None,
        recalling: bool,
        mode: str | None = None,
        observing: dict[str, Any] | None = None,
        memory: Recollection | None = None,
    ) -> None:
        """`model`: the one the window and prices are looked up for (a litellm route's provider
        model, whatever the client calls it); `credentials`: how a summarizer call of a
        compaction reaches the upstream, None when the request is not rewritten; `mode`: the
        `X-Ctxproxy-Mode` asked (`proxy.modes`); `observing`: in `observe` mode, the body the
        projection would have been made for (with the recall tool it would have offered);
        `memory`: the request's long-term memory, whose block follows the pinned prefix."""
        self.exchange, self.model, self.body, self.messages, self.raw = exchange, model, body, messages, raw
        self.credentials, self.recalling = credentials, recalling
        self.mode, self.observing, self.memory = mode, observing, memory
        self.injected = False
        """whether the last projection carries a memory block (then it is what is sent)"""
        self.block_tokens = 0
        self.sent: list[Message] = messages
        """the messages of the last attempt prepared (the recall detour appends to them)"""
        self.stored: dict[str, int] = {}
        """counts stored with the history's events that no cache held (`stored_counts.read`)"""

    async def prepare(self) -> bytes:
        """The bytes of the attempt under way: the client's own, or the projection."""
        exchange = self.exchange
        wire, ingested, attempt = exchange.wire, exchange.ingested, exchange.attempt
        self.sent = self.messages
        if not self.stored:  # what no cache counted, as stored with the events
            counter = exchange.services.projector.counter(self.model)
            history, hashes, remembered = ingested.history, ingested.hashes, ingested.known
            store, branch = exchange.services.store, ingested.position.branch_id
            self.stored = await stored_counts.read(store, counter, remembered, history, hashes, branch)
        if self.credentials is not None:
            with tracing.span("ctxproxy.projection", **{"ctxproxy.attempt": attempt.number}):
                projected = await self.project(attempt.cut)
            projection = projected.projection
            attempt.prediction, attempt.limit, attempt.output = projected.prediction, projected.limit, projected.output
            record.projected(attempt.call, projected.summary())
            if not projection.messages and projection.record.orphan_seqs:
                raise _nothing_to_send(self.messages)
            if attempt.number > 1:
                record.noted(attempt.call, attempt=attempt.number, overflow_cut=attempt.cut)
            if self.memory is not None:
                injected = {"scopes": list(self.memory.actor.scopes.names), "injected": self.memory.injected}
                client = (attempt.call.projection or {}).get("client_tokens")
                if isinstance(client, int):  # the client sent no block: its count is without it
                    record.noted(attempt.call, client_tokens=client - self.block_tokens)
                record.noted(attempt.call, memory={**injected, "tokens": self.block_tokens})
            if projection.record.rewritten or attempt.cut or self.injected:
                self.sent = wire.with_cache_point(
                    self.body, projection.messages, projection.cache_point, projection.previous_point
                )
            exchange.sent = (self.body, self.sent)
        else:
            await self.count()
        known = ingested.known.encoded if ingested.known else None
        outgoing = self.sent if self.recalling or self.sent is not self.messages else None
        stream = self.exchange.call.stream  # the wire's reading (Gemini's is in the path, not the body)
        encoded, ingested.remembered.encoded = wire.encode(self.body, outgoing, stream, known)
        payload = self.raw if encoded is None else encoded  # None: the client's bytes go upstream as they are
        exchange.sent_bytes = len(payload)
        return payload

    async def count(self) -> None:
        """A request sent as the client sent it: the record says so with its count (client and
        sent tokens alike), its mode, and in `observe` mode what its projection would have been."""
        exchange = self.exchange
        projector = exchange.services.projector
        asked = self.asked(self.body)
        tokens = projector.count_request(asked)
        facts: dict[str, Any] = {"client_tokens": tokens, "sent_tokens": tokens, "checkpoint_generation": None}
        if self.mode is not None:
            facts["mode"] = self.mode
        if self.observing is not None:
            try:
                projected = await self.project(0, replace(asked, body=self.observing), compact=False)
                facts["observed"] = projected.summary()
            except ContextLengthExceeded as exc:
                facts["observed"] = {"refused": exc.message}
        record.projected(exchange.call, facts)

    def asked(self, body: dict[str, Any]) -> Asked:
        """The request as the projection (or the count) sees it, for `body`."""
        exchange = self.exchange
        ingested, projector = exchange.ingested, exchange.services.projector
        counter = projector.counter(self.model)
        items = projector.items(
            ingested.history, ingested.hashes, counter, ingested.known, ingested.remembered, self.stored
        )
        branch, route = ingested.identity.branch_id, exchange.route
        wire, policy = exchange.wire, exchange.policy
        ceiling = wire.provider_trigger(body) if policy.provider_context == "combine" else None
        return Asked(
            policy, self.model, body, ingested.prefix, items, branch, ingested.remembered, route, wire.name, ceiling
        )

    async def project(self, cut: int, asked: Asked | None = None, compact: bool = True) -> Projected:
        """Project the request (or `asked`) with the active checkpoint; start a compaction when
        the plan asks for one (`compact`), and wait for it (bounded) when the request could not
        be served without dropping history, or when it is the branch's first rewrite
        (`CompactionPlan.wait`)."""
        exchange = self.exchange
        services, ingested, policy = exchange.services, exchange.ingested, exchange.policy
        identity, projector = ingested.identity, services.projector
        checkpoint = await services.store.active_checkpoint(identity.branch_id)
        asked = await self.remembering(asked or self.asked(self.body), checkpoint)
        items, branch, route = asked.items, identity.branch_id, exchange.route
        projected = projector.project_request(asked, checkpoint, cut)
        plan = projected.projection.record.compaction
        if plan is None or not compact:
            return projected
        extracting = self.memory if self.memory is not None and policy.memory.extraction else None
        mode = policy.summarizer.resolved(litellm=bool(route.upstream.model), extraction=extracting is not None)
        job = CompactionJob(
            tenant=identity.tenant,
            conversation_id=identity.conversation_id,
            branch_id=branch,
            route=route,
            policy=policy,
            model=self.model,
            prefix=ingested.prefix,
            items=items,
            hashes=ingested.hashes,
            plan=plan,
            previous=checkpoint,
            client_auth=self.credentials or {},
            wire=exchange.wire,
            memory=extracting,
            mode=mode,
            shared=services.compactor.shared.get(branch) if mode == "shared" else None,
        )
        task = services.compactor.request(job)
        overflowing = bool(projected.projection.record.pruned_seqs) and policy.on_overflow == "wait"
        if task is None or not (plan.wait or overflowing):
            return projected
        waiting = time.perf_counter()
        try:
            committed = await asyncio.wait_for(asyncio.shield(task), policy.overflow_wait)
        except TimeoutError:
            committed = None
        services.metrics.observe_summary_wait(route.name, committed is not None, time.perf_counter() - waiting)
        if committed is None:
            return projected
        asked = await self.remembering(replace(asked, prefix=ingested.prefix), committed)
        return projector.project_request(asked, committed, cut)

    async def remembering(self, asked: Asked, checkpoint: StoredCheckpoint | None) -> Asked:
        """`asked` with the memory block after its prefix, when the request has one: it is
        projected (counted in the budget, never trimmed) as part of the pinned prefix."""
        self.injected, self.block_tokens = False, 0
        if self.memory is None:
            return asked
        counter = self.exchange.services.projector.counter(self.model)
        block = await self.memory.block(checkpoint, counter.count_text)
        if block is None:
            return asked
        self.injected, self.block_tokens = True, counter.count(block)
        return replace(asked, prefix=[*asked.prefix, block])


def _nothing_to_send(messages: list[Message]) -> BadRequest:
    """A request whose every message is a tool result without the call it answers: the
    projection drops such results (`policies/groups.py`), which would leave an empty request."""
    ids = ", ".join(repr(m.get("tool_call_id")) for m in messages if m.get("role") == "tool")
    return BadRequest(
        f"Nothing to send: the request's only messages are tool results ({ids}) without the assistant "
        "message whose tool call they answer. Send the history with that assistant message before them.",
        param="messages",
    )
