"""Project a request (DESIGN step 4), the edge: `Projector` feeds the pure `project`.

`policies.projection.project` is the projection itself, a pure function of (prefix, items,
checkpoint, budget, config). This module is everything around it that is not pure: `Projector`
turns the request's history into `Item`s (seq = position on the branch lineage, tokens from a
per-event cache keyed by chain hash, so a request costs counting work only for what is new),
resolves the budget, keeps one `policies.memo.ProjectionCache` per branch (bounded, evicted as
`proxy.eviction` chooses; each cache behind its own lock: a cache is plain mutable state) and calls it through
`Projector.project_request`, which maps `ContextOverflow` to the client's 400.

Budget: the window is the policy's `context_window`, else litellm's model map, and the output
reserve is the request's `max_completion_tokens`/`max_tokens`, else the policy's
`max_output_tokens`, else the model's max output capped at a quarter of the window. The estimate
is calibrated with the last real usage on the branch: if the upstream billed 8% more input than
we counted for the previous call, the input budget shrinks by 8% (clamped), and the factor is
dropped when a new checkpoint changes what is sent (seed 000).

Recall: when the request's tools (the body as it goes upstream) hold the route's recall tool,
the projection is told its name (`recall_tool`), so trim markers and the summary block say the
tool can fetch what they stand for; the same tools on every request of a conversation give the
same bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from policies.base import Budget, Checkpoint, ContextOverflow, Item, Projection
from policies.history import SharedPrefix
from policies.memo import ProjectionCache, project_cached
from policies.projection import project
from policies.tokens import encoding_name_for_model

from .catalog import ModelCatalog
from .config import Caches, Policy
from .errors import ContextLengthExceeded
from .eviction import Eviction
from .history_cache import Remembered
from .store.base import StoredCheckpoint
from .token_counter import TokenCounter
from .types import Json, Message

REPLY_PRIMING_TOKENS = 3
DEFAULT_WINDOW = 128_000


@dataclass(frozen=True)
class Calibration:
    generation: int
    factor: float


@dataclass(frozen=True)
class BranchMemo:
    """One branch's `ProjectionCache` and the lock that serializes the calls using it."""

    cache: ProjectionCache
    lock: threading.Lock


