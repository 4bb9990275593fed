"""Compaction planning: trigger, tail size, target, group boundaries, bounded chunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.base import Budget, Checkpoint, Item
from policies.config import PolicyConfig, SettingError
from policies.draft import Inputs
from policies.groups import group_items
from policies.outcome import CompactionPlan
from policies.projection import project
from policies.summary_tail import Standing, chunk_limit, cut_message, make_chunks, plan_compaction
from tests.policies.helpers import calls, items, result, user
from tests.policies.strategies import fake_count

DATA = Path(__file__).resolve().parents[1] / "data" / "tool_outputs"

BUDGET = Budget(16_000, 2_000, 0)  # input budget 14,000; trigger 11,200; target 7,000


def history(turns: int, size: int = 4000) -> list[Item]:
    messages: list[dict[str, object]] = [user("the task")]
    for turn in range(turns):
        messages += [calls(f"c{turn}"), result(f"c{turn}", f"{turn}:" + "r" * size)]
    return items(*messages)


def plan(history_: list[Item], config: PolicyConfig, checkpoint: Checkpoint | None = None, **kw: int):  # type: ignore[no-untyped-def]
    total = sum(i.tokens for i in history_)
    inputs = Inputs((), history_, checkpoint, BUDGET, config, fake_count)
    return plan_compaction(inputs, Standing(kw.get("projected", total), kw.get("overhead", 0)))


def test_no_plan_below_the_trigger() -> None:
    assert plan(history(3), PolicyConfig(), projected=11_200) is None


def test_plan_keeps_a_tail_of_at_least_keep_recent_tokens_at_a_group_boundary() -> None:
    h = history(20)  # ~1,000 tokens per group
    p = plan(h, PolicyConfig(keep_recent_tokens=3_000))
    assert p is not None
    tail = [i for i in h if i.seq > p.through_seq]
    assert sum(i.tokens for i in tail) >= 3_000
    assert p.through_seq % 2 == 1  # groups are (user), (call, result) pairs: ends after a result
    assert p.from_seq == 1
    assert [i.seq for chunk in p.chunks for i in chunk] == list(range(1, p.through_seq + 1))
    assert "trigger 11,200" in p.reason


def test_keep_recent_shrinks_to_the_target() -> None:
    h = history(20)
    p = plan(h, PolicyConfig(keep_recent_tokens=20_000), overhead=5_000)  # target 7,000 - 5,000
    assert p is not None
    tail_tokens = sum(i.tokens for i in h if i.seq > p.through_seq)
    assert 2_000 - 1_100 < tail_tokens <= 2_000  # never a group past the target


def test_the_room_reserves_the_longest_summary_the_commit_may_bring() -> None:
    h = history(20)
    total = sum(i.tokens for i in h)
    budget = Budget(16_000, 2_000, 0, summary_max_tokens=1_500)
    p = plan_compaction(Inputs((), h, None, budget, PolicyConfig(), fake_count), Standing(total, 2_000))
    assert p is not None
    tail_tokens = sum(i.tokens for i in h if i.seq > p.through_seq)
    assert 3_500 - 1_100 < tail_tokens <= 3_500  # 7,000 - 2,000 overhead - 1,500 for the summary


def test_the_tail_shrinks_to_the_newest_group_when_nothing_else_fits() -> None:
    h = history(20)
    p = plan(h, PolicyConfig(keep_recent_tokens=20_000), overhead=7_500)  # over the target already
    assert p is not None and p.through_seq == h[-3].seq  # only the newest group stays raw


def test_plan_starts_after_the_checkpoint_and_never_takes_the_last_group() -> None:
    h = history(20)
    p = plan(h, PolicyConfig(keep_recent_tokens=0), Checkpoint(1, 11, "s", 10))
    assert p is not None and p.from_seq == 12
    inside = plan(h, PolicyConfig(keep_recent_tokens=0), Checkpoint(1, 10, "s", 10))
    assert inside is not None and inside.from_seq == 10  # boundary inside group (10, 11) -> its start
    assert p.through_seq == h[-3].seq  # all but the last group
    assert plan(history(0), PolicyConfig(keep_recent_tokens=0), projected=99_999) is None


def test_a_compaction_that_would_not_shrink_the_projection_is_not_planned() -> None:
    # an irreducible request over the trigger (a huge first message) and small groups after it:
    # summarizing them could bring a summary longer than they are, on every turn
    task = user("t" * 44_000)  # ~11,000 tokens: over the trigger alone, with the overhead
    small = items(task, *[m for k in range(4) for m in (calls(f"c{k}"), result(f"c{k}", "ok"))])
    total = sum(i.tokens for i in small)
    budget = Budget(16_000, 2_000, 0, summary_max_tokens=1_500)

    def planned(h: list[Item]):  # type: ignore[no-untyped-def]
        overhead = h[0].tokens
        total = sum(i.tokens for i in h)
        sent = {i.seq: 0 if i.seq == 1 else i.tokens for i in h}  # the pinned task stays: overhead
        config = PolicyConfig(keep_recent_tokens=0)
        return plan_compaction(Inputs((), h, None, budget, config, fake_count), Standing(total, overhead, sent))

    assert total > 11_200 and planned(small) is None
    # groups worth more than the longest summary: planned
    big = items(task, *[m for k in range(4) for m in (calls(f"c{k}"), result(f"c{k}", "r" * 2_400))])
    assert sum(i.tokens for i in big[1:-2]) > 1_500 and planned(big) is not None


def test_a_single_huge_group_yields_no_plan_instead_of_looping() -> None:
    h = items(user("task"), calls("a"), result("a", "x" * 200_000))
    p = plan(h, PolicyConfig(keep_recent_tokens=0), Checkpoint(1, 1, "s", 10))
    assert p is None


def test_chunks_respect_the_limit_and_cut_oversized_groups() -> None:
    h = items(user("task"), calls("a"), result("a", "x" * 100_000), calls("b"), result("b", "small"), user("u"))
    groups = group_items(h)
    chunks = make_chunks(groups[:3], 2_000, fake_count)
    # the oversized group, cut, joins the small chunk before it (no tiny chunk of its own)
    assert [[i.seq for i in chunk] for chunk in chunks] == [[1, 2, 3], [4, 5]]
    big = chunks[0]
    assert sum(i.tokens + 16 for i in big) <= 2_000
    assert "[cut for summarization: 100,000 chars" in big[2].message["content"]
    assert big[2].tokens == fake_count(big[2].message)
    assert h[2].message["content"] == "x" * 100_000  # input untouched
    # after a chunk more than half full, it gets a chunk of its own
    full = make_chunks(group_items(items(user("t" * 5_000), calls("a"), result("a", "x" * 100_000))), 2_000, fake_count)
    assert [[i.seq for i in chunk] for chunk in full] == [[1], [2, 3]]


def test_chunk_limit_fits_the_summarizer_window() -> None:
    config = PolicyConfig()
    assert chunk_limit(Budget(200_000, 4_000), config, previous_summary_tokens=0, pinned_tokens=0) == 24_000
    small = chunk_limit(BUDGET, config, previous_summary_tokens=2_000, pinned_tokens=1_000)
    assert small == 14_000 - 900 - 2_000 - 1_000


def test_chunks_reserve_the_longest_accepted_summary_not_the_whole_reply() -> None:
    """A chunk's summary rolls into the next chunk's request; it is at most `summary_max_tokens`
    long (a longer one is rejected), so the chunks reserve that, not the summarizer's reply reserve."""
    h = history(60, size=1_200)
    summarizer = Budget(8_000, 2_000, 3)  # input budget 6,000; the reply may be 2,000 tokens

    def largest_chunk(summary_max_tokens: int | None) -> int:
        budget = Budget(16_000, 2_000, 0, summarizer=summarizer, summary_max_tokens=summary_max_tokens)
        total = sum(i.tokens for i in h)
        p = plan_compaction(Inputs((), h, None, budget, PolicyConfig(), fake_count), Standing(total, 0))
        assert p is not None
        return max(sum(i.tokens + 16 for i in chunk) for chunk in p.chunks)

    pinned = fake_count(user("the task"))
    assert largest_chunk(None) <= 6_000 - 3 - 900 - 2_000 - pinned
    assert 6_000 - 3 - 900 - 2_000 - pinned < largest_chunk(800) <= 6_000 - 3 - 900 - 800 - pinned


