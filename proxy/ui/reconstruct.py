"""What a past call sent upstream, rebuilt from the stored log: the inspector's diff and its
"where the tokens went" table.

Problem: a call record keeps only the compact projection record (`ProjectionRecord.summary_dict`:
counts and ranges, so records do not grow with the history), not the messages sent. But the
projection is a pure function of the stored log (DESIGN invariant: same log + same config =
byte-identical projection), so the messages can be rebuilt: the call's history is its branch's
lineage up to `head_seq`, which the record determines (every seq is covered, sent, pruned or an
orphan, and pinned seqs are both covered and sent), the prefix and tools are the call's stored
blobs, the checkpoint is the one of the record's generation.

The record stays the truth: covered, pinned and pruned seqs come from it; the rebuilt projection
adds what the record only counts (which results were trimmed, their text as sent, the summary
block). `verified` says whether the rebuilt projection's record equals the stored one; it can
differ when the live call's budget did (a client `max_tokens`); the rebuild uses the input budget
the record names, which the live call set from what the upstream is learned to count.

Example: record {covered_through_seq: 30, pinned_seqs: [1], sent: 11, pruned_seqs: [], orphans:
0} -> head_seq 40; events 2..30 are "summarized", 1 "pinned", 31..40 "raw" or "trimmed".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from policies.base import ContextOverflow, Item
from policies.draft import Inputs
from policies.memo import ProjectionCache, project_cached
from policies.outcome import Projection

from ..covered import checkpoint_of, readable
from ..projector import recall_tool
from ..protocols import DEFAULT, WIRES, wire_named
from ..protocols.base import Wire
from ..recall.tool import with_tool
from ..services import Services
from ..store.base import Branch, CallRecord, StoredCheckpoint, StoredEvent
from ..types import Message
from .data import ALL, Detail

COMPARED = ("sent", "trimmed", "trimmed_chars", "pruned_seqs", "covered_through_seq", "pinned_seqs", "sent_tokens")
"""The stored record's fields the rebuilt projection must reproduce to count as verified."""


def _expand(ranges: Iterable[Sequence[int]]) -> set[int]:
    return {seq for start, end in ranges for seq in range(start, end + 1)}


def head_seq(record: dict[str, Any] | None) -> int:
    """The last event seq the call's history had: covered + sent (less the pinned, which are
    covered too) + pruned + orphans."""
    record = record or {}
    pruned = len(_expand(record.get("pruned_seqs") or []))
    pinned = len(record.get("pinned_seqs") or [])
    covered = int(record.get("covered_through_seq") or 0)
    return covered + int(record.get("sent") or 0) - pinned + pruned + int(record.get("orphans") or 0)


def projected(call: CallRecord) -> bool:
    """Whether the call carries a projection record (main and recall calls that were rewritten;
    summary calls have none of their own)."""
    return bool(call.projection) and call.projection.get("sent") is not None  # type: ignore[union-attr]


def shown_record(call: CallRecord) -> dict[str, Any] | None:
    """The projection record a call's diff shows: the one it was sent with, or for a call sent
    as the client sent it in `observe` mode (`proxy/modes.py`) the one ctxproxy would have sent;
    None when there is neither."""
    record = call.projection or {}
    observed = record.get("observed")
    if isinstance(observed, dict) and observed.get("sent") is not None:
        return observed
    return record if record.get("sent") is not None else None


@dataclass(frozen=True)
class Row:
    """One line of the diff: an event (or the prefix, or the summary block) with its form."""

    form: str  # prefix | raw | trimmed | pinned | summarized | pruned | orphan | summary
    seq: int | None
    client: Mapping[str, Any] | None
    sent: Mapping[str, Any] | None
    client_tokens: int
    sent_tokens: int
    note: str = ""


@dataclass
class CallView:
    call: CallRecord
    head_seq: int
    rows: list[Row]
    checkpoint: StoredCheckpoint | None
    verified: bool
    mismatches: list[str] = field(default_factory=list)
    tools_tokens: int = 0
    """What the call's tool definitions took (they are no row: sent whole on every call)."""

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows:
            out[row.form] = out.get(row.form, 0) + 1
        return out


