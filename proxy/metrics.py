"""Prometheus metrics, in process, rendered by hand in text exposition format 0.0.4.

A call's metrics are updated once, where its record is completed (`Recorder.finish` in
record.py); the others where their event happens (a compaction's outcome, a request's identity, a
recall round, an overflow, a store passthrough). Each update is a few dict operations on the event loop's thread, so
there are no locks. Summary calls (purpose `summary`) count in the token and cost counters (they
are spent money) but not in the request counters and histograms, which describe client requests.

    ctxproxy_requests_total{route,wire,status}           status: complete | partial | error
    ctxproxy_upstream_errors_total{route,kind}           kind: connect | timeout | broken | truncated
                                                         | malformed | http_<status>
    ctxproxy_request_duration_seconds{route,wire}        histogram, whole exchange
    ctxproxy_ttfb_seconds{route,wire}                    histogram, until the first byte
    ctxproxy_tokens_total{route,kind}                    kind: input | output | cache_read | cache_write
                                                         | reasoning (input = the total input)
    ctxproxy_tokens_saved_total{route}                   client payload tokens minus tokens sent
    ctxproxy_compactions_total{result}                   committed | failed | discarded | skipped |
                                                         native_fallback (a provider compaction not made)
                                                         (skipped: another replica holds the lease)
    ctxproxy_store_passthrough_total{route}              requests relayed unrewritten, unrecorded,
                                                         because the store failed (store_failure)
    ctxproxy_refused_total{account,limit}                requests refused by a budget or rate limit:
                                                         account key | tenant, limit e.g. usd_per_day
    ctxproxy_mode_requests_total{route,mode}             requests that asked not to be rewritten
                                                         (X-Ctxproxy-Mode: passthrough | observe)
    ctxproxy_identity_total{how}                         how a request's place in its history was found:
                                                         remembered (appended at the branch head the
                                                         previous answer left, no lookup) | stale (that
                                                         head had moved: looked up) | lookup |
                                                         side_call (an agent's own compaction call:
                                                         nothing appended, `proxy.side_calls`)
    ctxproxy_forks_total{cause}                          requests that forked a branch, by the first
                                                         message that differed from the stored one:
                                                         edit (the client's own message) | answer (an
                                                         answer regenerated, or re-rendered in a way
                                                         identity does not read back) |
                                                         client_compaction (an agent's history
                                                         rebuilt after its recorded compaction
                                                         call: the line's next branch, proxy/
                                                         rebuilt.py) | start (a branch from the
                                                         start: an agent session's history rebuilt
                                                         without a recorded summary, or a named
                                                         conversation whose first message differs)
    ctxproxy_identity_rules_total{rule,averted}          requests that matched their stored history
                                                         only through a re-rendering rule (proxy/
                                                         renderings.py): rule rendering (an answer's
                                                         text rendering) | transient (the first
                                                         message without its transient parts, on a
                                                         lookup); averted conversation (it would have
                                                         founded a new one) | fork
    ctxproxy_cost_usd_total{route}
    ctxproxy_cache_entries{cache}                        gauge, read at render time from the
                                                         per-process caches (`Metrics.watch`)
    ctxproxy_cache_lookups_total{cache,outcome}          outcome: hit | miss, read at render time
                                                         from the same caches: a rising miss share
                                                         means they are smaller than the
                                                         conversations in use (each miss derives
                                                         again what the cache held)
    ctxproxy_compactions_running                         gauge: this process's compaction jobs
                                                         still running (`Metrics.watch_compactions`)
    ctxproxy_upstream_overflows_total{route,purpose,outcome}
                                                         context overflows the upstream answered:
                                                         purpose main | summary; outcome retried
                                                         (projected smaller, sent again) | relayed
    ctxproxy_pruned_events_total{route}                  events dropped from main requests by
                                                         `prune_groups` (each request that dropped
                                                         any carries a marker naming them)
    ctxproxy_shadow_pairs_total{route,model,kind,outcome}
                                                         shadow pairs (proxy/shadow/): kind trimmed |
                                                         summarized | pruned | recall | memory | other
                                                         (a pair counts under each of its kinds) | aa
                                                         (the A/A floor: an unrewritten request sent
                                                         twice); outcome equivalent | diverged | failed.
                                                         Divergence rate: diverged / (equivalent + diverged)
    ctxproxy_shadow_skipped_total{route,reason}          sampled requests without a shadow: window (the
                                                         client's payload exceeds the model's window) |
                                                         busy | interval | cap (the daily USD cap)
    ctxproxy_recall_rejected{route,model}                gauge: 1 for each route and model whose
                                                         upstream rejected the recall tool, until
                                                         the mark expires (`Metrics.watch_rejected`)
    ctxproxy_summary_wait_seconds{route,outcome}         histogram: requests that waited for their
                                                         branch's compaction before being sent
                                                         (`Outgoing.project`); outcome committed (sent
                                                         with the new summary) | not_committed (timed
                                                         out or failed: sent pruned)
    ctxproxy_event_loop_lag_seconds                      histogram: how late the event loop ran a
                                                         timer that was due (`proxy/loop_lag.py`,
                                                         sampled ten times a second)
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping

from .store.base import CallRecord

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# LLM calls take from tens of milliseconds (cache hits, errors) to minutes (long generations).
BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# A healthy loop runs a due timer within a millisecond; tens of milliseconds stall every request.
LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
_TOKEN_KINDS = (
    ("input", "input_total"),
    ("output", "output"),
    ("cache_read", "cache_read"),
    ("cache_write", "cache_write"),
    ("reasoning", "reasoning"),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: tuple[str, ...], values: Iterable[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


class Counter:
    def __init__(self, name: str, help: str, labels: tuple[str, ...]) -> None:
        self.name, self.help, self.label_names = name, help, labels
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        for labels, value in sorted(self.values.items()):
            lines.append(f"{self.name}{_labels(self.label_names, labels)} {_number(value)}")
        return lines


class Histogram:
    def __init__(self, name: str, help: str, labels: tuple[str, ...], buckets: tuple[float, ...] = BUCKETS) -> None:
        self.name, self.help, self.label_names, self.buckets = name, help, labels, buckets
        # Per label set: per-bucket (non-cumulative) counts with a final +Inf slot, sum, count.
        self.values: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        entry = self.values.get(labels)
        if entry is None:
            entry = self.values[labels] = ([0] * (len(self.buckets) + 1), [0.0, 0.0])
        entry[0][bisect_left(self.buckets, value)] += 1
        entry[1][0] += value
        entry[1][1] += 1

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for labels, (counts, (total, count)) in sorted(self.values.items()):
            running = 0
            for bound, n in zip((*self.buckets, float("inf")), counts, strict=True):
                running += n
                le = 'le="+Inf"' if bound == float("inf") else f'le="{_number(bound)}"'
                lines.append(f"{self.name}_bucket{_labels(self.label_names, labels, le)} {running}")
            lines.append(f"{self.name}_sum{_labels(self.label_names, labels)} {_number(total)}")
            lines.append(f"{self.name}_count{_labels(self.label_names, labels)} {_number(count)}")
        return lines


class Readings:
    """Values read when rendered, from callables returning {label values: number}: gauges, or
    counters a cache keeps itself (`kind`)."""

    def __init__(self, name: str, help: str, labels: tuple[str, ...], kind: str = "gauge") -> None:
        self.name, self.help, self.labels, self.kind = name, help, labels, kind
        self.sources: list[Callable[[], Mapping[tuple[str, ...], float]]] = []

    def render(self) -> list[str]:
        values: dict[tuple[str, ...], float] = {}
        for source in self.sources:
            values.update(source())
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for key, value in sorted(values.items()):
            lines.append(f"{self.name}{_labels(self.labels, key)} {_number(value)}")
        return lines


class Gauge:
    """One unlabelled value, read when rendered (0 while nothing is watched)."""

    def __init__(self, name: str, help: str) -> None:
        self.name, self.help = name, help
        self.source: Callable[[], float] = lambda: 0

    def render(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge", f"{self.name} {_number(self.source())}"]


class Metrics:
    def __init__(self) -> None:
        self.requests = Counter(
            "ctxproxy_requests_total", "Proxied model requests by outcome.", ("route", "wire", "status")
        )
        self.upstream_errors = Counter(
            "ctxproxy_upstream_errors_total", "Upstream failures by kind.", ("route", "kind")
        )
        self.duration = Histogram(
            "ctxproxy_request_duration_seconds", "Time from request to the end of the answer.", ("route", "wire")
        )
        self.ttfb = Histogram(
            "ctxproxy_ttfb_seconds", "Time from request to the upstream's first byte.", ("route", "wire")
        )
        self.tokens = Counter(
            "ctxproxy_tokens_total", "Tokens billed by upstreams (main and summary calls).", ("route", "kind")
        )
        self.tokens_saved = Counter(
            "ctxproxy_tokens_saved_total", "Tokens of the clients' payloads that rewriting did not send.", ("route",)
        )
        self.compactions = Counter("ctxproxy_compactions_total", "Compaction jobs by result.", ("result",))
        for result in ("committed", "failed", "discarded", "skipped", "native_fallback"):
            self.compactions.inc((result,), 0)
        self.cost = Counter(
            "ctxproxy_cost_usd_total", "Cost in USD at litellm's prices (known prices only).", ("route",)
        )
        self.recall = Counter(
            "ctxproxy_recall_total",
            "Recall detours: answers consumed by the recall tool (round), upstreams that rejected it (tool_rejected).",
            ("route", "outcome"),
        )
        self.store_passthrough = Counter(
            "ctxproxy_store_passthrough_total",
            "Requests relayed unrewritten and unrecorded because the store failed.",
            ("route",),
        )
        self.refused = Counter(
            "ctxproxy_refused_total",
            "Requests refused by a client key's or tenant's budget or rate limit (proxy/quota.py).",
            ("account", "limit"),
        )
        self.identity = Counter(
            "ctxproxy_identity_total", "Requests by how their place in the stored history was found.", ("how",)
        )
        self.forks = Counter(
            "ctxproxy_forks_total", "Requests that forked a branch, by the first message that differed.", ("cause",)
        )
        self.identity_rules = Counter(
            "ctxproxy_identity_rules_total",
            "Requests that matched their stored history only through a re-rendering rule.",
            ("rule", "averted"),
        )
        self.caches = Readings("ctxproxy_cache_entries", "Entries held by each per-process cache.", ("cache",))
        self.cache_lookups = Readings(
            "ctxproxy_cache_lookups_total",
            "Lookups in each per-process cache, by outcome (a miss derives again what the cache would hold).",
            ("cache", "outcome"),
            "counter",
        )
        self.compactions_running = Gauge("ctxproxy_compactions_running", "Compaction jobs this process is running now.")
        self.overflows = Counter(
            "ctxproxy_upstream_overflows_total",
            "Context overflows the upstream answered, by call purpose and what ctxproxy did (retried, relayed).",
            ("route", "purpose", "outcome"),
        )
        self.pruned = Counter(
            "ctxproxy_pruned_events_total", "Events dropped from main requests to fit (each marked).", ("route",)
        )
        self.modes = Counter(
            "ctxproxy_mode_requests_total",
            "Requests sent as the client sent them at its asking (X-Ctxproxy-Mode), by mode.",
            ("route", "mode"),
        )
        self.shadow_pairs = Counter(
            "ctxproxy_shadow_pairs_total",
            "Shadow pairs by rewrite kind (aa: the A/A floor) and outcome (equivalent, diverged, failed).",
            ("route", "model", "kind", "outcome"),
        )
        self.shadow_skipped = Counter(
            "ctxproxy_shadow_skipped_total", "Sampled requests that got no shadow call, by reason.", ("route", "reason")
        )
        self.rejected = Readings(
            "ctxproxy_recall_rejected",
            "Routes and models not offered the recall tool (rejected; expires).",
            ("route", "model"),
        )

        self.summary_waits = Histogram(
            "ctxproxy_summary_wait_seconds",
            "Requests that waited for their branch's compaction before being sent, by outcome.",
            ("route", "outcome"),
        )
        self.loop_lag = Histogram(
            "ctxproxy_event_loop_lag_seconds", "How late the event loop ran a timer that was due.", (), LAG_BUCKETS
        )

    def watch(
        self, sizes: Callable[[], Mapping[str, float]], lookups: Callable[[], Mapping[tuple[str, ...], float]]
    ) -> None:
        """On every scrape, render `sizes()` ({cache name: entries}) as `ctxproxy_cache_entries`
        and `lookups()` ({(cache name, "hit" | "miss"): count}) as `ctxproxy_cache_lookups_total`."""
        self.caches.sources.append(lambda: {(name,): n for name, n in sizes().items()})
        self.cache_lookups.sources.append(lookups)

    def watch_compactions(self, running: Callable[[], int]) -> None:
        """Render `running()` as `ctxproxy_compactions_running` on every scrape."""
        self.compactions_running.source = running

    def observe_call(self, call: CallRecord, wire: str, error_kind: str | None = None) -> None:
        route = call.route
        if error_kind:
            self.upstream_errors.inc((route, error_kind))
        usage = call.usage
        for kind, field in _TOKEN_KINDS:
            value = usage.get(field)
            if value:
                self.tokens.inc((route, kind), value)
        if call.cost_usd:
            self.cost.inc((route,), call.cost_usd)
        if call.purpose != "main":
            return
        self.requests.inc((route, wire, call.status))
        if call.latency_ms is not None:
            self.duration.observe((route, wire), call.latency_ms / 1000)
        if call.ttfb_ms is not None:
            self.ttfb.observe((route, wire), call.ttfb_ms / 1000)
        projection = call.projection or {}
        client, sent = projection.get("client_tokens"), projection.get("sent_tokens")
        if isinstance(client, int) and isinstance(sent, int) and client > sent:
            self.tokens_saved.inc((route,), client - sent)
        pruned = projection.get("pruned_seqs")
        if pruned:
            self.pruned.inc((route,), sum(end - start + 1 for start, end in pruned))
        mode = projection.get("mode")
        if isinstance(mode, str):
            self.modes.inc((route, mode))

    def watch_rejected(self, pairs: Callable[[], Iterable[tuple[str, str]]]) -> None:
        """Render `pairs()` ((route, model) not offered the recall tool) on every scrape."""
        self.rejected.sources.append(lambda: {pair: 1 for pair in pairs()})

    def observe_overflow(self, route: str, purpose: str, outcome: str) -> None:
        self.overflows.inc((route, purpose, outcome))

    def observe_compaction(self, result: str) -> None:
        self.compactions.inc((result,))

    def observe_summary_wait(self, route: str, committed: bool, seconds: float) -> None:
        self.summary_waits.observe((route, "committed" if committed else "not_committed"), seconds)

    def observe_recall(self, route: str, outcome: str) -> None:
        self.recall.inc((route, outcome))

    def observe_shadow(self, route: str, model: str, kinds: list[str], outcome: str) -> None:
        for kind in kinds:
            self.shadow_pairs.inc((route, model, kind, outcome))

    def observe_shadow_skipped(self, route: str, reason: str) -> None:
        self.shadow_skipped.inc((route, reason))

    def observe_store_passthrough(self, route: str) -> None:
        self.store_passthrough.inc((route,))

    def observe_refused(self, account: str, limit: str) -> None:
        self.refused.inc((account, limit))

    def observe_identity(self, how: str, fork: str | None = None, matched_by: tuple[str, str] | None = None) -> None:
        self.identity.inc((how,))
        if fork is not None:
            self.forks.inc((fork,))
        if matched_by is not None:
            self.identity_rules.inc(matched_by)

    def render(self) -> bytes:
        lines: list[str] = []
        for metric in (
            self.requests,
            self.upstream_errors,
            self.duration,
            self.ttfb,
            self.tokens,
            self.tokens_saved,
            self.compactions,
            self.cost,
            self.recall,
            self.store_passthrough,
            self.refused,
            self.identity,
            self.forks,
            self.identity_rules,
            self.caches,
            self.cache_lookups,
            self.compactions_running,
            self.overflows,
            self.pruned,
            self.modes,
            self.shadow_pairs,
            self.shadow_skipped,
            self.rejected,
            self.summary_waits,
            self.loop_lag,
        ):
            lines.extend(metric.render())
        return ("\n".join(lines) + "\n").encode()
