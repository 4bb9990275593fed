"""The incremental fast path (`policies.memo.incremental`): a growing branch projected turn by turn
through one `ProjectionCache` gives, at every step, exactly what a cache-less `project()` gives."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from policies.base import Budget, Checkpoint, Item, Message
from policies.config import PolicyConfig, ToolResultsConfig
from policies.draft import Inputs
from policies.history_index import SharedPrefix
from policies.memo import ProjectionCache, project_cached
from policies.outcome import ProjectionRecord
from policies.projection import project
from policies.summary_prompt import summary_block
from tests.policies.helpers import assistant, calls, items, result, user
from tests.policies.strategies import budgets, configs, fake_count, group_of, make_text, prefixes, user_message
from tests.policies.test_index import Case, outcome
from tests.policies.test_properties import SETTINGS

ROOMY = st.sampled_from((Budget(64_000, 1_000, 0), Budget(200_000, 4_000, 300), Budget(1_000_000, 16_000, 50)))


@st.composite
def in_flight(draw: st.DrawFn, turn: int) -> list[dict[str, Any]]:
    """An assistant message whose tool calls have no results yet (the client sends them next)."""
    ids = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True))
    return [calls(*(f"call_{i}" for i in ids), name=draw(st.sampled_from(("bash", "search"))))]


def results_for(message: Message, draw: st.DrawFn) -> list[dict[str, Any]]:
    """Results (some, maybe reordered, maybe huge) for the calls of `message`."""
    ids = [call["id"] for call in message.get("tool_calls") or []]
    chosen = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids))) if ids else []
    return [result(i, make_text(f"late {i}", draw(st.sampled_from((5, 900, 12_000))))) for i in chosen]


def checkpoint_at(covered: int, generation: int, size: int) -> Checkpoint:
    summary = "## Goal\nkeep going\n" + make_text("summary", size)
    return Checkpoint(generation, covered, summary, fake_count(summary_block(summary, covered)))


@SETTINGS
@given(prefixes, st.one_of(ROOMY, budgets()), configs(), st.data())
def test_a_growing_branch_projects_as_without_a_cache(
    prefix: list[Any], budget: Budget, config: PolicyConfig, data: st.DataObject
) -> None:
    messages: list[dict[str, Any]] = [data.draw(user_message(0))]
    history: list[Item] = items(*messages)
    checkpoint: Checkpoint | None = None
    cache = ProjectionCache(max_entries=data.draw(st.sampled_from((1, 64, 16384))))
    next_seq = 2
    recall_tool = data.draw(st.sampled_from((None, "ctxproxy_recall")))
    sent: list[Item] | None = None  # the list the previous request projected

    def add(*new: dict[str, Any]) -> None:
        nonlocal next_seq
        for message in new:
            history.append(Item(next_seq, message, fake_count(message)))
            next_seq += 1

    for turn in range(1, data.draw(st.integers(2, 14))):
        action = data.draw(
            st.sampled_from(
                ("append",) * 6 + ("in_flight", "checkpoint", "budget", "edit", "rewind", "prefix", "config", "recall")
            )
        )
        last = history[-1].message if history else None
        if last is not None and last.get("role") == "assistant" and last.get("tool_calls") and data.draw(st.booleans()):
            add(*results_for(last, data.draw))  # the in-flight call's results arrive
        if action == "append" or not history:
            for _ in range(data.draw(st.integers(1, 3))):
                kind = data.draw(st.sampled_from(("user", "assistant", "tools", "tools", "tools", "orphan")))
                add(*data.draw(group_of(kind, turn)))
        elif action == "in_flight":
            add(*data.draw(in_flight(turn)))
        elif action == "checkpoint":
            covered = data.draw(st.integers(0, history[-1].seq))
            size = data.draw(st.sampled_from((10, 3000)))
            checkpoint = None if data.draw(st.integers(0, 4)) == 0 else checkpoint_at(covered, turn, size)
        elif action == "budget":
            budget = data.draw(st.one_of(ROOMY, budgets()))
        elif action == "edit":  # new Item objects (equal or changed) somewhere in the history
            position = data.draw(st.integers(0, len(history) - 1))
            old = history[position]
            message = dict(old.message)
            if data.draw(st.booleans()):
                message["content"] = f"edited {turn}: " + str(message.get("content"))
            history = list(history)
            history[position] = Item(old.seq, message, fake_count(message))
        elif action == "rewind":  # the client dropped its newest messages (a fork)
            history = history[: data.draw(st.integers(1, len(history)))]
            next_seq = history[-1].seq + 1
        elif action == "prefix":
            prefix = [dict(m) for m in data.draw(prefixes)]
        elif action == "config":
            config = data.draw(configs())
        elif action == "recall":  # the request offers the recall tool, or stops offering it
            recall_tool = None if recall_tool else "ctxproxy_recall"
        event(f"action {action}")
        history = list(history)  # a new list each request, the same Item objects (the proxy's way)
        shared = None
        if sent is not None and data.draw(st.booleans()):  # the proxy's proof of what is shared
            same = next(
                (i for i, (a, b) in enumerate(zip(history, sent, strict=False)) if a is not b),
                min(len(history), len(sent)),
            )
            shared = SharedPrefix(sent, data.draw(st.integers(0, same)))
            event("with a shared-prefix proof")
        active = checkpoint if checkpoint is not None and checkpoint.covered_through_seq <= history[-1].seq else None
        case = Case(prefix, [i.message for i in history], history, active, budget, config)
        before = cache.incremental
        cached = outcome(case, history, active, cache, recall_tool, shared)
        assert cached == outcome(case, history, active, None, recall_tool)
        sent = history
        event("answered incrementally" if cache.incremental > before else "full pipeline")


def _project(history: list[Item], cache: ProjectionCache | None, config: PolicyConfig | None = None) -> Any:
    config = config if config is not None else PolicyConfig()
    args = ([], history, None, Budget(200_000, 4_000, 100), config, fake_count)
    return project(*args) if cache is None else project_cached(cache, Inputs(*args))


TRIMMING = PolicyConfig(
    trigger=0.02,
    target=0.01,
    late_trim=0.02,
    first_rewrite="trim",
    tool_results=ToolResultsConfig(keep_recent_groups=2, clear_at_least=2, old_max_chars=100),
)
"""trigger 3,920 tokens of `_project`'s budget; 2 recent groups, the boundary moves every 2; no
checkpoint ever commits here, so the first rewrite trims (`compact` would plan on every call)"""


def tool_history(groups: int) -> list[Item]:
    """A task and `groups` tool calls, each with a 3,000-char result of its own (identical ones
    would be repeats, sent as markers)."""
    return items(
        user("go"), *[m for i in range(groups) for m in (calls(f"c{i}"), result(f"c{i}", f"{i:04d}" + "z" * 2996))]
    )


def test_one_turn_more_reuses_the_previous_rendering() -> None:
    # trigger 3,920 tokens: the first calls pass through (nothing trimmed), the later ones trim
    config = TRIMMING
    history = tool_history(8)
    cache = ProjectionCache()
    for n in range(3, len(history) + 1):
        grown = history[:n]
        cached = _project(grown, cache, config)
        fresh = _project(grown, None, config)
        assert json.dumps(cached.messages) == json.dumps(fresh.messages)
        assert cached.record == fresh.record
        assert (cached.cache_point, cached.previous_point) == (fresh.cache_point, fresh.previous_point)
        assert json.dumps(cached.record.to_dict()) == json.dumps(fresh.record.to_dict())
    assert cache.incremental == len(history) - 2  # every call, the first one building the state
    # the first call renders its 2 groups; each later one the previous last group and the new one,
    # plus the groups whose side of the trim boundary changed (2 at a time, every second group),
    # and once all of them, when the request crosses the trigger and trimming starts
    assert cache.rendered < 2 + 3 * (len(history) - 3)
    state = cache.tail
    assert state is not None and state.sent == [item.seq for item in history]
    assert cached.record.trimmed and cached.record.to_dict()["sent_seqs"] == [[1, len(history)]]


def test_a_branch_reindexed_from_new_objects_keeps_one_history_of_entries() -> None:
    """The proxy hands a branch new objects whenever its history fell out of the history cache:
    the index is rebuilt, and the slots memoized for the earlier objects can never match again.
    They are dropped then, or each call left one more copy of the history alive in the memo."""
    config = TRIMMING
    cache = ProjectionCache()
    sizes = []
    for _ in range(6):
        history = tool_history(8)  # equal content, new objects: no proof of what it shares
        cached = _project(history, cache, config)
        assert json.dumps(cached.messages) == json.dumps(_project(history, None, config).messages)
        sizes.append(len(cache.memo))
    assert cache.rebuilt == 6
    assert sizes[1:] == sizes[:1] * 5, sizes


def test_an_in_flight_call_is_repaired_once_it_is_no_longer_last() -> None:
    history = items(user("go"), calls("a", "b"), result("a"), assistant("done?"), user("next"))
    cache = ProjectionCache()
    first = _project(history[:2], cache)
    assert first.record.repaired == ()
    later = _project(history, cache)
    assert later.record.repaired == ((2, "b"),)
    assert json.dumps(later.messages) == json.dumps(_project(history, None).messages)
    assert cache.incremental == 2 and cache.rendered == 2 + 3  # the call group again, then 2 new


def test_over_the_trigger_falls_back_to_the_full_pipeline() -> None:
    history = items(user("go"), *[assistant("x" * 4000) for _ in range(10)], user("next"))
    small = Budget(8_000, 1_000, 0)
    cache = ProjectionCache()
    cached = project_cached(cache, Inputs([], history, None, small, PolicyConfig(), fake_count))
    fresh = project([], history, None, small, PolicyConfig(), fake_count)
    assert cached.record.pruned_seqs and cached.record == fresh.record
    assert cache.incremental == 0 and cache.tail is not None  # the state is kept for later calls


def test_record_ranges_hint_is_used_only_for_its_own_seqs() -> None:
    seqs = (1, 2, 3)
    record = ProjectionRecord(0, 0, None, 0, (), (), False, None, sent_seqs=seqs, sent_ranges=(seqs, ((1, 3),)))
    assert record.to_dict()["sent_seqs"] == [[1, 3]]
    changed = replace(record, sent_seqs=(1, 3))
    assert changed.to_dict()["sent_seqs"] == [[1, 1], [3, 3]]
    assert record == replace(record, sent_ranges=None)  # not part of equality


class Frozen(dict[str, Any]):
    """A mapping that is not exactly a dict: projections send plain-dict copies of it."""


def test_non_dict_messages_are_sent_as_dicts_on_both_paths() -> None:
    history = items(user("go"), calls("a"), result("a", "q" * 9000), assistant("ok"))
    history.append(Item(5, Frozen(role="user", content="next"), fake_count({"role": "user", "content": "next"})))
    history.insert(1, Item(2, Frozen(role="assistant", content="hm"), 9))
    history = [Item(i + 1, item.message, item.tokens) for i, item in enumerate(history)]
    prefix = [Frozen(role="system", content="be brief")]
    cache = ProjectionCache()
    for n in (2, 4, 6):
        cached = project_cached(
            cache, Inputs(prefix, history[:n], None, Budget(200_000, 4_000, 100), PolicyConfig(), fake_count)
        )
        fresh = project(prefix, history[:n], None, Budget(200_000, 4_000, 100), PolicyConfig(), fake_count)
        assert all(type(m) is dict for m in cached.messages)
        assert json.dumps(cached.messages) == json.dumps(fresh.messages)
        assert cached.record == fresh.record
        assert (cached.cache_point, cached.previous_point) == (fresh.cache_point, fresh.previous_point)
    assert cache.incremental == 3


NO_RECENT = replace(TRIMMING, tool_results=ToolResultsConfig(keep_recent_groups=0, clear_at_least=1, old_max_chars=100))
"""no recent group kept (a small window's `recent_groups`): the boundary moves every group, and
the in-flight last group, protected, is trimmed only on the next request"""


@pytest.mark.parametrize("config", [TRIMMING, NO_RECENT], ids=["keep-2", "keep-0"])
def test_the_cache_point_ends_the_old_results_and_its_prefix_survives_each_boundary_move(config: PolicyConfig) -> None:
    # keep 2 recent groups, the boundary moves every 2 groups (or every group, keeping none):
    # each move rewrites the results that become old, and everything through the previous cache
    # point must keep its bytes -- with none kept, the point is never the in-flight last result
    history = tool_history(12)
    cache = ProjectionCache()
    previous: Any = None
    points, moves = [], 0
    for n in range(3, len(history) + 1, 2):  # each request adds one whole group
        projection = _project(history[:n], cache, config)
        fresh = _project(history[:n], None, config)
        assert (projection.cache_point, projection.previous_point) == (fresh.cache_point, fresh.previous_point)
        point = projection.cache_point
        if point is not None:
            message = projection.messages[point]
            assert message["role"] == "tool" and "first 45 and last 45 kept" in message["content"]
            later = projection.messages[point + 1 :]
            assert not any("first 45 and last 45 kept" in str(m.get("content")) for m in later)
        if previous is not None and previous.cache_point is not None:
            kept = previous.messages[: previous.cache_point + 1]
            assert json.dumps(projection.messages[: len(kept)]) == json.dumps(kept)
            if point != previous.cache_point:
                moves += 1
                changed = next(
                    i for i, (a, b) in enumerate(zip(previous.messages, projection.messages, strict=False)) if a != b
                )
                # the move rewrites the next group's result, just past the point, where the
                # projection's previous point says the previous cache point was
                assert changed == previous.cache_point + 2
                assert projection.previous_point == previous.cache_point
        points.append(point)
        previous = projection
    assert moves >= 3 and points[0] is None and points[-1] is not None


def stamp(draft: Any, ctx: Any) -> Any:
    """A step the memo does not know: every tool result of the tail is sent with a prefix."""
    tail = []
    for slot in draft.tail:
        for position, message in enumerate(slot.messages):
            if message.get("role") == "tool":
                stamped = {**message, "content": "[stamped] " + str(message.get("content") or "")}
                slot = slot.with_message(position, stamped, ctx.count(stamped))
        tail.append(slot)
    return replace(draft, tail=tuple(tail), rewritten=True)


@SETTINGS
@given(prefixes, st.one_of(ROOMY, budgets()), configs(), st.data())
def test_a_step_the_memo_does_not_know_is_computed_by_the_pipeline(
    prefix: list[Any], budget: Budget, config: PolicyConfig, data: st.DataObject
) -> None:
    """Adding a step is registering it (`STEPS`): the memo reproduces only the steps it lists and
    projects a config naming any other one through the full pipeline, so the result is the same
    as without a cache, turn after turn; the step's rewriting marks the record `rewritten`."""
    from policies.projection import STEPS

    order = (*config.order[:-1], "stamp", config.order[-1])
    config = replace(config, order=order)
    STEPS["stamp"] = stamp
    try:
        messages: list[dict[str, Any]] = [data.draw(user_message(0))]
        cache = ProjectionCache()
        for turn in range(1, data.draw(st.integers(2, 8))):
            messages += data.draw(group_of(data.draw(st.sampled_from(("user", "tools", "assistant"))), turn))
            case = Case(prefix, messages, items(*messages), None, budget, config)
            got = outcome(case, case.items, None, cache)
            want = outcome(case, case.items, None, None)
            assert got == want
            if got[0] != "overflow" and "[stamped] " in got[0]:
                event("stamped")
                assert got[2].rewritten
    finally:
        del STEPS["stamp"]


def test_an_order_naming_an_unregistered_step_is_refused() -> None:
    from policies.config import SettingError
    from policies.projection import check_order

    with pytest.raises(SettingError, match=r"unknown steps \['stamp'\]"):
        check_order(("trim_tool_results", "stamp", "prune_groups"))
