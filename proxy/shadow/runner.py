"""Shadow calls: the client's own request sent again, unrewritten, after its answer is complete.

`Shadows` is built once by the app's lifespan, which drains it on shutdown. `chat.handle` asks it
for a `Sample` of each request once the request is on its way upstream (only a sampled request of a
policy with `shadow:` on gets one: `pairs.sampled`); when the request's call is recorded complete,
`start` checks, in process and at once, that the client's payload fits the model's real window
(`shadow.context_window`, else litellm's map, else the policy's window: a rewrite that made a
request fit has no unrewritten twin to compare with), that no shadow call of the policy is in flight
and that `min_interval_s` has passed, then leaves the rest to a background task, never on the
client's path: the daily cap, summed from the ledger's shadow calls of the policy's routes since UTC
midnight (so it holds across replicas), then one non-streamed call to the same upstream with the
same headers, recorded as a call of purpose `shadow` (in the ledger like any call) that carries the
pair in its `projection["shadow"]`: the call it shadows (`of`), the kinds or the A/A control, the
outcome (`equivalent`, `diverged`, `failed`), the difference (`equivalence`) and what the rewrite
left out (`pairs.removed`). The shadow's answer goes nowhere else: not to the client, not to the
history, not to the calibration of estimates. A failure is recorded, logged, counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from .. import codec, record
from ..config import Config, Route
from ..errors import ProxyError
from ..metrics import Metrics
from ..policy_settings import Policy
from ..projector import Projector
from ..protocols.base import Wire
from ..record import Recorder
from ..store.base import CallRecord, Store, UsageQuery
from ..types import Json, Message
from ..upstream.base import Hop
from ..windows import DEFAULT_WINDOW
from . import pairs
from .equivalence import compare, step_of

log = logging.getLogger("ctxproxy")

LEDGER_SECONDS = 30.0
"""How long one read of the ledger's shadow spend of a policy is reused (plus what this process
spent since): the cap costs a ledger read per policy per half minute, not one per shadow call,
and other replicas' spend is seen within that time."""


class Sent(Protocol):
    """What the request sent upstream (`proxy.outgoing.Outgoing`): read when its call ends, after
    any attempt an overflow made it send again."""

    messages: list[Message]
    sent: list[Message]
    injected: bool


@dataclass
class Sample:
    """A sampled request: where its twin goes and what it compares with."""

    policy: Policy
    route: Route
    wire: Wire
    model: str
    """the model the window and prices are looked up for (the provider model of a litellm route)"""
    body: Json
    """the client's request (its prompt-cache key included), before any tool was added"""
    headers: dict[str, str]
    history: Sequence[Message]
    first_seq: int
    """the seq of `history`'s first event"""
    outgoing: Sent
    tools: tuple[bool, bool]
    """whether the request was offered the recall tool, the memory tool"""
    redact: Callable[[bytes], bytes]
    """an answer's bytes without any secret (the operator's keys, the caller's own)"""


