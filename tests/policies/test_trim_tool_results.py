"""Tool result trimming: batch boundary, marker, exclusions, protection."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest

from policies.base import Budget, Item
from policies.config import PinsConfig, PolicyConfig, ToolResultsConfig
from policies.draft import Draft, Inputs, StepContext, build_draft
from policies.memo import ProjectionCache, project_cached
from policies.projection import project
from policies.trim_tool_results import trim_boundary, trim_message, trim_tool_results
from tests.policies.helpers import calls, items, result, user
from tests.policies.strategies import fake_count


@pytest.mark.parametrize(
    ("n_groups", "expected"),
    [(0, 0), (4, 0), (7, 0), (8, 4), (9, 4), (11, 4), (12, 8), (13, 8)],
)
def test_boundary_advances_in_batches(n_groups: int, expected: int) -> None:
    assert trim_boundary(n_groups, ToolResultsConfig(keep_recent_groups=4, clear_at_least=4)) == expected


@pytest.mark.parametrize("n_groups", [0, 1, 2, 9])
def test_with_no_recent_group_kept_the_last_group_still_never_counts_as_old(n_groups: int) -> None:
    # a small window keeps no recent group (6,000 tokens of input budget: 0 per 8,000); the last
    # group is protected all the same, so the boundary stops before it
    expected = max(0, n_groups - 1)
    assert trim_boundary(n_groups, ToolResultsConfig(keep_recent_groups=0, clear_at_least=1)) == expected
    assert trim_boundary(n_groups, ToolResultsConfig(), input_budget=6_000) == expected


def test_marker_names_tool_size_kept_chars_and_event() -> None:
    text = "H" * 200 + "x" * 47_810 + "T" * 200
    trimmed, entry = trim_message(result("c1", text), max_chars=400, head_ratio=0.5, tool_name="grep", seq=57) or (
        None,
        None,
    )
    assert trimmed is not None and entry is not None
    assert trimmed["content"] == (
        "H" * 200
        + "\n[trimmed: tool result of grep, 48,210 chars; first 200 and last 200 kept; event 57]\n"
        + "T" * 200
    )
    assert (entry.seq, entry.tool_call_id, entry.original_chars, entry.kept_chars) == (57, "c1", 48_210, 400)


def test_the_marker_says_the_recall_tool_can_fetch_it_when_offered() -> None:
    text = "H" * 200 + "x" * 47_810 + "T" * 200
    message = result("c1", text)
    offered = trim_message(
        message, max_chars=400, head_ratio=0.5, tool_name="grep", seq=57, recall_tool="ctxproxy_recall"
    )
    assert offered is not None
    assert offered[0]["content"] == (
        "H" * 200
        + "\n[trimmed: tool result of grep, 48,210 chars; first 200 and last 200 kept; event 57; "
        + "ctxproxy_recall can fetch it]\n"
        + "T" * 200
    )
    again = trim_message(
        message, max_chars=400, head_ratio=0.5, tool_name="grep", seq=57, recall_tool="ctxproxy_recall"
    )
    assert again is not None and again[0] == offered[0]  # byte-stable from turn to turn


def test_projection_markers_and_summary_name_the_recall_tool_only_when_offered() -> None:
    from policies.base import Checkpoint
    from policies.projection import project
    from policies.summary_prompt import summary_block

    results = [f"result {i}\n" + "z" * 3_000 for i in range(12)]  # distinct: identical ones are repeats
    history = items(user("task"), *[m for i in range(12) for m in (calls(f"c{i}"), result(f"c{i}", results[i]))])
    checkpoint = Checkpoint(1, 3, "## Goal\nthe task", 20)
    budget = Budget(200_000, 1_000)
    now = PolicyConfig(late_trim=0.8)  # the checkpoint applies though the history would fit
    on = project([], history, checkpoint, budget, now, fake_count, recall_tool="ctxproxy_recall")
    off = project([], history, checkpoint, budget, now, fake_count)
    marked = [m for m in on.messages if "[trimmed: tool result" in str(m.get("content"))]
    assert marked and all("event" in m["content"] and "; ctxproxy_recall can fetch it]" in m["content"] for m in marked)
    assert not any("can fetch it" in str(m.get("content")) for m in off.messages)
    block = next(m for m in on.messages if "<conversation_summary" in str(m.get("content")))
    assert block == summary_block("## Goal\nthe task", 3, "ctxproxy_recall")
    assert "call the ctxproxy_recall tool to search it" in block["content"]
    assert (
        "ctxproxy_recall"
        not in next(m for m in off.messages if "<conversation_summary" in str(m.get("content")))["content"]
    )


def test_small_results_and_useless_trims_are_left_alone() -> None:
    assert trim_message(result("c", "x" * 400), max_chars=400, head_ratio=0.5, tool_name="t", seq=1) is None
    assert trim_message(result("c", "x" * 450), max_chars=400, head_ratio=0.5, tool_name="t", seq=1) is None


def _draft(history: Sequence[Item], config: PolicyConfig) -> tuple[Draft, StepContext]:
    return build_draft(Inputs([], history, None, Budget(200_000, 1000), config, fake_count))


def test_old_trimmed_recent_capped_excluded_and_latest_untouched() -> None:
    big = "y" * 20_000
    history = items(
        user("task"),
        calls("a", name="bash"),
        result("a", big),
        calls("b", name="search"),
        result("b", big),
        calls("c", name="bash"),
        result("c", big),
        calls("d", name="bash"),
        result("d", big),
    )
    before = copy.deepcopy([i.message for i in history])
    config = PolicyConfig(
        trigger=0.05,  # 9,950 tokens: the 20k of results are over it
        target=0.01,
        late_trim=0.05,
        tool_results=ToolResultsConfig(keep_recent_groups=2, clear_at_least=1, exclude_tools=("search",)),
    )
    draft, ctx = _draft(history, config)
    out = trim_tool_results(draft, ctx)
    contents = [str(m.get("content")) for m in out.messages()]
    assert len(contents[2]) < 500  # old: 400 chars + marker
    assert contents[4] == big  # excluded tool
    assert len(contents[6]) < 7_400 and "first 3,600 and last 3,600 kept; event 7" in contents[6]  # recent cap, lean
    assert contents[8] == big  # in-flight group
    assert [e.seq for e in out.trimmed] == [3, 7]
    assert [i.message for i in history] == before


def test_a_request_under_the_trigger_without_a_checkpoint_passes_through() -> None:
    big = "y" * 20_000
    history = items(user("task"), calls("a"), result("a", big), calls("b"), result("b", big), calls("c"))
    config = PolicyConfig(tool_results=ToolResultsConfig(keep_recent_groups=0, clear_at_least=1))
    draft, ctx = _draft(history, config)
    assert draft.total <= ctx.trigger_tokens
    out = trim_tool_results(draft, ctx)
    assert out is draft and not out.trimmed
    over = PolicyConfig(trigger=0.05, target=0.01, late_trim=0.05, tool_results=config.tool_results)
    draft, ctx = _draft(history, over)
    assert draft.total > ctx.trigger_tokens
    assert [e.seq for e in trim_tool_results(draft, ctx).trimmed] == [3, 5]


def test_a_request_goes_as_sent_up_to_late_trim() -> None:
    # a 200k window: trigger 0.05 (9,950 tokens), late_trim 0.15 (29,850); results of ~3,800
    # tokens each. Between the two, nothing is trimmed and no compaction is planned (a session that
    # ends there never pays a summarizer); over late_trim, trimming starts and, still over the
    # trigger, the request plans. A small window is no different.
    history = items(user("task"), *[m for k in range(9) for m in (calls(f"c{k}"), result(f"c{k}", _words(k)))])
    config = PolicyConfig(trigger=0.05, target=0.01, late_trim=0.15)
    for n, trims in ((11, False), (15, False), (19, True)):
        grown = history[:n]
        for cache in (None, ProjectionCache()):
            if cache is not None:
                project_cached(cache, Inputs([], grown[:-2], None, Budget(200_000, 1000), config, fake_count))
            args = ([], grown, None, Budget(200_000, 1000), config, fake_count)
            out = project(*args) if cache is None else project_cached(cache, Inputs(*args))
            assert out.record.over_trigger and bool(out.record.trimmed) is trims, (n, cache)
            assert (out.record.compaction is not None) is trims
            if not trims:
                assert out.messages == [i.message for i in grown]  # the client's own objects, as sent
    small = Budget(12_000, 1000)  # trigger 550, late_trim 1,650 tokens
    assert not project([], history[:1], None, small, config, fake_count).record.trimmed
    assert project([], history[:5], None, small, config, fake_count).record.trimmed


def test_by_default_a_request_that_fits_goes_as_sent() -> None:
    # late_trim 1.0: at 90% of the input budget (over the 80% trigger), small window or long,
    # nothing is rewritten and nothing is planned. The next turn, past the budget, is rewritten, and
    # plans a compaction exactly when, trimmed, it is still over the trigger.
    history = items(user("task"), *[m for k in range(9) for m in (calls(f"c{k}"), result(f"c{k}", _words(k)))])
    config = PolicyConfig()
    sizes = [sum(i.tokens for i in history[:n]) for n in range(1, len(history) + 1)]
    for n in (3, 5, 11, 17):
        budget = Budget(int(sizes[n - 1] / 0.9) + 1000, 1000)
        assert config.trigger * budget.input_budget < sizes[n - 1] <= budget.input_budget < sizes[n + 1]
        for cache in (None, ProjectionCache()):
            args = ([], history[:n], None, budget, config, fake_count)
            as_sent = project(*args) if cache is None else project_cached(cache, Inputs(*args))
            assert not as_sent.record.trimmed, n
            assert as_sent.record.compaction is None, n
            assert as_sent.messages == [i.message for i in history[:n]]
            args = ([], history[: n + 2], None, budget, config, fake_count)  # the next call and result
            over = project(*args) if cache is None else project_cached(cache, Inputs(*args))
            assert over.record.trimmed, n  # and compaction planned only if still over the trigger
            assert (over.record.compaction is not None) is (over.record.sent_tokens > over.record.trigger_tokens)


def _words(k: int) -> str:
    return " ".join(f"w{k}x{i}" for i in range(2_000))


def test_pinned_tool_results_are_never_trimmed() -> None:
    history = items(user("task"), calls("a"), result("a", "z" * 5000), user("next"))
    config = PolicyConfig(
        trigger=0.005,  # 995 tokens: over it, so trimming runs
        target=0.001,
        pins=PinsConfig(roles=("tool",)),
        tool_results=ToolResultsConfig(keep_recent_groups=0),
    )
    draft, ctx = _draft(history, config)
    assert draft.total > ctx.trigger_tokens
    out = trim_tool_results(draft, ctx)
    assert out.messages()[2]["content"] == "z" * 5000


def test_the_recent_groups_follow_the_windows_size_not_a_learned_budget() -> None:
    """The budget's unit is the proxy's estimate, corrected as the upstream's own count is learned,
    so it moves between requests (23,488 upstream tokens read 21,353 with a 10% margin, 25,600
    once the upstream is seen to count less). How many recent groups keep their results whole
    follows the window itself (`Budget.nominal_input`): learning never moves the boundary back."""
    from policies.projection import project

    results = [f"{k:02d}" + "z" * 3_000 for k in range(12)]  # distinct: identical ones would be repeats
    history = items(user("task"), *[m for k in range(12) for m in (calls(f"c{k}"), result(f"c{k}", results[k]))])
    config = PolicyConfig(late_trim=0.05, trigger=0.05, target=0.01)
    sent = {
        estimate: project([], history, None, Budget(512 + estimate, 512, nominal_input=23_488), config, fake_count)
        for estimate in (21_353, 25_600)
    }
    boundaries = {estimate: [e.seq for e in p.record.trimmed] for estimate, p in sent.items()}
    assert boundaries[21_353] == boundaries[25_600] and boundaries[21_353]
    # without it, the budget itself sizes them: 2 recent groups at 21,353, 3 at 25,600
    plain = {e: project([], history, None, Budget(512 + e, 512), config, fake_count) for e in (21_353, 25_600)}
    assert [e.seq for e in plain[21_353].record.trimmed] != [e.seq for e in plain[25_600].record.trimmed]


@pytest.mark.parametrize(
    ("input_budget", "expected"),
    [(6_000, (0, 1)), (12_000, (1, 1)), (24_000, (2, 4)), (36_000, (3, 4)), (48_000, (4, 4)), (120_000, (4, 4))],
)
def test_one_recent_group_per_12000_tokens_of_input_budget(input_budget: int, expected: tuple[int, int]) -> None:
    """(recent groups, quantum) for the default four: a 32k window (24k budget) keeps two whole,
    as seed 002's last two turns; each more would be written to the prompt cache again at every
    move of the boundary it follows."""
    from policies.trim_tool_results import recent_groups

    assert recent_groups(ToolResultsConfig(), input_budget) == expected
