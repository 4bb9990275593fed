"""The newest turn too large: its tool results are cut head + tail to fit, pairing intact."""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.base import Budget, ContextOverflow
from policies.config import PolicyConfig, ToolResultsConfig
from policies.fit_latest import Cut
from policies.invariants import check_all, is_cut_to_fit, tool_pairing
from policies.projection import project
from tests.policies.helpers import assistant, calls, items, result, user
from tests.policies.strategies import fake_count, make_text
from tests.support.lanes import examples

SYSTEM = [{"role": "system", "content": "be brief"}]
BUDGET = Budget(8_000, 1_000)
HUGE = make_text("log", 240_000)  # about 60,000 tokens by fake_count


def session(*results: str) -> list[dict[str, object]]:
    ids = [f"c{i}" for i in range(len(results))]
    out: list[dict[str, object]] = [user("goal")]
    for i in range(6):
        out += [calls(f"old{i}"), result(f"old{i}", "r" * 3_000), assistant(f"step {i}")]
    out += [user("run the full test suite"), calls(*ids)]
    return out + [result(tid, text) for tid, text in zip(ids, results, strict=True)]


def test_a_60k_token_result_in_the_newest_turn_is_cut_head_and_tail_and_fits() -> None:
    history = items(*session(HUGE))
    before = copy.deepcopy([item.message for item in history])
    projection = project(SYSTEM, history, None, BUDGET, PolicyConfig(), fake_count, recall_tool="ctxproxy_recall")
    record = projection.record
    assert [item.message for item in history] == before  # the stored history is untouched
    assert record.sent_tokens <= BUDGET.input_budget
    assert record.sent_tokens > 0.97 * BUDGET.input_budget  # the largest cut that fits, not less
    seq = history[-1].seq
    assert record.cut_to_fit == (seq,) and seq in [entry.seq for entry in record.trimmed]
    sent = projection.messages[-1]
    assert sent["tool_call_id"] == "c0" and tool_pairing(projection.messages) == []
    content = sent["content"]
    head, marker, tail = content.split("\n[trimmed to fit")[0], content[content.index("[trimmed to fit") :], ""
    marker, _, tail = marker.partition("]\n")
    assert HUGE.startswith(head) and HUGE.endswith(tail) and len(head) > 1_000 and len(tail) > 1_000
    assert marker + "]" == Cut("bash", history[-1].tokens, len(HUGE), len(head), len(tail), seq).marker(
        "ctxproxy_recall"
    )
    assert re.fullmatch(
        r"\[trimmed to fit the context window: tool result of bash, [\d,]+ tokens \(240,000 chars\); "
        rf"first [\d,]+ and last [\d,]+ chars kept; event {seq}; ctxproxy_recall can fetch it\]",
        marker + "]",
    )
    assert is_cut_to_fit(history[-1].message, sent, seq)
    assert check_all(SYSTEM, history, None, BUDGET, projection) == []
    assert projection.messages[-3] == user("run the full test suite")  # the newest user message verbatim


def test_the_marker_names_no_tool_when_recall_is_not_offered() -> None:
    projection = project(SYSTEM, items(*session(HUGE)), None, BUDGET, PolicyConfig(), fake_count)
    content = projection.messages[-1]["content"]
    assert "[trimmed to fit the context window:" in content and "can fetch it" not in content


def test_parallel_results_share_one_cap_small_ones_stay_whole() -> None:
    history = items(*session("short output", HUGE, HUGE[:100_000]))
    projection = project(SYSTEM, history, None, BUDGET, PolicyConfig(), fake_count)
    sent = projection.messages[-3:]
    assert sent[0] == result("c0", "short output")
    assert all(
        is_cut_to_fit(item.message, message, item.seq) for item, message in zip(history[-2:], sent[1:], strict=True)
    )
    kept = {
        entry.seq: entry.kept_chars for entry in projection.record.trimmed if entry.seq in projection.record.cut_to_fit
    }
    assert len(set(kept.values())) == 1  # one common cap
    assert projection.record.sent_tokens <= BUDGET.input_budget
    assert tool_pairing(projection.messages) == []


def test_head_ratio_decides_the_split() -> None:
    config = PolicyConfig(tool_results=ToolResultsConfig(head_ratio=0.8))
    projection = project(SYSTEM, items(*session(HUGE)), None, BUDGET, config, fake_count)
    entry = projection.record.trimmed[-1]
    match = re.search(r"first ([\d,]+) and last ([\d,]+) chars kept", projection.messages[-1]["content"])
    assert match
    head, tail = (int(group.replace(",", "")) for group in match.groups())
    assert head + tail == entry.kept_chars and head == int(entry.kept_chars * 0.8)


def test_overflow_when_even_the_markers_do_not_fit() -> None:
    prefix = [{"role": "system", "content": "s" * 27_900}]  # about 6,980 tokens of 7,000
    with pytest.raises(ContextOverflow) as info:
        project(prefix, items(*session(HUGE)), None, BUDGET, PolicyConfig(), fake_count)
    assert "with its tool results cut to their markers" in info.value.detail
    assert "system/developer 6,9" in info.value.detail


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.sampled_from((0, 50, 4_000, 30_000, 120_000)), min_size=1, max_size=4),
    st.sampled_from((2_000, 4_000, 8_000, 16_000)),
    st.sampled_from((0.0, 0.5, 1.0)),
    st.booleans(),
)
def test_cut_keeps_pairing_marker_head_tail_and_fits(sizes: list[int], window: int, ratio: float, recall: bool) -> None:
    history = items(*session(*(make_text(f"out{i}", size) for i, size in enumerate(sizes))))
    budget = Budget(window, window // 8)
    config = PolicyConfig(tool_results=ToolResultsConfig(head_ratio=ratio))
    tool = "ctxproxy_recall" if recall else None
    try:
        projection = project(SYSTEM, history, None, budget, config, fake_count, recall_tool=tool)
    except ContextOverflow as exc:
        # only when the newest turn with every result reduced to its marker is still too large
        assert exc.needed_tokens > budget.input_budget and "cut to their markers" in exc.detail
        return
    assert check_all(SYSTEM, history, None, budget, projection) == []
    results = history[-len(sizes) :]
    sent = projection.messages[-len(sizes) :]
    for item, message in zip(results, sent, strict=True):
        assert message["tool_call_id"] == item.message["tool_call_id"]
        if message != item.message:
            assert is_cut_to_fit(item.message, message, item.seq)
            assert item.seq in projection.record.cut_to_fit
            assert ("ctxproxy_recall can fetch it" in message["content"]) is recall
    assert projection.record.sent_tokens <= budget.input_budget
