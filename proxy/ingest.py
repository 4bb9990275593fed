"""Identify the conversation a request continues and append what is new (DESIGN steps 2-3).

This step owns "which known history is this": the per-process history cache says which leading
messages an earlier accepted request already had (they were validated, hashed and token-counted
then), the wire validates only the rest, the identity chain (`identify`, pure) is extended over the
new messages, and the store resolves the conversation and appends. Resolution:

* explicit `X-Conversation-Id`: the tenant's conversation with that id (internal or the client's
  own), created on first use; the longest stored prefix inside it decides the branch.
* implicit: the tenant's longest stored prefix decides. A match of a single message counts only
  when the system prefix is also unchanged (an exact retry of a first turn); otherwise two
  sessions that merely open with the same "hi" would be merged. A branch that is not stamped yet
  has no system prefix to compare: when the request carries an answer after that one message,
  the first turn's answer is most likely being committed (after the client got it, maybe by
  another replica), so the lookup is repeated until the stamp lands (FIRST_ANSWER_WAIT at most)
  and the rules decide then; the answer it carries then matches, and the conversation continues.
* agent session (a configured session header, e.g. Claude Code's `x-claude-code-session-id`, and
  no accepted match): the history decides first, as above. When it matches nothing, the agent
  rebuilt its history, and `proxy.session_start` says where the request starts: the line of the
  compaction call its history continues, or the session's conversation as a new branch forked
  at its start; a side call of the session (other tools or none) resolves as if there were no
  header: its own conversation.
* the agent's own compaction call (`proxy.side_calls`: its summary prompt as the newest user text)
  whose history before that prompt is all stored: a side call of the branch there, purpose
  `client_compaction`. Nothing is appended (neither the prompt nor the summary it gets), so the
  line neither grows nor forks -- also when the prompt came as a second text block of a user
  message that is the branch's head (a turn the user interrupted). The history the agent rebuilds
  from the summary continues the session as its next branch (the rule above), linked to that
  call when it carries the call's recorded summary (`proxy.rebuilt`): forked from the compaction's
  branch before its first event, its first event's `call_id` the compaction call's.

The append is idempotent: re-sent messages whose chain hash is stored only move the position,
and the first new message after a non-head position forks a branch there.

Most requests continue the previous request of their conversation, answered by this process:
the history cache remembers where that answer was stored (`Remembered.head`; where the
request's own last event was, until the answer is stored). When this
request's chain passes through that head -- its hash at the head's index, at least two messages
matched, the named conversation's when one is named -- the new messages are appended there with
`Store.extend` and no lookup, which the store does only when the lookup would have found exactly
that head (still its branch's head, its hash stored nowhere else, the first new hash nowhere).
Otherwise -- another process appended, forked, retracted or deleted meanwhile -- the request is
resolved as above. Example: [u1] answered a1 is stored at seq 2 of branch b; the next request
[u1, a1, u2] has a1's hash at index 1, so u2 goes to seq 3 of b, unless b has moved past seq 2.

What happens to the appended events once the upstream answered (stamped, with the answer, or
retracted) is `proxy.settle`'s.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass

from . import identify, renderings, side_calls, stored_counts
from .errors import BadRequest
from .history_cache import HISTORY_PER_BODY_BYTE, Head, HistoryCache, Remembered
from .protocols.base import Wire
from .renderings import Transient
from .session_start import session_start
from .store.base import HashMatch, NewEvent, Position, Store
from .token_counter import TokenCounter
from .types import Identity, Message

NO_TRANSIENT = Transient((), 0)
"""No part is transient: how a message compares without the rule (`_transient_start`)."""

log = logging.getLogger("ctxproxy")

_EXTERNAL_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,200}$")
FIRST_ANSWER_WAIT = 5.0
"""Seconds a request that answers a first turn not stamped yet waits for that stamp (module docstring):
as long as a SQLite commit waits for another writer's lock."""
FIRST_ANSWER_POLL = 0.02