def test_cut_message_cuts_arguments_too() -> None:
    message = calls("a")
    message["tool_calls"][0]["function"]["arguments"] = "A" * 10_000
    cut = cut_message(message, 100)
    assert len(cut["tool_calls"][0]["function"]["arguments"]) < 200
    assert message["tool_calls"][0]["function"]["arguments"] == "A" * 10_000
    assert cut_message(user("short"), 100) == user("short")


def test_a_tool_result_cut_for_the_summarizer_keeps_its_key_lines() -> None:
    """A test run cut to fit the summarizer keeps its failure and summary line (head + tail at the
    same size keeps neither: they sit in the middle); other text is cut head + tail."""
    text = (DATA / "pytest_failure.txt").read_text() + "\n" + "collected item\n" * 200
    cut = str(cut_message(result("c1", text), 600)["content"])
    assert cut.startswith("[cut for summarization: test output, ")
    assert "test/core/file_helpers_test.py:46: AssertionError" in cut and "1 failed, 2 warnings" in cut
    assert len(cut) < 800
    head_tail = str(cut_message(user(text), 600)["content"])
    assert "file_helpers_test.py:46" not in head_tail and "first 300 and last 300 kept" in head_tail


@pytest.mark.parametrize("window", [8_000, 16_000])
@pytest.mark.parametrize("objective_tokens", [50, 1_500])
def test_after_a_commit_the_projection_lands_near_target(window: int, objective_tokens: int) -> None:
    """Project, apply the plan with a summary as long as the limit allows, project the same
    history again: it lands at or below target (or, when the prefix, pins and summary alone
    leave no room, at the newest group alone), and not far below."""
    from policies.compaction import next_checkpoint
    from policies.projection import project

    budget = Budget(window, 1_000, 300, summary_max_tokens=window // 10)
    config = PolicyConfig(late_trim=0.8)  # the checkpoint applies once committed
    target = int(config.target * budget.input_budget)
    prefix = [{"role": "system", "content": "s" * 2_000}]
    messages: list[dict[str, object]] = [user("objective " + "o" * (objective_tokens * 4))]
    checkpoint = None
    landed = []
    for turn in range(120):
        messages += [calls(f"c{turn}"), result(f"c{turn}", f"{turn}:" + "r" * (600 + 350 * (turn % 9)))]
        history = items(*messages)
        projection = project(prefix, history, checkpoint, budget, config, fake_count)
        plan = projection.record.compaction
        if plan is None:
            continue
        summary = "## Key facts\n" + "f" * (budget.summary_max_tokens or 0) * 4  # as long as allowed
        checkpoint = next_checkpoint(checkpoint, plan, summary, fake_count)
        after = project(prefix, history, checkpoint, budget, config, fake_count)
        newest = sum(i.tokens for i in history if i.seq >= history[-2].seq)
        floor = (
            after.record.sent_tokens
            - sum(i.tokens for i in history if i.seq in after.record.sent_seqs and i.seq > plan.through_seq)
            + newest
        )
        landed.append(after.record.sent_tokens / max(target, floor))
        assert after.record.sent_tokens <= max(target, floor) + 1, (turn, after.record.sent_tokens, target, floor)
    assert len(landed) >= 3
    assert sum(landed) / len(landed) > 0.7  # near target, not far below it


def test_a_chunk_splits_into_halves_of_whole_groups_or_one_cut_group() -> None:
    from policies.summary_tail import split_chunk

    chunk = tuple(items(user("go"), *[m for i in range(6) for m in (calls(f"c{i}"), result(f"c{i}", "z" * 800))]))
    first, second = split_chunk(chunk, fake_count)
    assert first + second == chunk
    assert second[0].message.get("role") == "assistant"  # a tool group is never split from its call
    cost = [sum(item.tokens for item in half) for half in (first, second)]
    assert abs(cost[0] - cost[1]) < max(cost) * 0.5
    one = tuple(items(calls("a"), result("a", "q" * 40_000)))
    (cut,) = split_chunk(one, fake_count)
    assert [i.seq for i in cut] == [1, 2] and sum(i.tokens for i in cut) < sum(i.tokens for i in one) * 0.6
    tiny = tuple(items(user("x")))
    assert split_chunk(tiny, fake_count) is None


def test_an_over_long_summary_is_kept_when_it_fits_else_cut_at_a_line() -> None:
    from policies.summary_prompt import fit_summary

    def count(text: str) -> int:
        return len(text) // 4

    summary = "## Goal\nship it\n## Key facts\n" + "\n".join(f"- fact number {i} is {i * 7}" for i in range(100))
    assert fit_summary(summary, count(summary), count) == summary
    cut = fit_summary(summary, 200, count)
    kept, marker = cut.rsplit("\n", 1)
    assert count(cut) <= 200 and summary.startswith(kept + "\n")
    assert marker.startswith("[summary cut to its length limit: ") and "more lines left out]" in marker
    one_line = "x" * 4_000
    assert 0 < len(fit_summary(one_line, 100, count)) < len(one_line)


def test_the_first_rewrite_is_the_compaction() -> None:
    """A branch's first request that no longer goes as sent rewrites the cached prefix whatever
    it does: with `first_rewrite: compact` (the default) it plans the compaction at once, though
    trimmed it is under the trigger, and the plan asks the request to wait for it; with `trim`
    it only trims. A branch that has its checkpoint compacts from the trigger on, as before; and
    a trim that lands under the target needs no compaction at all."""
    messages = [user("task")]
    for k in range(60):  # two large results early (trimmed), many small ones (not)
        text = " ".join(f"w{k}x{i}" for i in range(1500 if k in (2, 5) else 50))
        messages += [calls(f"c{k}"), result(f"c{k}", text)]
    history = items(*messages)
    total = sum(item.tokens for item in history)
    budget = Budget(int(total * 0.9) + 1000, 1000)  # it no longer fits as sent

    first = project([], history, None, budget, PolicyConfig(), fake_count).record
    assert first.trimmed and first.sent_tokens < first.trigger_tokens and not first.over_trigger
    assert first.compaction is not None and first.compaction.wait
    trim = project([], history, None, budget, PolicyConfig(first_rewrite="trim"), fake_count).record
    assert trim.trimmed and trim.compaction is None
    assert trim.sent_tokens == first.sent_tokens  # the same request goes if the summary is late

    plan = first.compaction
    checkpoint = Checkpoint(1, plan.through_seq, "s", 10)
    later = project([], history, checkpoint, budget, PolicyConfig(), fake_count).record
    assert later.sent_tokens < later.trigger_tokens and later.compaction is None

    small = items(*messages[:21])  # its trim lands under the target: nothing to summarize
    tight = Budget(int(sum(item.tokens for item in small) * 0.9) + 1000, 1000)
    record = project([], small, None, tight, PolicyConfig(), fake_count).record
    assert record.trimmed and record.compaction is None
    with pytest.raises(SettingError):
        PolicyConfig(first_rewrite="later")


def _plan_with_summarizer(turns: int, overhead: int = 0) -> CompactionPlan:
    """A plan over `turns` groups of ~1,000 tokens, summarized by a model whose input budget is
    6,000 (8k window, 2k reply) with summaries of at most 800 tokens."""
    h = history(turns, 1_000)
    total = sum(i.tokens for i in h)
    budget = Budget(16_000, 2_000, 0, summarizer=Budget(8_000, 2_000, 3), summary_max_tokens=800)
    inputs = Inputs((), h, None, budget, PolicyConfig(keep_recent_tokens=500), fake_count)
    p = plan_compaction(inputs, Standing(max(total, 11_201), overhead))
    assert p is not None
    return p


def test_one_chunk_reserves_no_room_for_a_summary_rolling_into_a_next_one() -> None:
    """What fits one summarizer call beside its prompt and pinned texts is one call: the room for
    a summary rolling into the next chunk's request (800 tokens) is kept only when there is one."""
    pinned = fake_count(user("the task"))
    with_reserve = 6_000 - 3 - 900 - 800 - pinned
    p = _plan_with_summarizer(16)
    assert len(p.chunks) == 1
    assert with_reserve < sum(i.tokens + 16 for i in p.chunks[0]) <= 6_000 - 3 - 900 - pinned