@dataclass
class BranchLog:
    """A branch's full lineage, its items (token-counted) and a projection memo for its calls."""

    events: list[StoredEvent]
    items: list[Item]
    cache: ProjectionCache = field(default_factory=ProjectionCache)


@dataclass(frozen=True)
class Stored:
    """What one call is rebuilt from: its record, its branch's log up to the record's head, its
    prefix blob, its checkpoint, and the counter of the model its route sends to."""

    record: dict[str, Any]
    log: BranchLog
    head: int
    prefix: list[Message]
    checkpoint: StoredCheckpoint | None
    model: str
    counter: Any

    @property
    def items(self) -> list[Item]:
        return self.log.items[: self.head]

    @property
    def events(self) -> list[StoredEvent]:
        return self.log.events[: self.head]


class Rebuilder:
    """Rebuilds calls of one conversation; loads each branch's log once."""

    def __init__(self, services: Services, detail: Detail) -> None:
        self.services = services
        self.detail = detail
        self.logs: dict[tuple[str, str], BranchLog] = {}
        self.blobs: dict[str, Any] = {}

    async def _blob(self, digest: str | None) -> Any:
        if not digest:
            return None
        if digest not in self.blobs:
            raw = await self.services.store.get_blob(digest)
            self.blobs[digest] = json.loads(raw) if raw else None
        return self.blobs[digest]

    async def _log(self, branch_id: str, model: str) -> BranchLog:
        counter = self.services.projector.counter(model)
        key = (branch_id, counter.encoding.name)
        if key not in self.logs:
            events = await self.services.store.lineage_events(branch_id, 0, ALL)
            items = self.services.projector.items([e.message for e in events], [e.chain_hash for e in events], counter)
            self.logs[key] = BranchLog(events, items)
        return self.logs[key]

    def _checkpoint(self, call: CallRecord, record: dict[str, Any]) -> StoredCheckpoint | None:
        generation = record.get("checkpoint_generation")
        if generation is None:
            return None
        lineage = [b.id for b in self.detail.lineage(self.detail.branch(call.branch_id))]
        found = [
            c
            for c in self.detail.checkpoints
            if c.generation == generation
            and c.covered_through_seq >= int(record.get("covered_through_seq") or 0)
            and c.branch_id in lineage
            and c.status != "failed"
        ]
        found.sort(key=lambda c: lineage.index(c.branch_id))
        return found[0] if found else None

    async def rebuild(self, call: CallRecord) -> CallView | None:
        """The call's diff, or None for a call that was not projected (no record, no branch)."""
        record = shown_record(call)
        if record is None or not call.branch_id or not call.model:
            return None
        config = self.services.config
        wire = wire_named(call.wire)
        route = next((r for r in config.routes if r.name == call.route), None)
        route = route or config.route_for((wire or DEFAULT).path, call.model)
        model = (route.upstream.model if route else None) or call.model
        log = await self._log(call.branch_id, model)
        head = min(head_seq(record), len(log.items))
        prefix = await self._blob(call.system_hash) or []
        tools = await self._blob(call.tools_hash)
        checkpoint = self._checkpoint(call, record)
        stored = Stored(record, log, head, prefix, checkpoint, model, self.services.projector.counter(model))
        projection = None
        mismatches = ["no route serves this call's model any more"] if route is None else []
        if route is not None:
            policy = config.policy_for(route)
            bodies: list[dict[str, Any]] = [{"model": model, **({"tools": tools} if tools else {})}]
            if policy.recall.enabled:  # the call may have carried the recall tool, in its wire's shape
                bodies += [with_tool(bodies[0], w, policy.recall) for w in _wires(wire)]
            for body in bodies:
                projection, mismatches = self._project(policy, body, stored, wire)
                if not mismatches:
                    break
        rows = _rows(stored, projection)
        verified = projection is not None and not mismatches
        tools_tokens = stored.counter.count_tools(tools, None) if isinstance(tools, list) else 0
        return CallView(call, head, rows, checkpoint, verified, mismatches, tools_tokens)

    def _project(
        self, policy: Any, body: dict[str, Any], stored: Stored, wire: Wire | None
    ) -> tuple[Projection | None, list[str]]:
        record, checkpoint = stored.record, stored.checkpoint
        budget, _ = self.services.projector.budget(policy, stored.model, body, stored.counter)
        recorded = record.get("input_budget")
        if isinstance(recorded, int) and recorded > 0:  # the live call's, in the estimate's units
            budget = replace(budget, context_window=budget.max_output_tokens + recorded)
        active = checkpoint_of(checkpoint, None)
        if active is not None:
            active = replace(active, covered_through_seq=int(record["covered_through_seq"]))
        try:
            inputs = Inputs(
                stored.prefix, stored.items, active, budget, policy, stored.counter, recall_tool(policy, body, wire)
            )
            projection = project_cached(stored.log.cache, inputs)
        except ContextOverflow as exc:
            return None, [f"the rebuilt projection overflows: {exc}"]
        rebuilt = json.loads(json.dumps(projection.record.summary_dict()))
        kept = json.loads(json.dumps(record))
        return projection, [
            f"{name}: stored {kept.get(name)!r}, rebuilt {rebuilt.get(name)!r}"
            for name in COMPARED
            if kept.get(name) != rebuilt.get(name)
        ]