@dataclass(frozen=True)
class Ingested:
    identity: Identity
    position: Position
    """The last stored event of this request's history (where the response will be appended)."""
    prefix: list[Message]
    history: list[Message]
    hashes: list[str]
    system_hash: str
    known: Remembered | None
    """The remembered history this request starts with (None: nothing of it was remembered)."""
    remembered: Remembered
    """This request's history as remembered for the next one (the wire adds its encodings)."""
    appended: list[str]
    """The chain hashes of the events this request appended (what `reject` retracts)."""
    lookup: str
    """How the position was found: `remembered` (appended at the remembered head, no lookup),
    `stale` (that head was refused, so looked up), `lookup` (no remembered head to continue) or
    `side_call` (an agent's compaction call: `purpose`)."""
    matched_by: tuple[str, str] | None = None
    """`(rule, averted)` when this request's history matched the stored one only through a
    re-rendering rule (`ctxproxy_identity_rules_total`): `rendering` -- a message it carries as
    an answer's text rendering the stored history has as the answer itself (`renderings.rule_of`);
    `transient` -- on a lookup, its first message equals the stored first message only without
    their transient parts (Qwen Code's `--continue`). `averted`: what the message would otherwise
    have done: `conversation` (the history's first message: founded a new conversation) or
    `fork` (forked a branch there). None otherwise; a transient part further down is not told
    apart (a stored message's hash does not say whether it had one)."""
    purpose: str = "main"
    """`main`, or `client_compaction`: the agent's own compaction call, a side call of the branch
    its history continues (`proxy.side_calls`): nothing appended, its answer not stored."""
    continues: str | None = None
    """The compaction call whose summary this rebuilt history opens with (`proxy.rebuilt`): its
    new branch continues the line after that call. None otherwise."""
    counter: TokenCounter | None = None
    """`Arrival.counter`: the answer is stored with its count too (`response_turn`)."""

    @property
    def fork(self) -> str | None:
        """Why this request forked a branch (`ctxproxy_forks_total{cause}`), None when it did not:
        `client_compaction` (an agent's history rebuilt after its recorded compaction call: the
        line's next branch, `proxy.rebuilt`), `start` (a branch from the start: an agent
        session's history rebuilt without a recorded compaction it carries, or a named
        conversation whose first message differs), `answer` (the
        first message that differed is an answer: regenerated, or re-rendered in a way identity
        does not read back) or `edit` (it is the client's own message)."""
        identity = self.identity
        if not identity.forked:
            return None
        if self.continues is not None:
            return "client_compaction"
        if identity.matched == 0:
            return "start"
        return "answer" if self.history[identity.matched].get("role") == "assistant" else "edit"


@dataclass(frozen=True)
class Arrival:
    """A request as it arrives: whose it is (`tenant`), its messages (common model), the
    conversation it names (`explicit`: the client's own id, None: found by its history), the
    size of its body (what its remembered history may cost), its agent session."""

    tenant: str
    messages: list[Message]
    explicit: str | None = None
    body_size: int = 0
    session: identify.Session | None = None
    counter: TokenCounter | None = None
    """The route's counter when the events are stored with its counts (`stored_counts.storing`),
    which a later request whose history no cache holds reads back; None: stored without."""


async def ingest(store: Store, cache: HistoryCache, wire: Wire, arrival: Arrival) -> Ingested:
    """Validate what is new in the arrival's messages, resolve the conversation and append the
    new events."""
    tenant = arrival.tenant
    prefix, history, known, hashes = _read(cache, wire, arrival)
    system_hash = cache.prefix_hash(prefix, known)
    size = HISTORY_PER_BODY_BYTE * arrival.body_size
    remembered = Remembered(history, hashes, size, prefix=prefix, system_hash=system_hash)
    if side_calls.is_compaction_call(history):
        side = await _side_call(store, arrival, system_hash, hashes)
        if side is not None:  # not remembered: the agent's next request carries another history
            position, identity = side
            return Ingested(
                identity,
                position,
                prefix,
                history,
                hashes,
                system_hash,
                known,
                remembered,
                [],
                "side_call",
                purpose=side_calls.PURPOSE,
                counter=arrival.counter,
            )
    head = _continued(known, hashes) or cache.head_for(tenant, history, hashes)
    position, identity, lookup, continues = await _append_request(store, arrival, system_hash, history, hashes, head)
    if hashes:  # until `answer_stored` moves it to the answer (a next request may come first)
        remembered.head = Head(position, hashes[-1], len(hashes))
    cache.remember(tenant, remembered)
    appended = hashes[identity.matched :]
    matched_by = _rendered(history, len(known.hashes) if known else 0, identity.matched)
    if matched_by is None and lookup != "remembered" and identity.matched and cache.transient.patterns:
        matched_by = await _transient_start(store, position.branch_id, history[0])
    parts = (identity, position, prefix, history, hashes, system_hash, known, remembered, appended, lookup)
    return Ingested(*parts, matched_by, continues=continues, counter=arrival.counter)


def _rendered(history: list[Message], start: int, matched: int) -> tuple[str, str] | None:
    """`Ingested.matched_by` for an answer's text rendering: the first matched message from
    `start` (what the remembered history covers matched before) that is such a rendering."""
    for at in range(start, matched):
        if renderings.rendered_answer(history[at]) is not None:
            return "rendering", "conversation" if at == 0 else "fork"
    return None


