"""The history index and `ProjectionCache`: a cache only saves work, it never changes a result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.base import Budget, Checkpoint, ContextOverflow, Item
from policies.config import PinsConfig, PolicyConfig
from policies.draft import Inputs
from policies.groups import group_index_of, group_items
from policies.history_index import SharedPrefix, index_items
from policies.memo import ProjectionCache, project_cached
from policies.outcome import Projection
from policies.pins import latest_user_seq, pinned_seqs
from policies.projection import project
from tests.policies.helpers import assistant, calls, items, result, user
from tests.policies.strategies import Case, cases, fake_count
from tests.policies.test_properties import SETTINGS

BIG = Budget(200_000, 4_000, 100)


def outcome(
    case: Case,
    items_: list[Item],
    checkpoint: Checkpoint | None,
    cache: ProjectionCache | None,
    recall_tool: str | None = None,
    shared: SharedPrefix | None = None,
) -> Any:
    try:
        args = (case.prefix, items_, checkpoint, case.budget, case.config, fake_count)
        if cache is None:
            projection = project(*args, recall_tool=recall_tool)
        else:
            projection = project_cached(cache, Inputs(*args, recall_tool=recall_tool), shared)
    except ContextOverflow as exc:
        return ("overflow", str(exc))
    return fingerprint(projection)


def fingerprint(projection: Projection) -> Any:
    record = projection.record
    chunks = None
    if record.compaction is not None:
        chunks = [[(i.seq, json.dumps(i.message), i.tokens) for i in chunk] for chunk in record.compaction.chunks]
    points = (projection.cache_point, projection.previous_point)
    return json.dumps(projection.messages), json.dumps(record.to_dict()), record, chunks, points


def _checkpoint_for(case: Case, n: int) -> Checkpoint | None:
    checkpoint = case.checkpoint
    return checkpoint if checkpoint is None or checkpoint.covered_through_seq <= n else None


SHARED = ProjectionCache(max_entries=64)  # shared by unrelated histories: must still be exact


@SETTINGS
@given(cases(max_groups=30), st.data())
def test_a_cache_never_changes_the_result(case: Case, data: st.DataObject) -> None:
    expected = outcome(case, case.items, case.checkpoint, None)
    assert outcome(case, case.items, case.checkpoint, SHARED) == expected
    # the proxy's pattern: the same Item objects, one request after another
    cache = ProjectionCache(max_entries=data.draw(st.sampled_from((1, 16, 16384))))
    cuts = sorted(data.draw(st.lists(st.integers(1, len(case.items)), max_size=4)))
    for n in [*cuts, len(case.items)]:
        checkpoint = _checkpoint_for(case, n)
        assert outcome(case, case.items[:n], checkpoint, cache) == outcome(case, case.items[:n], checkpoint, None)
    assert outcome(case, case.items, case.checkpoint, cache) == expected
    # an equal but new Item (and message) anywhere: the new objects are the ones used
    position = data.draw(st.integers(0, len(case.items) - 1))
    changed = list(case.items)
    old = changed[position]
    changed[position] = Item(old.seq, dict(reversed(list(old.message.items()))), old.tokens)
    assert outcome(case, changed, case.checkpoint, cache) == outcome(case, changed, case.checkpoint, None)


def test_cache_resumes_from_the_stable_point_and_rechecks_identity() -> None:
    history = items(user("go"), calls("a"), result("a", "x" * 5000), assistant("ok"), user("more"), calls("b"))
    cache = ProjectionCache()
    first = project_cached(cache, Inputs([], history[:4], None, BIG, PolicyConfig(), fake_count))
    second = project_cached(cache, Inputs([], history, None, BIG, PolicyConfig(), fake_count))
    assert (cache.rebuilt, cache.reused) == (1, 1)
    assert second.messages[: len(first.messages)] == first.messages
    # an equal message with another key order at a stable position: not reused, its bytes are sent
    edited = list(history)
    edited[0] = Item(1, {"content": "go", "role": "user"}, history[0].tokens)
    third = project_cached(cache, Inputs([], edited, None, BIG, PolicyConfig(), fake_count))
    assert cache.rebuilt == 2
    assert third.messages[0] is edited[0].message
    assert json.dumps(third.messages) == json.dumps(project([], edited, None, BIG, PolicyConfig(), fake_count).messages)


class Sealed(list[Item]):
    """An indexed list that fails the test if anything walks it again."""

    sealed = False

    def __iter__(self) -> Any:
        assert not self.sealed, "walked"
        return super().__iter__()


def test_a_shared_prefix_proof_resumes_without_walking_the_shared_items() -> None:
    history = items(user("go"), calls("a"), result("a"), assistant("ok"), user("more"), calls("b"), result("b"))
    first = Sealed(history[:5])
    previous = index_items(first)
    first.sealed = True
    grown = [*first[:5], *history[5:]]
    resumed = index_items(grown, previous, SharedPrefix(first, 5))
    assert resumed.base is previous.serial
    assert resumed.groups[: previous.stable_groups] == previous.groups[: previous.stable_groups]
    assert all(a is b for a, b in zip(resumed.groups, previous.groups[: previous.stable_groups], strict=False))
    fresh = index_items(grown)
    for name in ("groups", "firsts", "user_seqs", "total_tokens", "stable", "stable_groups", "stable_tokens"):
        assert getattr(resumed, name) == getattr(fresh, name)
    # a proof about another list, or one short of the stable point: the walk decides (and finds
    # the edited item), never the proof
    edited = [grown[0], Item(2, dict(grown[1].message), grown[1].tokens), *grown[2:]]
    first.sealed = False
    for proof in (SharedPrefix(list(first), 5), SharedPrefix(first, previous.stable - 1)):
        assert index_items(edited, previous, proof).base is None
    assert index_items(grown, previous, SharedPrefix(list(first), 5)).base is previous.serial  # walked: same items


def test_a_cache_takes_its_last_index_over_and_only_its_own() -> None:
    history = items(user("go"), calls("a"), result("a"), assistant("ok"), user("more"), calls("b"), result("b"))
    previous = index_items(history[:5])
    kept = (list(previous.groups), list(previous.firsts), list(previous.user_seqs))
    index_items(history, previous)  # not given up: left as it was
    assert (previous.groups, previous.firsts, previous.user_seqs) == kept
    taken = index_items(history, previous, take=True)
    assert taken.base is previous.serial and taken.groups is previous.groups  # extended in place
    fresh = index_items(history)
    assert (taken.groups, taken.firsts, taken.user_seqs) == (fresh.groups, fresh.firsts, fresh.user_seqs)
    # a resume that raises leaves the cache with no index to resume from, never a half-cut one
    cache = ProjectionCache()
    cache.index(history[:5])
    with pytest.raises(ValueError, match="ascending"):
        cache.index([*history[:5], history[2]])
    assert cache.last_index is None
    assert cache.index(history).groups == fresh.groups and cache.rebuilt == 2


def test_trimmed_results_are_shared_between_projections_through_the_cache() -> None:
    history = items(
        user("go"), *[m for i in range(12) for m in (calls(f"c{i}"), result(f"c{i}", "z" * 3000))], user("next")
    )
    cache = ProjectionCache()
    config = PolicyConfig(trigger=0.03, target=0.01, late_trim=0.03)  # over the trigger as sent, under it trimmed
    first = project_cached(cache, Inputs([], history, None, BIG, config, fake_count))
    second = project_cached(cache, Inputs([], history, None, BIG, config, fake_count))
    assert first.record.trimmed and first.record == second.record
    assert all(a is b for a, b in zip(first.messages, second.messages, strict=True))
    fresh = project([], history, None, BIG, config, fake_count)
    assert json.dumps(first.messages) == json.dumps(fresh.messages)


@SETTINGS
@given(cases(max_groups=30))
def test_index_agrees_with_the_plain_functions(case: Case) -> None:
    index = index_items(case.items)
    groups = group_items(case.items)
    assert index.groups == groups
    assert index.firsts == [g.first_seq for g in groups]
    assert index.total_tokens == sum(i.tokens for i in case.items)
    assert index.last_user == latest_user_seq(case.items)
    assert index.pinned(case.config.pins) == pinned_seqs(case.items, case.config.pins)
    assert index.tokens_of(frozenset(i.seq for i in case.items[::3])) == sum(i.tokens for i in case.items[::3])
    for item in case.items:
        position = group_index_of(groups, item.seq)
        assert position == index.group_of(item.seq)
        assert item in groups[position].items


def test_rule_pins_are_reused_over_the_stable_part() -> None:
    config = PinsConfig(first_user=False, patterns=(r"MUST",))
    history = items(user("a MUST"), assistant("x"), user("b"), assistant("y"), user("c MUST"), calls("q"))
    cache = ProjectionCache()
    first = cache.index(history[:4]).pinned(config)
    assert first == frozenset({1})
    assert cache.index(history).pinned(config) == pinned_seqs(history, config) == frozenset({1, 5})


def test_seqs_must_ascend() -> None:
    history = items(user("a"), assistant("b"))
    with pytest.raises(ValueError, match="ascending"):
        index_items([history[1], history[0]])
    with pytest.raises(ValueError, match="max_entries"):
        ProjectionCache(max_entries=0)