def _wires(wire: Wire | None) -> list[Wire]:
    """The wires whose shape of the recall tool the call may have carried: the one it recorded
    (`CallRecord.wire`), or for a record written before wires were recorded each wire's, one
    shape per distinct definition."""
    if wire is not None:
        return [wire]
    return list({w.name: w for w in WIRES}.values())


def _rows(stored: Stored, projection: Projection | None) -> list[Row]:
    record, items, prefix, checkpoint, counter = (
        stored.record,
        stored.items,
        stored.prefix,
        stored.checkpoint,
        stored.counter,
    )
    covered = int(record.get("covered_through_seq") or 0)
    pinned = set(record.get("pinned_seqs") or [])
    pruned = _expand(record.get("pruned_seqs") or [])
    sent_ids = {id(m) for m in projection.messages} if projection else set()
    sent_seqs = set(projection.record.sent_seqs) if projection else None
    trimmed = {e.seq: e for e in projection.record.trimmed} if projection else {}
    originals = {id(i.message) for i in items}
    rewritten = [m for m in projection.messages if id(m) not in originals] if projection else []
    results = {m.get("tool_call_id"): m for m in rewritten if m.get("role") == "tool"}
    rows = [Row("prefix", None, m, m, counter(m), counter(m)) for m in prefix]
    summary_at = None
    for event, item in zip(stored.events, items, strict=True):
        seq, message = event.seq, item.message
        if seq <= covered and seq not in pinned:
            rows.append(
                Row(
                    "summarized",
                    seq,
                    message,
                    None,
                    item.tokens,
                    0,
                    f"in summary generation {record.get('checkpoint_generation')}",
                )
            )
            summary_at = len(rows)
        elif seq in pruned:
            rows.append(Row("pruned", seq, message, None, item.tokens, 0, "dropped whole by prune_groups"))
        elif seq in trimmed:
            entry = trimmed[seq]
            sent = results.get(entry.tool_call_id)
            note = f"{entry.how}: {entry.original_chars:,} chars, {entry.kept_chars:,} kept"
            rows.append(Row("trimmed", seq, message, sent, item.tokens, counter(sent) if sent else 0, note))
        elif seq in pinned:
            rows.append(
                Row("pinned", seq, message, message, item.tokens, item.tokens, "covered by the summary, kept verbatim")
            )
        elif sent_seqs is not None and seq not in sent_seqs and id(message) not in sent_ids:
            rows.append(Row("orphan", seq, message, None, item.tokens, 0, "tool result without its call: not sent"))
        else:
            rows.append(Row("raw", seq, message, message, item.tokens, item.tokens))
    if checkpoint is not None and covered:
        block = next((m for m in rewritten if "<conversation_summary" in str(m.get("content", ""))), None)
        text = block if block is not None else {"role": "user", "content": readable(checkpoint)}
        summary = Row("summary", None, None, text, 0, counter(text), f"checkpoint generation {checkpoint.generation}")
        rows.insert(_after_head(rows, summary_at), summary)
    return rows


