"""Settle what a request appended once its upstream answered (DESIGN step 3, after the call).

Rejected requests leave no trace (a rejected first request, not even its conversation): the
request's new events are appended unstamped by `proxy.ingest` (the branch's and conversation's
`updated_at` and system hash stay as they were), and `response_turn` stamps them once the upstream
accepted the request (2xx), with the answer when there is one (the recorder writes it with the call
record, `Store.record_answered`). When the upstream (or the proxy itself) rejects the request
instead, `reject` retracts those events -- and the branch they forked, if any -- so identity
matching, projections and the admin API's default branch are exactly as before the request. A turn
the client saw answered, even partly (a stream cut after its first byte), is never retracted: its
upstream status was 2xx. The retraction is a compare-and-set: if anything was appended after the
events or forked inside them meanwhile (a concurrent request built on them), they stay.
"""

from __future__ import annotations

from . import identify, stored_counts
from .history_cache import Head
from .ingest import Ingested
from .store.base import NewEvent, Position, ResponseTurn, Store
from .types import Message


def response_turn(ingested: Ingested, message: Message | None, call_id: str, main: bool = True) -> ResponseTurn:
    """The upstream accepted the request: the turn that stamps its events (and, for the agent's
    own calls, `main`, the system prefix it was called with: a client's compaction call carries
    none, and the branch's prefix is the agent's) and appends the answer, when there is a whole one."""
    if ingested.purpose != "main":  # a side call: its answer is no turn of the branch
        return ResponseTurn(ingested.position, None, None)
    answer = None
    if message is not None:
        parent = ingested.hashes[-1] if ingested.hashes else identify.root_hash(ingested.identity.tenant)
        chain_hash = identify.message_hash(parent, message)
        tokens = stored_counts.answer_tokens(ingested.counter, message)
        answer = NewEvent("assistant", message, chain_hash, "response", tokens, call_id)
    return ResponseTurn(ingested.position, ingested.system_hash if main else None, answer)


def answer_stored(ingested: Ingested, turn: ResponseTurn, position: Position | None) -> None:
    """`turn` was stored, its answer at `position` (`Store.record_answered`; None: no answer
    event): the conversation's next request continues there. Without one the head stays where
    `ingest` left it, the request's own last event (the stamp moves nothing)."""
    if position is not None and turn.answer is not None:
        ingested.remembered.head = Head(position, turn.answer.chain_hash, len(ingested.hashes) + 1)
        if turn.answer.tokens is not None:
            ingested.remembered.answer = (turn.answer.chain_hash, turn.answer.tokens)


async def reject(store: Store, ingested: Ingested) -> bool:
    """The request was rejected: retract the events it appended (the module docstring). A
    request that founded its conversation leaves no conversation either: the SDKs retry a failed
    first request, and each attempt would leave one more empty conversation. True when the
    conversation was deleted (its calls' records then belong to none)."""
    undone = await store.retract(ingested.position, ingested.appended)
    identity = ingested.identity
    if not (undone and identity.created and ingested.position.seq == len(ingested.appended)):
        return False
    # Checked and deleted in one step: another request may continue it meanwhile, and calls of
    # this request already recorded (a consumed recall round) keep it for the ledger.
    return await store.delete_conversation(identity.conversation_id, only_if_empty=True)
