"""Money: what a replayed run costs at list prices, with each provider's prompt-caching rules.

Problem: tokens saved are not money saved. A provider bills a request's input in three kinds --
read from its prompt cache (cheap), written to it (Anthropic: dearer than plain input) and plain
-- and a proxy that rewrites the prefix every turn can save tokens yet cost more. This module
prices a sequence of requests, each given as its blocks (a prefix hash and the block's tokens),
so the savings phase can compare the bill with ctxproxy against the bill without it.

Rules (the providers' documentation; prices below):
- OpenAI (automatic prefix caching): a prompt of >= 1,024 tokens is cached; the cached part of a
  later prompt is its longest prefix equal to a prefix of an earlier prompt, counted in whole
  128-token increments (0 below 1,024). Cached input costs the model's discounted rate.
- Anthropic (explicit `cache_control` breakpoints): at each breakpoint the cache is looked up for
  the prefix ending there, then at each of the 20 block boundaries before it; the longest prefix
  found is a cache read (0.1x input). The prefix up to the last breakpoint that is not read is a
  cache write (1.25x, 5-minute TTL); what follows the last breakpoint is plain input. A prefix
  shorter than the model's minimum (1,024 tokens for Sonnet 4) is neither written nor read. Only
  prefixes ending at a breakpoint are ever written, so only they can be read later.
- Output tokens at the output rate; the summarizer's calls (input plain, output) at the same
  model's rates: compaction is not free.

Simplifications, all the same for the runs with and without ctxproxy: a message is one block;
cache entries never expire (agent turns are seconds apart, well within the 5-minute TTL, which a
read refreshes); every request's reply is what the transcript's assistant said; tokens are
counted with the OpenAI tokenizer for both providers.

Example::

    bill = price_requests([Request(((1, 2000),), (0,), 50)] * 2, PRICES["claude-sonnet-4"])
    bill.cache_write, bill.cache_read   # 2000, 2000: the second request reads what the first wrote
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Price:
    """USD per million tokens. OpenAI: `cached` is the cached-input rate (`write` unused);
    Anthropic: `cached` is a cache read, `write` a 5-minute cache write."""

    model: str
    provider: str  # "openai" | "anthropic"
    input: float
    cached: float
    write: float
    output: float
    min_cacheable: int = 1024
    increment: int = 1  # OpenAI: cached tokens come in 128-token increments
    lookback: int = 20  # Anthropic: block boundaries checked before a breakpoint


# List prices checked 2026-12-01: https://openai.com/api/pricing (gpt-4o $2.50 / cached $1.25 /
# out $10; gpt-4.1 $2.00 / cached $0.50 / out $8; gpt-5 $1.25 / cached $0.125 / out $10) and
# https://platform.claude.com/docs/en/about-claude/pricing (Claude Sonnet 4: $3 input, $3.75 5m
# cache write = 1.25x, $0.30 cache read = 0.1x, $15 output; minimum cacheable prompt 1,024 tokens
# per https://platform.claude.com/docs/en/build-with-claude/prompt-caching).
# Small models for `summarizer.model`, same pages: gpt-4.1-mini $0.40 / cached $0.10 / out $1.60;
# Claude Haiku 4.5 $1 input, $1.25 cache write, $0.10 cache read, $5 output.
PRICES: dict[str, Price] = {
    "gpt-4o": Price("gpt-4o", "openai", 2.50, 1.25, 0.0, 10.00, increment=128),
    "gpt-4.1": Price("gpt-4.1", "openai", 2.00, 0.50, 0.0, 8.00, increment=128),
    "gpt-4.1-mini": Price("gpt-4.1-mini", "openai", 0.40, 0.10, 0.0, 1.60, increment=128),
    "gpt-5": Price("gpt-5", "openai", 1.25, 0.125, 0.0, 10.00, increment=128),
    "claude-sonnet-4": Price("claude-sonnet-4", "anthropic", 3.00, 0.30, 3.75, 15.00),
    "claude-haiku-4.5": Price("claude-haiku-4.5", "anthropic", 1.00, 0.10, 1.25, 5.00),
}
SMALL_SUMMARIZER = {"gpt-4.1": "gpt-4.1-mini", "claude-sonnet-4": "claude-haiku-4.5"}
"""the provider's small model a route may name as `summarizer.model` (the bench's second bill)"""


@dataclass(frozen=True)
class Request:
    """One upstream call. `blocks`: (hash of the prefix through this block, its tokens), in
    order; `breakpoints`: indices of the blocks that carry `cache_control` (Anthropic only);
    `summarizer`: (input, output) tokens of the summarizer calls made for this request (plain
    input); `shared`: its summary calls that repeat an earlier request (`summarizer.mode: shared`),
    priced through the same cache as the conversation's own requests."""

    blocks: tuple[tuple[int, int], ...]
    breakpoints: tuple[int, ...]
    output: int
    summarizer: tuple[tuple[int, int], ...] = ()
    shared: tuple[Request, ...] = ()