class Projector:
    """Per-process token caches, per-branch projection memos, model metadata and usage
    calibration; no I/O. Each is bounded by `caches` (the config's `caches:` section): the
    branch memos evicted as `proxy.eviction` chooses, the rest least recently used first."""

    def __init__(self, catalog: ModelCatalog, caches: Caches | None = None) -> None:
        self.catalog = catalog
        self.caches = caches or Caches()
        self._counters: dict[str, TokenCounter] = {}
        self._calibration: OrderedDict[str, Calibration] = OrderedDict()
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

    def counter(self, model: str) -> TokenCounter:
        name = encoding_name_for_model(model)
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = TokenCounter.for_model(model, self.caches.token_counts)
        return counter

    def cache_sizes(self) -> dict[str, int]:
        """Entries held now, by cache (the `ctxproxy_cache_entries` gauge): token counts summed
        over encodings, branch memos, the entries memoized inside them, usage calibrations."""
        with self._lock:
            memos = list(self._memos.values())
            calibrations = len(self._calibration)
        return {
            "token_counts": sum(len(c) for c in list(self._counters.values())),
            "projection_branches": len(memos),
            "projection_memo_entries": sum(len(m.cache.memo) for m in memos),
            "calibrations": calibrations,
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
        """The configured window: the policy's, else litellm's model map, else the default."""
        info = self.catalog.info(model)
        return policy.context_window or (info.context_window if info else None) or DEFAULT_WINDOW

    def budget(
        self, policy: Policy, model: str, body: Json, counter: TokenCounter, branch_id: str | None, generation: int
    ) -> Budget:
        info = self.catalog.info(model)
        window = self.window(policy, model)
        requested = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
        if isinstance(requested, int) and not isinstance(requested, bool) and requested > 0:
            output = requested
        elif policy.max_output_tokens:
            output = policy.max_output_tokens
        else:
            model_max = info.max_output_tokens if info and info.max_output_tokens else window // 4
            output = min(model_max, window // 4)
        if output >= window:
            raise ContextLengthExceeded(
                f"max_tokens ({output:,}) leaves no room for input in this model's {window:,}-token window.",
                param="max_tokens",
            )
        tools = body.get("tools")
        fixed = REPLY_PRIMING_TOKENS + (
            counter.count_tools(tools, body.get("tool_choice")) if isinstance(tools, list) else 0
        )
        factor = self.calibration(branch_id, generation)
        if factor > 1.0:
            input_budget = int((window - output) / factor)
            window = output + input_budget
        summarizer = self.summarizer_budget(policy, model)
        return Budget(
            context_window=window,
            max_output_tokens=output,
            fixed_tokens=fixed,
            summarizer=summarizer,
            summary_max_tokens=self.summary_max_tokens(policy, model),
        )

    def summarizer_budget(self, policy: Policy, model: str) -> Budget:
        """The summarizer model's limits: `summarizer.model`, else the route's model; its window
        from `summarizer.context_window`, else litellm's map (else the route's window when the
        summarizer is the route's model); its reply reserve from `summarizer.max_output_tokens`,
        else `summarizer.max_tokens` capped at the model's max output and a quarter of the window."""
        settings = policy.summarizer
        name = settings.model or model
        info = self.catalog.info(name)
        window = settings.context_window or (
            self.window(policy, name) if settings.model is None else (info.context_window if info else None)
        )
        window = window or DEFAULT_WINDOW
        output = settings.max_output_tokens
        if output is None:
            model_max = info.max_output_tokens if info and info.max_output_tokens else settings.max_tokens
            output = min(settings.max_tokens, model_max, window // 4)
        if output >= window:  # a `summarizer.context_window` below the reserve: keep room for input
            output = window // 4
        return Budget(context_window=window, max_output_tokens=output, fixed_tokens=REPLY_PRIMING_TOKENS)

    def summary_max_tokens(self, policy: Policy, model: str) -> int:
        """The longest summary accepted: `summarizer.summary_max_tokens`, else a tenth of the
        route's window (a modest share of its input budget, at least 256); never more than the
        summarizer's reply reserve."""
        reserve = self.summarizer_budget(policy, model).max_output_tokens
        cap = policy.summarizer.summary_max_tokens or max(256, self.window(policy, model) // 10)
        return min(cap, reserve)

    def calibration(self, branch_id: str | None, generation: int) -> float:
        if branch_id is None:
            return 1.0
        with self._lock:
            entry = self._calibration.get(branch_id)
        if entry is None or entry.generation != generation:
            return 1.0
        return entry.factor

    def calibrate(self, branch_id: str, generation: int, estimated: int, billed: int | None) -> None:
        """Remember how far the estimate was from what the upstream billed for this branch."""
        if billed is None or estimated <= 0:
            return
        factor = min(1.5, max(1.0, billed / estimated))
        with self._lock:
            self._calibration[branch_id] = Calibration(generation, factor)
            self._calibration.move_to_end(branch_id)
            while len(self._calibration) > self.caches.calibrations:
                self._calibration.popitem(last=False)

    def items(
        self,
        history: list[Message],
        hashes: list[str],
        counter: TokenCounter,
        known: Remembered | None = None,
        remember: Remembered | None = None,
    ) -> list[Item]:
        """Token-counted items; those of a remembered equal prefix are reused as they are (a C
        copy of the list, then the new ones). `remember` keeps the list and, as
        `remember.shared`, the proof that it starts with the remembered list's very objects."""
        name = counter.encoding.name
        reused = known.items.get(name, []) if known is not None else []
        shared = min(len(reused), len(history))
        items = reused[:shared]
        items.extend(
            Item(seq=i + 1, message=history[i], tokens=counter.count(history[i], hashes[i]))
            for i in range(shared, len(history))
        )
        if remember is not None:
            remember.items[name] = items
            if shared:
                remember.shared[name] = SharedPrefix(reused, shared)
        return items

    def project_request(
        self,
        policy: Policy,
        model: str,
        body: Json,
        prefix: list[Message],
        items: list[Item],
        checkpoint: StoredCheckpoint | None,
        branch_id: str | None,
        remembered: Remembered | None = None,
    ) -> Projection:
        """The projection of one request: budget resolved, the stored checkpoint applied when it
        fits the items, the branch's memo used (same result as the pure `project`). `remembered`:
        the request's history cache entry, when `items` are the ones `items()` kept in it (its
        proof of what they share with the previous request's spares the memo a walk over them)."""
        counter = self.counter(model)
        name = counter.encoding.name
        shared = remembered.shared.get(name) if remembered is not None and remembered.items.get(name) is items else None
        generation = checkpoint.generation if checkpoint else 0
        budget = self.budget(policy, model, body, counter, branch_id, generation)
        active = (
            Checkpoint(checkpoint.generation, checkpoint.covered_through_seq, checkpoint.summary, checkpoint.tokens)
            if checkpoint is not None and checkpoint.covered_through_seq <= len(items)
            else None
        )
        memo = self.branch_memo(branch_id)
        tool = recall_tool(policy, body)
        try:
            if memo is None:
                return project(prefix, items, active, budget, policy, counter, recall_tool=tool)
            with memo.lock:
                return project_cached(
                    memo.cache, prefix, items, active, budget, policy, counter, recall_tool=tool, shared=shared
                )
        except ContextOverflow as exc:
            raise ContextLengthExceeded(overflow_message(exc, self.window(policy, model)), param="messages") from None


def recall_tool(policy: Policy, body: Json) -> str | None:
    """The recall tool's name when the request's tools hold it (in any wire's tool shape:
    `{"function": {"name"}}` or a top-level `name`), else None."""
    name = policy.recall.tool_name
    tools = body.get("tools")
    if policy.recall.enabled is False or not isinstance(tools, list):
        return None
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        if tool.get("name") == name or (isinstance(function, dict) and function.get("name") == name):
            return name
    return None


def overflow_message(exc: ContextOverflow, window: int | None = None) -> str:
    """OpenAI's wording first (clients match on it), then what the proxy tried. `window` is the
    configured window, which the message names: the budget's may be smaller, shrunk by the usage
    calibration (a 16,000-token window read 13,766 once the upstream had billed 16% more)."""
    requested = exc.needed_tokens + exc.max_output_tokens
    window = window or exc.context_window
    calibrated = (
        f" The input budget was {exc.input_budget} tokens after calibrating the estimate with the upstream's"
        " billed usage."
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