class Shadows:
    def __init__(
        self, config: Config, store: Store, upstream: Hop, recorder: Recorder, projector: Projector, metrics: Metrics
    ) -> None:
        self.config, self.store, self.upstream = config, store, upstream
        self.recorder, self.projector, self.metrics = recorder, projector, metrics
        self._tasks: set[asyncio.Task[None]] = set()
        self._busy: set[str] = set()
        self._last: dict[str, float] = {}
        self._spent: dict[str, tuple[str, float, float]] = {}
        """per policy: the UTC day, when the ledger was read (monotonic), the USD spent since midnight"""
        self._closing = False

    def wants(self, policy_name: str, policy: Policy, conversation_id: str, hashes: Sequence[str]) -> bool:
        """Whether the request is in the policy's sample (cheap: a hash)."""
        settings = policy.shadow
        return (
            settings.enabled
            and bool(hashes)
            and not self._closing
            and pairs.sampled(settings.rate, policy_name, conversation_id, hashes[-1])
        )

    def start(self, sample: Sample, call: CallRecord) -> None:
        """After `call` (the request's answered call) is recorded: start its shadow in the
        background when the window, the policy's in-flight shadow and its interval allow."""
        if call.status != "complete" or call.purpose != "main" or self._closing:
            return
        name, route = sample.route.policy, call.route
        if not self._fits(sample, call):
            self.metrics.observe_shadow_skipped(route, "window")
            return
        if name in self._busy:
            self.metrics.observe_shadow_skipped(route, "busy")
            return
        now = time.monotonic()
        last = self._last.get(name)
        if last is not None and now - last < sample.policy.shadow.min_interval_s:
            self.metrics.observe_shadow_skipped(route, "interval")
            return
        self._busy.add(name)
        self._last[name] = now
        task = asyncio.create_task(self._run(sample, call), name=f"shadow {call.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _fits(self, sample: Sample, call: CallRecord) -> bool:
        client = (call.projection or {}).get("client_tokens")
        if not isinstance(client, int):
            return False
        info = self.projector.catalog.info(sample.model)
        known = info.context_window if info else None
        window = sample.policy.shadow.context_window or known or sample.policy.context_window or DEFAULT_WINDOW
        try:
            reserve = self.projector.windows.output(sample.policy, sample.model, sample.body, window)
        except ProxyError:
            return False
        return client + reserve <= window

    async def _run(self, sample: Sample, call: CallRecord) -> None:
        try:
            if await self._spent_today(sample.route.policy) >= sample.policy.shadow.max_usd_per_day:
                self.metrics.observe_shadow_skipped(call.route, "cap")
                return
            await self._pair(sample, call)
        except Exception:  # a background task: nothing may reach the client, everything is logged
            log.exception("shadow of call %s failed", call.id)
        finally:
            self._busy.discard(sample.route.policy)

    async def _spent_today(self, policy_name: str) -> float:
        """USD the policy's shadow calls cost since UTC midnight, from the ledger (every replica's),
        read at most every `LEDGER_SECONDS`."""
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        day, now = midnight.date().isoformat(), time.monotonic()
        cached = self._spent.get(policy_name)
        if cached is not None and cached[0] == day and now - cached[1] < LEDGER_SECONDS:
            return cached[2]
        routes = {r.name for r in self.config.routes if r.policy == policy_name}
        cells = await self.store.usage_cells(UsageQuery(since=midnight.timestamp(), group_by="route"))
        spent = sum(
            float(cell.sums.get("cost_usd") or 0.0) for cell in cells if cell.purpose == "shadow" and cell.key in routes
        )
        self._spent[policy_name] = (day, now, spent)
        return spent

    def _spend(self, policy_name: str, cost: float | None) -> None:
        """A shadow call of the policy cost `cost`: counted before the ledger is read again."""
        cached = self._spent.get(policy_name)
        if cached is not None and cost:
            self._spent[policy_name] = (cached[0], cached[1], cached[2] + cost)

    async def _pair(self, sample: Sample, call: CallRecord) -> None:
        wire = sample.wire
        shadow = self.recorder.follow(call, "shadow")
        shadow.stream = False
        payload = codec.dumps(wire.unstreamed(sample.body))
        t0 = time.monotonic()
        kind: str | None
        try:
            path = wire.upstream_path_for(sample.model, False)
            answer = await self.upstream.send(sample.route, "POST", path, payload, sample.headers, wire, False)
            record.arrived(shadow, answer, t0)
            try:
                data = await answer.read()
            finally:
                answer.close()
            if answer.status >= 400:
                data = sample.redact(data)
            kind = record.answered(shadow, wire, answer.status, data, t0)
        except ProxyError as exc:
            record.failed(shadow, exc, t0)
            kind = record.error_kind(exc)
        shadow.projection = {"shadow": self._described(sample, call, shadow)}
        outcome = shadow.projection["shadow"]["outcome"]
        await self.recorder.finish(shadow, wire, kind)
        self._spend(sample.route.policy, shadow.cost_usd)
        kinds = shadow.projection["shadow"]["kinds"] or [pairs.CONTROL]
        self.metrics.observe_shadow(call.route, call.model or "", kinds, outcome)

    def _described(self, sample: Sample, call: CallRecord, shadow: CallRecord) -> dict[str, Any]:
        """The pair as stored with the shadow's record."""
        outgoing = sample.outgoing
        rewritten = outgoing.sent is not outgoing.messages or outgoing.injected
        recall, memory = sample.tools
        kinds = pairs.kinds_of(call.projection, recall, memory or outgoing.injected, rewritten)
        described: dict[str, Any] = {"of": call.id, "control": not kinds, "kinds": kinds}
        described["client_tokens"] = (call.projection or {}).get("client_tokens")
        described["sent_tokens"] = (call.projection or {}).get("sent_tokens")
        if kinds:
            described["removed"] = pairs.removed(sample.history, sample.first_seq, outgoing.sent)
        if shadow.status != "complete":
            described["outcome"] = "failed"
            return described
        client, twin = step_of(call.response, call.finish_reason), step_of(shadow.response, shadow.finish_reason)
        verdict = compare(client, twin)
        described["outcome"] = "equivalent" if verdict.equivalent else "diverged"
        described["difference"] = verdict.difference
        described["steps"] = {"client": client.to_dict(), "shadow": twin.to_dict()}
        return described

    async def drain(self, timeout: float) -> None:
        """On shutdown: start no new shadow; let those in flight end and be recorded, cancel what
        is left after `timeout` (a call cut off is logged, not recorded)."""
        self._closing = True
        tasks = list(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
