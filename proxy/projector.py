"""Project a request (DESIGN step 4), the edge: `Projector` feeds the pure `project`.

`policies.projection.project` is the projection itself, a pure function of (prefix, items,
checkpoint, budget, config). This module is everything around it that is not pure: `Projector`
turns the request's history into `Item`s (seq = position on the branch lineage, tokens from a
per-event cache keyed by chain hash, so a request costs counting work only for what is new),
resolves the budget, keeps one `policies.memo.ProjectionCache` per branch (bounded, evicted as
`proxy.eviction` chooses; each cache behind its own lock: a cache is plain mutable state) and calls it through
`Projector.project_request`, which maps `ContextOverflow` to the client's 400.

Budget (`proxy.windows` for the window and the reply reserve): the input the upstream will count
must fit the window less the reply reserve. The pure projection counts with our estimate, so
the budget it gets is in the estimate's units: the largest estimate whose prediction of the
upstream's own count, plus the margin for what is still estimated, fits (`proxy.estimate`).
That assumes the request carries the branch's last bill (its messages start with the last
call's); when the projection turns out not to, it is made again against the budget without it.

Recall: when the request's tools (the body as it goes upstream) hold the route's recall tool,
the projection is told its name (`recall_tool`), so trim markers and the summary block say the
tool can fetch what they stand for; the same tools on every request of a conversation give the
same bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from policies.base import Budget, ContextOverflow, Item
from policies.draft import Inputs
from policies.history_index import SharedPrefix
from policies.memo import ProjectionCache, project_cached
from policies.outcome import Projection
from policies.projection import project
from policies.tokens import encoding_name_for_model

from .catalog import ModelCatalog
from .config import Caches, Route
from .covered import checkpoint_of
from .errors import ContextLengthExceeded
from .estimate import Estimator, Key, Prediction
from .eviction import Eviction
from .history_cache import Remembered
from .policy_settings import Policy
from .protocols import DEFAULT, wire_named
from .protocols.base import Wire
from .store.base import StoredCheckpoint
from .token_counter import TokenCounter
from .types import Json, Message
from .windows import REPLY_PRIMING_TOKENS, Windows


@dataclass(frozen=True)
class Asked:
    """One request as its projection sees it: the policy, the model whose window and tokenizer
    it is budgeted for, its body (tools, max_tokens), the system prefix, the branch's items and
    id, the history cache entry the items came from (`remembered`: its proof of what they share
    with the previous request's spares the memo a walk over them), and the route (None: an
    operator's preview, which predicts nothing)."""

    policy: Policy
    model: str
    body: Json
    prefix: list[Message]
    items: list[Item]
    branch_id: str | None
    remembered: Remembered | None = None
    route: Route | None = None
    wire: str | None = None
    """The API the request came in (a provider's compaction serves its own only); None: any."""
    ceiling: int | None = None
    """The provider's own compaction trigger the projection stays below (`provider_context:
    combine`, `Wire.provider_trigger`); None: only the window bounds it."""


@dataclass(frozen=True)
class Projected:
    """A projection and what the upstream is predicted to count for it (None: no route, as in
    an operator's preview); `limit`: the upstream tokens its input may use; `output`: the reply
    reserve."""

    projection: Projection
    prediction: Prediction | None
    limit: int
    output: int

    def summary(self) -> dict[str, object]:
        """The projection's record as kept with the call, with the prediction and the limit."""
        out: dict[str, object] = self.projection.record.summary_dict()
        out["limit_tokens"] = self.limit
        if self.prediction is not None:
            out.update(self.prediction.summary())
        return out


@dataclass(frozen=True)
class BranchMemo:
    """One branch's `ProjectionCache` and the lock that serializes the calls using it."""

    cache: ProjectionCache
    lock: threading.Lock


class Projector:
    """Per-process token caches, per-branch projection memos, model windows and what each
    upstream is learned to count; no I/O. Each is bounded by `caches` (the config's `caches:`
    section): the branch memos evicted as `proxy.eviction` chooses, the rest least recently used
    first."""

    def __init__(self, catalog: ModelCatalog, caches: Caches | None = None) -> None:
        self.catalog = catalog
        self.caches = caches or Caches()
        self.estimator = Estimator(self.caches.calibrations)
        self.windows = Windows(catalog, self.estimator)
        self._counters: dict[str, TokenCounter] = {}
        self._memos: dict[str, BranchMemo] = {}
        self._memo_order: Eviction[str] = Eviction()
        self._lock = threading.Lock()
        self._memo_hits = self._memo_misses = 0

    def branch_memo(self, branch_id: str | None) -> BranchMemo | None:
        """The branch's memo of derived projection state (indexes, renderings, the previous
        tail): a request that extends the branch's previous request re-derives only what is new."""
        if branch_id is None:
            return None
        with self._lock:
            memo = self._memos.get(branch_id)
            if memo is None:
                self._memo_misses += 1
                cache = ProjectionCache(max_entries=self.caches.projection_memo_entries)
                memo = self._memos[branch_id] = BranchMemo(cache, threading.Lock())
                self._memo_order.touch(branch_id)
                while len(self._memos) > self.caches.projection_branches:
                    victim = self._memo_order.evict(branch_id)
                    if victim is None:
                        break
                    self._memos.pop(victim, None)
            else:
                self._memo_hits += 1
                self._memo_order.hit(branch_id)
            return memo

    def forget(self, branch_id: str) -> None:
        """Drop the branch's memo: the history cache evicted the history whose items it was
        built over (`HistoryCache.on_evicted`), so its next request brings new items and the
        memo could only be rebuilt (`ProjectionCache.index` clears it then). Held on, it kept
        that whole history alive in a memo that could not hit again."""
        with self._lock:
            if self._memos.pop(branch_id, None) is not None:
                self._memo_order.discard(branch_id)

    def counter(self, model: str) -> TokenCounter:
        name = encoding_name_for_model(model)
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = TokenCounter.for_model(model, self.caches.token_counts)
        return counter

    def cache_sizes(self) -> dict[str, int]:
        """Entries held now, by cache (the `ctxproxy_cache_entries` gauge): token counts summed
        over encodings, branch memos, the entries memoized inside them, branches' last bills."""
        with self._lock:
            memos = list(self._memos.values())
        return {
            "token_counts": sum(len(c) for c in list(self._counters.values())),
            "projection_branches": len(memos),
            "projection_memo_entries": sum(len(m.cache.memo) for m in memos),
            **self.estimator.sizes(),
        }

    def cache_lookups(self) -> dict[tuple[str, ...], float]:
        """Lookups so far by (cache, outcome) (`ctxproxy_cache_lookups_total`): token counts
        (summed over encodings) and branch memos (a miss: a branch new to this process, or one
        whose memo was evicted)."""
        counters = list(self._counters.values())
        return {
            ("token_counts", "hit"): sum(c.hits for c in counters),
            ("token_counts", "miss"): sum(c.misses for c in counters),
            ("projection_branches", "hit"): self._memo_hits,
            ("projection_branches", "miss"): self._memo_misses,
        }

    def window(self, policy: Policy, model: str) -> int:
        """The window a route's requests are budgeted against (`Windows.window`)."""
        return self.windows.window(policy, model).tokens

    def budget(
        self,
        policy: Policy,
        model: str,
        body: Json,
        counter: TokenCounter,
        route: Route | None = None,
        branch_id: str | None = None,
        cut: int = 0,
        ceiling: int | None = None,
    ) -> tuple[Budget, int]:
        """The projection's budget in the estimate's units, and the upstream tokens its input
        may use (the window less the reply reserve and `cut`, and below `ceiling`: the
        provider's own compaction trigger under `provider_context: combine`). Without a route,
        the estimate is taken for the upstream's count (an operator's preview, a replay)."""
        key = (route.name, model) if route is not None else None
        window = self.windows.window(policy, model, key).tokens
        output = self.windows.output(policy, model, body, window)
        fixed = fixed_tokens(counter, body)
        limit = max(1, window - output - max(0, cut))
        if ceiling is not None:
            limit = max(1, min(limit, ceiling - 1))
        estimated = limit
        if key is not None:
            estimated = max(1, self.estimator.limit(key, branch_id, fixed, limit, policy.safety_margin))
        name = route.name if route is not None else None
        policy_name = route.policy if route is not None else ""
        budget = Budget(
            context_window=output + estimated,
            max_output_tokens=output,
            fixed_tokens=fixed,
            nominal_input=window - output if ceiling is None else min(window - output, max(1, ceiling - 1)),
            summarizer=self.windows.summarizer_budget(policy, model, name, policy_name, policy.safety_margin),
            summary_max_tokens=self.windows.summary_max_tokens(policy, model, name, policy_name),
        )
        return budget, limit

    def count_request(self, asked: Asked) -> int:
        """ctxproxy's count of the request as the client sent it, for one that is not projected:
        what a projection's record calls `client_tokens` (framing and tools, prefix, history)."""
        counter = self.counter(asked.model)
        prefix = sum(counter.count(message) for message in asked.prefix)
        return fixed_tokens(counter, asked.body) + prefix + sum(item.tokens for item in asked.items)

    def summarizer_budget(self, policy: Policy, model: str, route: Route | None = None) -> Budget:
        """The summarizer's limits in the estimate's units (`Windows.summarizer_budget`)."""
        name, policy_name = (route.name, route.policy) if route is not None else (None, "")
        return self.windows.summarizer_budget(policy, model, name, policy_name, policy.safety_margin)

    def summary_max_tokens(self, policy: Policy, model: str, route: Route | None = None) -> int:
        name, policy_name = (route.name, route.policy) if route is not None else (None, "")
        return self.windows.summary_max_tokens(policy, model, name, policy_name)

    def items(
        self,
        history: list[Message],
        hashes: list[str],
        counter: TokenCounter,
        known: Remembered | None = None,
        remember: Remembered | None = None,
        stored: Mapping[str, int] | None = None,
    ) -> list[Item]:
        """Token-counted items; those of a remembered equal prefix are reused as they are (a C
        copy of the list, then the new ones). `remember` keeps the list and, as
        `remember.shared`, the proof that it starts with the remembered list's very objects.
        `stored`: counts by chain hash read with the events (`proxy.stored_counts`), taken as
        they are."""
        name = counter.encoding.name
        reused = known.items.get(name, []) if known is not None else []
        shared = min(len(reused), len(history))
        items = reused[:shared]
        if stored:
            items.extend(
                Item(
                    seq=i + 1, message=history[i], tokens=stored.get(hashes[i]) or counter.count(history[i], hashes[i])
                )
                for i in range(shared, len(history))
            )
        else:
            items.extend(
                Item(seq=i + 1, message=history[i], tokens=counter.count(history[i], hashes[i]))
                for i in range(shared, len(history))
            )
        if remember is not None:
            remember.items[name] = items
            if shared:
                remember.shared[name] = SharedPrefix(reused, shared)
        return items

    def project_request(self, asked: Asked, checkpoint: StoredCheckpoint | None, cut: int = 0) -> Projected:
        """The projection of one request: budget resolved, the stored checkpoint applied when it
        fits the items, the branch's memo used (same result as the pure `project`), and the
        upstream's count of it predicted. `cut`: upstream tokens to keep free beyond the margin
        (an overflow's measured overshoot, on a retry)."""
        policy, model, body, prefix, items = asked.policy, asked.model, asked.body, asked.prefix, asked.items
        branch_id, remembered, route = asked.branch_id, asked.remembered, asked.route
        counter = self.counter(model)
        name = counter.encoding.name
        shared = remembered.shared.get(name) if remembered is not None and remembered.items.get(name) is items else None
        active = (
            checkpoint_of(checkpoint, asked.wire)
            if checkpoint is not None and checkpoint.covered_through_seq <= len(items)
            else None
        )
        memo = self.branch_memo(branch_id)
        tool = recall_tool(policy, body, wire_named(asked.wire))

        def project_within(budget: Budget) -> Projection:
            try:
                if memo is None:
                    return project(prefix, items, active, budget, policy, counter, recall_tool=tool)
                with memo.lock:
                    inputs = Inputs(prefix, items, active, budget, policy, counter, tool)
                    return project_cached(memo.cache, inputs, shared)
            except ContextOverflow as exc:
                window = self.windows.window(policy, model, (route.name, model) if route else None).tokens
                raise ContextLengthExceeded(overflow_message(exc, window), param="messages") from None

        ceiling = asked.ceiling
        budget, limit = self.budget(policy, model, body, counter, route, branch_id, cut, ceiling)
        projection = project_within(budget)
        if route is None:
            return Projected(projection, None, limit, budget.max_output_tokens)
        key: Key = (route.name, model)
        margin = policy.safety_margin

        def predict(projection: Projection) -> Prediction:
            sent = projection.record.sent_tokens
            return self.estimator.predict(key, branch_id, projection.messages, sent, budget.fixed_tokens, margin)

        prediction = predict(projection)
        if prediction.total > limit and prediction.carried == 0 and branch_id is not None:
            # budgeted as carrying the branch's last bill, but it does not: budget it whole
            whole, limit = self.budget(policy, model, body, counter, route, None, cut, ceiling)
            if whole.context_window != budget.context_window:
                budget = whole
                projection = project_within(budget)
                prediction = predict(projection)
        return Projected(projection, prediction, limit, budget.max_output_tokens)


def fixed_tokens(counter: TokenCounter, body: Json) -> int:
    """The tokens of a request beyond its messages: the reply's priming and the tools."""
    tools = body.get("tools")
    return REPLY_PRIMING_TOKENS + (
        counter.count_tools(tools, body.get("tool_choice")) if isinstance(tools, list) else 0
    )


def recall_tool(policy: Policy, body: Json, wire: Wire | None = None) -> str | None:
    """The recall tool's name when the request's tools hold it (as `wire` declares tools; the
    default wire's shape when unknown), else None."""
    name = policy.recall.tool_name
    if policy.recall.enabled is False:
        return None
    wire = wire or DEFAULT
    return name if any(wire.tool_name(tool) == name for tool in wire.declared_tools(body)) else None


def overflow_message(exc: ContextOverflow, window: int | None = None) -> str:
    """OpenAI's wording first (clients match on it), then what the proxy tried. `window` is the
    model's window, which the message names: the budget's may be smaller, in the estimate's
    units after the margin for the upstream's own count."""
    requested = exc.needed_tokens + exc.max_output_tokens
    window = window or exc.context_window
    calibrated = (
        f" The input budget was {exc.input_budget} tokens by ctxproxy's estimate, after the margin for"
        " the upstream's own count."
        if exc.context_window < window
        else ""
    )
    return (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{requested} tokens ({exc.needed_tokens} in the messages, {exc.max_output_tokens} in the completion). "
        "ctxproxy could not make it fit even after summarizing and dropping all unpinned history and cutting the "
        "latest tool results to their markers: the system prompt, tools, pinned messages and the newest user "
        "message alone are too large. Shorten the latest message, lower max_tokens, or start a new "
        f"conversation.{calibrated} ({exc.detail or 'no further detail'})"
    )