async def _transient_start(store: Store, branch_id: str, first: Message) -> tuple[str, str] | None:
    """`Ingested.matched_by` for the transient rule at the history's first message: the stored
    first message of the branch's lineage (one read, on lookups only) differs from the request's
    unless transient parts are ignored."""
    if first.get("role") != "user":
        return None
    stored = await store.lineage_events(branch_id, 0, 1)
    if not stored or identify.canonical(stored[0].message, NO_TRANSIENT) == identify.canonical(first, NO_TRANSIENT):
        return None
    return "transient", "conversation"


def _read(
    cache: HistoryCache, wire: Wire, arrival: Arrival
) -> tuple[list[Message], list[Message], Remembered | None, list[str]]:
    """The arrival split into its system prefix and history, the remembered history it starts
    with, and the history's chain hashes; what is new validated (the rest was, when remembered)."""
    messages = arrival.messages
    prefix, history = identify.split_prefix(messages)
    known = cache.lookup(arrival.tenant, history)
    wire.validate(messages, 0, len(prefix))
    wire.validate(messages, len(prefix) + (len(known.messages) if known else 0))
    return prefix, history, known, cache.hashes(arrival.tenant, history, known)


@dataclass(frozen=True)
class Located:
    """Where a request would land, found without storing anything (`locate`): its prefix and
    history as `ingest` splits them, their chain hashes, the remembered history it starts with,
    the branch its stored part is on (None: nothing of it is stored) and how many of its messages
    are stored there (a checkpoint covering more is another history's)."""

    prefix: list[Message]
    history: list[Message]
    hashes: list[str]
    known: Remembered | None
    branch_id: str | None
    matched: int
    conversation_id: str | None = None


async def locate(store: Store, cache: HistoryCache, wire: Wire, arrival: Arrival) -> Located:
    """`ingest`'s resolution, read-only: the stored history the arrival continues, by the same
    rules (explicit id, longest stored prefix with the one-message rule, agent session), with
    nothing appended, forked, created or remembered. A request that would start a conversation,
    or a session's new branch, continues no stored history: branch None."""
    tenant = arrival.tenant
    prefix, history, known, hashes = _read(cache, wire, arrival)
    match: HashMatch | None = None
    if arrival.explicit is not None:
        _check_external(arrival.explicit)
        conversation = await store.find_conversation(tenant, arrival.explicit)
        if conversation is not None:
            match = await store.find_longest(hashes, tenant, conversation.id)
    else:
        match = await store.find_longest(hashes, tenant, None)
        if match is not None and match.count < 2 and match.system_hash != cache.prefix_hash(prefix, known):
            match = None
    if match is None:
        return Located(prefix, history, hashes, known, None, 0)
    position = match.position
    return Located(prefix, history, hashes, known, position.branch_id, position.seq, position.conversation_id)


async def _side_call(
    store: Store, arrival: Arrival, system_hash: str, hashes: list[str]
) -> tuple[Position, Identity] | None:
    """Where an agent's compaction call reads from: the stored event its history before the
    compaction prompt ends with, when all of that history is stored (by the rules of a lookup);
    None otherwise (it is then ingested as any request)."""
    tenant, before = arrival.tenant, hashes[:-1]
    conversation_id = external = None
    if arrival.explicit is not None:
        _check_external(arrival.explicit)
        conversation = await store.find_conversation(tenant, arrival.explicit)
        if conversation is None:
            return None
        conversation_id, external = conversation.id, conversation.external_id
    match = await store.find_longest(before, tenant, conversation_id)
    if match is None or match.count != len(before) or (match.count < 2 and match.system_hash != system_hash):
        return None
    return match.position, _identity(tenant, match.position, match.position, match.count, external, False)


def _continued(known: Remembered | None, hashes: list[str]) -> Head | None:
    """The remembered head this chain passes through with new messages after it (at least two
    matched, so the one-message retry rule never applies), or None."""
    head = known.head if known is not None else None
    if head is None or not 2 <= head.count < len(hashes) or hashes[head.count - 1] != head.chain_hash:
        return None
    return head


