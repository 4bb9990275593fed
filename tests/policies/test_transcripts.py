"""Replay real agent transcripts turn by turn through a small (16k) window.

The vendored transcripts, a long session cycled from their tool calls, and -- when the shared set
is present -- its two longest mini-swe-agent runs (tests/support/transcripts.py).

Each assistant message of a transcript marks one request: everything before it. Every request
is projected; when a compaction is planned it is applied inline with a deterministic stand-in
summarizer (first lines of each event) and the request is projected again. Invariants must hold
every turn, every request must fit the window, and every summarizer request too.
"""

from __future__ import annotations

from typing import Any

import pytest

from policies.base import Budget, Checkpoint, ContextOverflow, Item
from policies.compaction import fold_summaries, next_checkpoint
from policies.config import PolicyConfig
from policies.groups import split_prefix
from policies.invariants import check_all
from policies.outcome import Projection
from policies.pins import pinned_texts
from policies.projection import project
from policies.summary_tail import build_summary_messages, summary_block
from proxy.token_counter import TokenCounter
from tests.policies.strategies import Case, fake_summarize, mandatory_tokens
from tests.support import transcripts

CHOSEN = (
    "swe-agent__pydicom__pydicom-1458.json",
    "swe-agent__ctf__web__i_got_id_demo.json",
    "tau-bench__gpt-4o-airline__task02__trial1.json",
    transcripts.GENERATED,
    *transcripts.large_available(),
)
WINDOW, MAX_OUTPUT = 16_000, 2_000


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter.for_model("gpt-4o")


def _replay(name: str, counter: TokenCounter, window: int = 16_000) -> dict[str, Any]:
    data = transcripts.load(name)
    prefix, history = split_prefix(data["messages"])
    items = [Item(i + 1, m, counter.count(m, key=f"{name}:{i}")) for i, m in enumerate(history)]
    budget = Budget(window, MAX_OUTPUT, counter.count_tools(data.get("tools")) + 3)
    config = PolicyConfig()
    checkpoint: Checkpoint | None = None
    stats = {"turns": 0, "compactions": 0, "overflows": 0, "pruned_turns": 0, "max_sent": 0}
    for end, message in enumerate(history):
        if message.get("role") != "assistant":
            continue
        turn = items[:end]
        result = _project(prefix, turn, checkpoint, budget, config, counter)
        if isinstance(result, Projection) and result.record.compaction is not None:
            checkpoint = _compact(result, prefix, turn, checkpoint, budget, config, counter)
            stats["compactions"] += 1
            result = _project(prefix, turn, checkpoint, budget, config, counter)
        stats["turns"] += 1
        if isinstance(result, ContextOverflow):
            case = Case(prefix, [], turn, checkpoint, budget, config)
            assert mandatory_tokens(case, counter) > budget.input_budget, str(result)
            stats["overflows"] += 1
            continue
        violations = check_all(prefix, turn, checkpoint, budget, result)
        assert violations == [], f"{name} turn ending at e{end}: {violations}"
        assert result.record.sent_tokens + MAX_OUTPUT <= window
        stats["pruned_turns"] += bool(result.record.pruned_seqs)
        stats["max_sent"] = max(stats["max_sent"], result.record.sent_tokens)
    return stats


def _project(
    prefix: list[Any],
    items: list[Item],
    checkpoint: Checkpoint | None,
    budget: Budget,
    config: PolicyConfig,
    counter: TokenCounter,
) -> Projection | ContextOverflow:
    try:
        return project(prefix, items, checkpoint, budget, config, counter)
    except ContextOverflow as exc:
        return exc


def _compact(
    result: Projection,
    prefix: list[Any],
    items: list[Item],
    checkpoint: Checkpoint | None,
    budget: Budget,
    config: PolicyConfig,
    counter: TokenCounter,
) -> Checkpoint:
    plan = result.record.compaction
    assert plan is not None
    pins = pinned_texts(items, config.pins)

    def summarize(summary: str | None, chunk: tuple[Item, ...]) -> str:
        request = build_summary_messages(summary, chunk, pins)
        request_tokens = sum(counter(m) for m in request) + 3
        assert request_tokens <= budget.input_budget, f"summarizer request of {request_tokens} tokens"
        return fake_summarize(summary, chunk)

    summary = fold_summaries(plan, checkpoint.summary if checkpoint else None, summarize)
    nxt = next_checkpoint(checkpoint, plan, summary, counter)
    generation = checkpoint.generation + 1 if checkpoint else 1
    assert nxt == Checkpoint(generation, plan.through_seq, summary, counter(summary_block(summary, plan.through_seq)))
    return nxt


@pytest.mark.parametrize("name", CHOSEN)
def test_replay_transcript_in_a_small_window(name: str, counter: TokenCounter) -> None:
    stats = _replay(name, counter)
    assert stats["turns"] > 0
    assert stats["max_sent"] + MAX_OUTPUT <= WINDOW
    print(name, stats)


@pytest.mark.parametrize("name", CHOSEN)
def test_replay_transcript_in_a_tiny_window(name: str, counter: TokenCounter) -> None:
    """8k: the pinned task plus the system prompt nearly fill it; pruning and (truly impossible)
    overflows happen, and still every request that is sent is valid and fits."""
    stats = _replay(name, counter, window=8_000)
    assert stats["turns"] > 0
    print(name, stats)