def _after_head(rows: list[Row], last_summarized: int | None) -> int:
    """The summary block follows the pinned head (DESIGN step 4): after the last covered row."""
    return last_summarized if last_summarized is not None else len(rows)


@dataclass
class Consumer:
    """One stored event's cumulative share of what the conversation's calls sent upstream; or
    (`kind` not `event`, no seq or branch) the part of every call that is no event: the system
    prefix, the tool definitions, the summary block."""

    seq: int | None
    branch_id: str | None
    role: str
    preview: str
    tokens: int = 0
    cost_usd: float | None = None
    """its share of the calls' known costs; None while no call it was in has a known cost"""
    forms: dict[str, int] = field(default_factory=dict)
    kind: str = "event"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "seq": self.seq,
            "branch_id": self.branch_id,
            "role": self.role,
            "preview": self.preview,
            "sent_tokens": self.tokens,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 10),
            "calls": sum(self.forms.get(f, 0) for f in ("raw", "trimmed", "pinned", "prefix", "summary")),
            "forms": dict(sorted(self.forms.items())),
        }


async def consumers(services: Services, detail: Detail, limit_calls: int) -> tuple[list[Consumer], int]:
    """Every event's upstream tokens summed over the newest `limit_calls` projected main calls
    (and their share of each call's cost), with the system prefix, the tool definitions and the
    summary block as lines of their own, largest first; and how many calls were read. An event is
    its branch's own (`_owner`): a fork's copy of its parent's events counts with the parent's."""
    rebuilder = Rebuilder(services, detail)
    calls = [c for c in detail.calls if c.purpose == "main" and projected(c)][-limit_calls:]
    out: dict[tuple[str, int], Consumer] = {}
    for call in calls:
        view = await rebuilder.rebuild(call)
        if view is None:
            continue
        sent_total = sum(row.sent_tokens for row in view.rows) + view.tools_tokens or 1
        chain = detail.lineage(detail.branch(call.branch_id))
        # per call: each consumer once, with its form and tokens (a prefix of several messages is one line)
        parts: dict[tuple[str, int], tuple[str, int]] = {}
        for row in view.rows:
            if row.seq is None:  # the prefix's messages, the summary block: no event of their own
                kind = SHARED[row.form]
                key = (kind, 0)
                out.setdefault(key, Consumer(None, None, ROLES[kind], kind, kind=kind))
            elif row.client is not None:
                root = _owner(chain, row.seq)
                key = (root, row.seq)
                if key not in out:
                    out[key] = Consumer(row.seq, root, str(row.client.get("role")), preview(row.client))
            else:
                continue
            form, tokens = parts.get(key, (row.form, 0))
            parts[key] = (form, tokens + row.sent_tokens)
        if view.tools_tokens:
            out.setdefault((TOOLS, 0), Consumer(None, None, "tools", TOOLS, kind=TOOLS))
            parts[(TOOLS, 0)] = ("raw", view.tools_tokens)
        for key, (form, tokens) in parts.items():
            consumer = out[key]
            consumer.forms[form] = consumer.forms.get(form, 0) + 1
            consumer.tokens += tokens
            if call.cost_usd is not None:
                consumer.cost_usd = (consumer.cost_usd or 0.0) + call.cost_usd * tokens / sent_total
    ranked = sorted(out.values(), key=lambda c: (-c.tokens, c.seq or 0))
    return ranked, len(calls)


TOOLS = "tool definitions"
SHARED = {"prefix": "system prefix", "summary": "summary block"}
"""The rows without an event (`Row.form`) and the line each is counted in."""
ROLES = {"system prefix": "system", "summary block": "summary"}


def _owner(chain: list[Branch], seq: int) -> str:
    """The branch whose own event `seq` is on a lineage (`Detail.lineage`, the branch first, the
    root last): forks share their parent's events up to the fork point."""
    for branch in chain:
        if branch.parent_id is None or seq > branch.fork_seq:
            return branch.id
    return chain[-1].id


def preview(message: Mapping[str, Any], chars: int = 120) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = str(content or "")
    if not text and message.get("tool_calls"):
        text = ", ".join(
            f"{c.get('function', {}).get('name')}({c.get('function', {}).get('arguments', '')})"
            for c in message.get("tool_calls") or []
        )
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1] + "…"