async def _append_request(
    store: Store, arrival: Arrival, system_hash: str, history: list[Message], hashes: list[str], head: Head | None
) -> tuple[Position, Identity, str, str | None]:
    """Where the request's events go, how that was found, and the compaction call its rebuilt
    history continues (None: it continues none)."""
    tenant, explicit, session = arrival.tenant, arrival.explicit, arrival.session
    created = False
    lookup = "lookup"
    continues = None
    if explicit is not None:
        _check_external(explicit)
        conversation = await store.find_conversation(tenant, explicit)
        if conversation is None:
            conversation = await store.create_conversation(tenant, explicit)
            created = True
        if head is not None and head.position.conversation_id == conversation.id:
            extended = await _extend(store, arrival, history, hashes, head, conversation.external_id)
            if extended is not None:
                return (*extended, "remembered", None)
            lookup = "stale"
        match = await store.find_longest(hashes, tenant, conversation.id)
        start = match.position if match else Position(conversation.id, conversation.main_branch_id, 0)
        matched = match.count if match else 0
        external = conversation.external_id
    else:
        if head is not None:
            extended = await _extend(store, arrival, history, hashes, head, None)
            if extended is not None:
                return (*extended, "remembered", None)
            lookup = "stale"
        match = await store.find_longest(hashes, tenant, None)
        if match is not None and _answers_unstamped_first(match, history):
            match = await _first_stamped(store, tenant, history, hashes, match)
        if match is not None and (match.count >= 2 or match.system_hash == system_hash):
            start, matched = match.position, match.count
        elif session is not None and (begun := await session_start(store, tenant, session, history)) is not None:
            start, created, continues = begun
            matched = 0
        else:
            conversation = await store.create_conversation(tenant, None)
            start, matched, created = Position(conversation.id, conversation.main_branch_id, 0), 0, True
        external = None
    events = _events(history, hashes, matched, arrival.counter, continues)
    position = await store.append(start, events, None, stamp=False)
    return position, _identity(tenant, start, position, matched, external, created), lookup, continues


def _check_external(explicit: str) -> None:
    if not _EXTERNAL_ID.match(explicit):
        raise BadRequest(
            "The X-Conversation-Id header must be 1-200 characters of letters, digits and ._:@/+=-",
            param="X-Conversation-Id",
        )


def _answers_unstamped_first(match: HashMatch | None, history: list[Message]) -> bool:
    """Only the first message matched, on a branch not stamped yet, and the request carries an
    answer to it: that first turn's answer is most likely being committed right now."""
    return (
        match is not None
        and match.count == 1
        and match.system_hash is None
        and len(history) > 1
        and history[1].get("role") == "assistant"
    )


async def _first_stamped(
    store: Store, tenant: str, history: list[Message], hashes: list[str], match: HashMatch
) -> HashMatch | None:
    """The lookup again until that first turn is stamped (or retracted), at most FIRST_ANSWER_WAIT
    seconds; then the rules decide as ever (a turn that never got its stamp: a new conversation)."""
    log.info(
        "a request answers the first turn of conversation %s before it is stamped: waiting up to %g s",
        match.position.conversation_id,
        FIRST_ANSWER_WAIT,
    )
    deadline = time.monotonic() + FIRST_ANSWER_WAIT
    while time.monotonic() < deadline:
        await asyncio.sleep(FIRST_ANSWER_POLL)
        again = await store.find_longest(hashes, tenant, None)
        if not _answers_unstamped_first(again, history):
            return again
    return match


async def _extend(
    store: Store, arrival: Arrival, history: list[Message], hashes: list[str], head: Head, external: str | None
) -> tuple[Position, Identity] | None:
    """Append after the remembered head without a lookup, when the store confirms it (module docstring)."""
    events = _events(history, hashes, head.count, arrival.counter)
    position = await store.extend(head.position, head.chain_hash, events)
    if position is None:
        return None
    return position, _identity(arrival.tenant, head.position, position, head.count, external, False)


def _identity(
    tenant: str, start: Position, position: Position, matched: int, external: str | None, created: bool
) -> Identity:
    """The identity of a request whose events were appended from `start`, ending at `position`."""
    return Identity(
        tenant=tenant,
        conversation_id=position.conversation_id,
        branch_id=position.branch_id,
        matched=matched,
        external_id=external,
        created=created,
        forked=position.branch_id != start.branch_id,
    )


def _events(
    history: list[Message],
    hashes: list[str],
    matched: int,
    counter: TokenCounter | None,
    continues: str | None = None,
) -> list[NewEvent]:
    """The request's events after the first `matched` (unstamped: stamped once answered), with
    their counts when `counter` is given (the projection then finds them counted); the first one
    names the compaction call whose summary it carries, when it continues one."""
    return [
        NewEvent(
            role=str(m.get("role")),
            message=m,
            chain_hash=h,
            source="request",
            tokens=stored_counts.tokens(counter, m, h),
            call_id=continues if i == 0 else None,
        )
        for i, (m, h) in enumerate(zip(history[matched:], hashes[matched:], strict=True))
    ]
