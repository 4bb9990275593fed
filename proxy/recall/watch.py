"""A relayed stream that is still watched for a recall call after its text.

`read.read_stream` starts the relay at the stream's first text. From there this response relays
the answer as it comes and scans each event's bytes for the wire's call markers; only an event
that may start a call has the answer reassembled to look (every event before it read then), and
once the answer calls any tool, its events are held until its end. Then either nothing called
recall and the held events follow, or recall was called: the held events are dropped, the answer
is recorded as a `recall` call, the follow-up goes upstream (`Rounds.next_answer`), and its events
continue the client's stream (`Wire.continuation`), watched the same way, while rounds remain.
The relay's own observer sees exactly what the client gets, so the stored answer and the main call
record are the client's view.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Protocol

from policies.text import tool_calls

from .. import record
from ..errors import UpstreamError
from ..exchange import Exchange
from ..protocols.base import Continue, StreamObserver, Wire
from ..relay import StreamOutcome
from ..sse import SseEvent, SseSplitter
from ..types import Json, Message
from ..upstream.base import UpstreamResponse
from .toolbox import Toolbox


def may_call(wire: Wire, event: SseEvent) -> bool:
    """Whether the event may start a tool call (`Wire.call_markers`): only after one is the
    message reassembled to look for a call. A loop, not `any` over a generator: this runs for
    every event of a watched answer, and the generator cost more than the byte searches."""
    return _holds(event.raw, wire.call_markers)


def may_write(wire: Wire, event: SseEvent) -> bool:
    """Whether the event may carry text (`Wire.text_markers`)."""
    return _holds(event.raw, wire.text_markers)


def _holds(raw: bytes, markers: tuple[bytes, ...]) -> bool:
    for marker in markers:
        if marker in raw:
            return True
    return False


class Rounds(Protocol):
    tools: Toolbox

    def more(self) -> bool:
        """Whether another recall round may run."""

    async def next_answer(self, message: Message) -> UpstreamResponse:
        """Answer `message`'s recall calls and send the follow-up; raises ProxyError."""


@dataclasses.dataclass
class Answer:
    """The upstream answer being read: its pieces, its own observer, when it was sent."""

    upstream: UpstreamResponse
    pieces: AsyncIterator[bytes]
    observer: StreamObserver
    splitter: SseSplitter
    sent_at: float
    first_byte_at: float | None = None


class Watched(UpstreamResponse):
    def __init__(
        self,
        exchange: Exchange,
        body: Json,
        rounds: Rounds,
        answer: Answer,
        head: list[SseEvent],
        pending: list[SseEvent],
    ) -> None:
        first = answer.upstream
        super().__init__(first.status, first.headers, first.content_type, first.request_id, first.started)
        self.exchange, self.wire, self.body, self.call = exchange, exchange.wire, body, exchange.call
        self.rounds, self.tools = rounds, rounds.tools
        self.answer, self.head, self.pending = answer, head, pending
        """`head` was observed and is relayed as it is; `pending` arrived with it, not yet observed."""

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        raise NotImplementedError("a watched stream is read by its events")

    def close(self) -> None:
        self.answer.upstream.close()

    async def reads(self, splitter: SseSplitter) -> AsyncIterator[list[SseEvent]]:
        # One list per upstream read: the events it released, as this watch split and parsed them
        # (the relay does not split them again); what a continuation rewrote, split by `splitter`.
        keep = self.wire.splices_relayed
        # what the client got, for the follow-up to continue from (when the wire's continuation reads it)
        relayed: list[bytes] = [event.raw for event in self.head] if keep else []
        yield self.head  # at once: the first text goes out before the rest of its read is read
        batch: list[SseEvent] = []
        shift: Continue | None = None
        pending = self.pending
        while True:
            answer, held, calling = self.answer, [], False
            unseen: list[SseEvent] = []
            """Events the answer's observer has not read: it reads them when one may start a call."""
            async for events in _reads(answer, pending):
                for event in events:
                    if calling:
                        answer.observer(event)
                        held.append(event)
                        continue
                    unseen.append(event)
                    if may_call(self.wire, event):
                        calling = _calls(answer.observer, unseen)
                        unseen = []
                        if calling:
                            held.append(event)
                            continue
                    out = event.raw if shift is None else shift(event)
                    if out:
                        if keep:
                            relayed.append(out)
                        _add(batch, splitter, event, out)
                if batch:
                    yield batch
                    batch = []
            pending = []
            if not calling:  # nothing held, and the answer's observer has nothing to tell
                rest = answer.splitter.rest()
                if rest:
                    yield splitter.feed(rest)
                return
            message = answer.observer.message()
            recalled = self.tools.calls(message)
            if message is None or not (answer.observer.done and recalled and self.rounds.more()):
                for event in held:
                    out = event.raw if shift is None else shift(event)
                    if out:
                        _add(batch, splitter, event, out)
                batch += splitter.feed(answer.splitter.rest())
                if batch:
                    yield batch
                return
            await self._consumed(answer)
            answer.upstream.close()
            sent = time.monotonic()
            upstream = await self.rounds.next_answer(message)
            self.answer = await _opened(self.wire, self.body, upstream, sent)
            shift = self.wire.continuation(relayed)

    async def _consumed(self, answer: Answer) -> None:
        """Record the answer that called recall after its text went out; mark the main record."""
        consumed = self.exchange.services.recorder.follow(self.call, "recall")
        outcome = StreamOutcome(first_byte_at=answer.first_byte_at, ended_at=time.monotonic(), upstream_finished=True)
        kind = record.streamed(consumed, self.wire, answer.upstream, answer.observer, outcome, answer.sent_at)
        await self.exchange.finish(consumed, kind)
        # the rounds of this request so far: the ones before the relay started, plus this one
        before = int((self.call.projection or {}).get("recall_rounds") or 0)
        record.noted(self.call, recall_rounds=before + 1, recall_spliced=True)


def _add(batch: list[SseEvent], splitter: SseSplitter, event: SseEvent, out: bytes) -> None:
    """`out`, what goes to the client for `event`, onto `batch` as the relay's events: `event`
    itself when it goes unchanged and `splitter` holds no rest (splitting its bytes again would
    give it back), else `out` split by `splitter`."""
    if out is event.raw and not splitter.rest():
        batch.append(event)
    else:
        batch += splitter.feed(out)


def _calls(observer: StreamObserver, unseen: list[SseEvent]) -> bool:
    """Whether the answer calls a tool, once `observer` read the events it had not."""
    for event in unseen:
        observer(event)
    return bool(tool_calls(observer.message() or {}))


async def _reads(answer: Answer, pending: list[SseEvent]) -> AsyncIterator[list[SseEvent]]:
    """The answer's events, a list per upstream read, `pending` first."""
    if pending:
        yield pending
    async for piece in answer.pieces:
        answer.first_byte_at = answer.first_byte_at or time.monotonic()
        yield answer.splitter.feed(piece)


async def _opened(wire: Wire, body: Json, upstream: UpstreamResponse, sent: float) -> Answer:
    """The follow-up as an answer to watch; an upstream that did not answer with a stream is a
    failure of the client's stream (the relay sends one error event in the API's vocabulary)."""
    if upstream.status != 200 or not wire.is_stream(upstream.content_type):
        try:
            data = await upstream.read()
        finally:
            upstream.close()
        detail = data[:500].decode("utf-8", errors="replace")
        raise UpstreamError(f"The upstream answered the recall follow-up with HTTP {upstream.status}: {detail}")
    return Answer(upstream, aiter(upstream.pieces()), wire.observer(body), SseSplitter(), sent)