@dataclass(frozen=True)
class RequestBill:
    """One request's part of a `Bill`: its input by kind, and its dollars (summary calls included)."""

    uncached: int
    cache_read: int
    cache_write: int
    summarizer_dollars: float
    dollars: float


@dataclass
class Bill:
    uncached: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    summarizer_input: int = 0
    summarizer_output: int = 0
    dollars: float = 0.0
    summarizer_dollars: float = 0.0
    """all summary calls, the plain ones and the shared ones"""
    shared_dollars: float = 0.0
    """the shared summary calls (their input read from the cache where it can be)"""
    per_request: list[RequestBill] = field(default_factory=list)

    @property
    def input(self) -> int:
        return self.uncached + self.cache_read + self.cache_write

    def to_dict(self) -> dict[str, Any]:
        return {
            "uncached": self.uncached,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "output": self.output,
            "summarizer_input": self.summarizer_input,
            "summarizer_output": self.summarizer_output,
            "dollars": round(self.dollars, 6),
            "summarizer_dollars": round(self.summarizer_dollars, 6),
            "shared_dollars": round(self.shared_dollars, 6),
        }


def chain(keys: Iterable[object], seed: int = 0) -> list[int]:
    """Prefix hashes: element k stands for keys[0..k] (equal lists -> equal hashes)."""
    out, h = [], seed
    for key in keys:
        h = hash((h, key))
        out.append(h)
    return out


def _cumulative(blocks: Sequence[tuple[int, int]]) -> list[int]:
    out, total = [], 0
    for _, tokens in blocks:
        total += tokens
        out.append(total)
    return out


def _openai(request: Request, seen: set[int], price: Price) -> tuple[int, int, int]:
    """(uncached, cached, written) input tokens of one request; records its prefixes."""
    cum = _cumulative(request.blocks)
    total = cum[-1] if cum else 0
    matched = 0
    if total >= price.min_cacheable:
        for (h, _), through in zip(reversed(request.blocks), reversed(cum), strict=True):
            if h in seen:
                matched = through
                break
        seen.update(h for h, _ in request.blocks)  # the whole prompt is cached (by 128-token blocks)
    cached = (matched // price.increment) * price.increment if matched >= price.min_cacheable else 0
    return total - cached, cached, 0


def _anthropic(request: Request, entries: set[int], price: Price) -> tuple[int, int, int]:
    cum = _cumulative(request.blocks)
    total = cum[-1] if cum else 0
    points = sorted(b for b in set(request.breakpoints) if 0 <= b < len(cum) and cum[b] >= price.min_cacheable)
    if not points:
        return total, 0, 0
    read = 0
    for b in points:
        for j in range(b, max(-1, b - price.lookback - 1), -1):
            if request.blocks[j][0] in entries and cum[j] >= price.min_cacheable:
                read = max(read, cum[j])
                break
    last = cum[points[-1]]
    write = max(0, last - read)
    entries.update(request.blocks[b][0] for b in points)
    return total - last, read, write


def with_summarizer_at(bill: Bill, price: Price) -> float:
    """`bill`'s dollars with its plain summarizer calls priced at `price` (another model) instead
    (a shared call reads the conversation model's own cache: it has no other model)."""
    small = (bill.summarizer_input * price.input + bill.summarizer_output * price.output) * 1e-6
    return bill.dollars - (bill.summarizer_dollars - bill.shared_dollars) + small


def price_requests(requests: Iterable[Request], price: Price) -> Bill:
    """The bill of `requests` sent in order to one cache (one conversation)."""
    bill = Bill()
    state: set[int] = set()
    rule = _openai if price.provider == "openai" else _anthropic
    m = 1e-6

    def cost(request: Request) -> tuple[int, int, int, float]:
        """`request`'s input as (uncached, read, written) through the cache, and its dollars."""
        uncached, read, write = rule(request, state, price)
        dollars = (
            uncached * price.input + read * price.cached + write * price.write + request.output * price.output
        ) * m
        return uncached, read, write, dollars

    for request in requests:
        uncached, read, write, dollars = cost(request)
        s_in = sum(i for i, _ in request.summarizer)
        s_out = sum(o for _, o in request.summarizer)
        s_cost = (s_in * price.input + s_out * price.output) * m
        for call in request.shared:
            c_cost = cost(call)[3]
            bill.shared_dollars += c_cost
            s_cost += c_cost
        bill.uncached += uncached
        bill.cache_read += read
        bill.cache_write += write
        bill.output += request.output
        bill.summarizer_input += s_in
        bill.summarizer_output += s_out
        bill.dollars += dollars + s_cost
        bill.summarizer_dollars += s_cost
        bill.per_request.append(RequestBill(uncached, read, write, s_cost, dollars + s_cost))
    return bill
