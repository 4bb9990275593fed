"""Config validation, budgets, records and the overflow error."""

from __future__ import annotations

import json

import pytest

from policies.base import Budget, ContextOverflow, Item
from policies.config import PinsConfig, PolicyConfig, SettingError, ToolResultsConfig
from policies.outcome import CompactionPlan, ProjectionRecord, TrimEntry


def test_input_budget_is_window_minus_output() -> None:
    assert Budget(16_000, 2_000, 300).input_budget == 14_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context_window": 0, "max_output_tokens": 0}, "context_window must be > 0"),
        ({"context_window": 100, "max_output_tokens": 100}, "max_output_tokens must be"),
        ({"context_window": 100, "max_output_tokens": 1, "fixed_tokens": -1}, "fixed_tokens"),
    ],
)
def test_budget_validation(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Budget(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trigger": 0.0}, "trigger must be within"),
        ({"trigger": 1.5}, "trigger must be within"),
        ({"trigger": 0.6, "target": 0.6}, r"target \(0\.6\) must be below trigger \(0\.6\)"),
        ({"target": 0.0}, "target must be > 0"),
        ({"keep_recent_tokens": -1}, "keep_recent_tokens"),
        ({"summary_chunk_tokens": 10}, "summary_chunk_tokens"),
        ({"order": ("trim_tool_results", "shrink")}, "must end with 'prune_groups'"),
        ({"order": ("prune_groups", "prune_groups")}, "must not repeat"),
        ({"order": ("prune_groups", "trim_tool_results")}, "must end with 'prune_groups'"),
    ],
)
def test_policy_config_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PolicyConfig(**kwargs)  # type: ignore[arg-type]


def test_nested_config_validation() -> None:
    with pytest.raises(ValueError, match="recent_max_chars"):
        ToolResultsConfig(recent_max_chars=100, old_max_chars=400)
    with pytest.raises(ValueError, match="clear_at_least"):
        ToolResultsConfig(clear_at_least=0)
    with pytest.raises(ValueError, match="head_ratio"):
        ToolResultsConfig(head_ratio=1.5)
    with pytest.raises(ValueError, match="unknown role"):
        PinsConfig(roles=("boss",))
    with pytest.raises(ValueError, match="invalid regex"):
        PinsConfig(patterns=("(",))


def test_lists_from_config_loaders_become_tuples() -> None:
    config = PolicyConfig(
        order=["summary_tail", "prune_groups"],  # type: ignore[arg-type]
        pins=PinsConfig(roles=["user"], patterns=["MUST"]),  # type: ignore[arg-type]
        tool_results=ToolResultsConfig(exclude_tools=["search"]),  # type: ignore[arg-type]
    )
    assert config.order == ("summary_tail", "prune_groups")
    assert config.pins.roles == ("user",) and config.pins.patterns == ("MUST",)
    assert config.tool_results.exclude_tools == ("search",)
    with pytest.raises(AttributeError):
        config.trigger = 0.9  # type: ignore[misc]


def test_record_to_dict_is_json_safe_and_compact() -> None:
    plan = CompactionPlan(2, 3, ((Item(2, {"role": "user", "content": "a"}, 5), Item(3, {}, 7)),), "why")
    record = ProjectionRecord(
        client_tokens=100,
        sent_tokens=50,
        checkpoint_generation=None,
        covered_through_seq=0,
        trimmed=(TrimEntry(3, "c1", 1000, 400),),
        pruned_seqs=(1,),
        over_trigger=True,
        compaction=plan,
        sent_seqs=(2, 3, 4, 9),
        repaired=((2, "c9"),),
    )
    data = json.loads(json.dumps(record.to_dict()))
    assert data["sent_seqs"] == [[2, 4], [9, 9]]
    assert data["trimmed"] == [
        {"seq": 3, "tool_call_id": "c1", "original_chars": 1000, "kept_chars": 400, "how": "head+tail"}
    ]
    assert data["compaction"]["chunks"] == [{"first_seq": 2, "last_seq": 3, "items": 2, "tokens": 12}]
    assert data["repaired"] == [{"seq": 2, "tool_call_id": "c9"}]


def test_context_overflow_message_names_every_number() -> None:
    error = ContextOverflow(21_000, 14_000, 16_000, 2_000)
    assert (error.needed_tokens, error.input_budget, error.context_window, error.max_output_tokens) == (
        21_000,
        14_000,
        16_000,
        2_000,
    )
    assert str(error).startswith(
        "context length exceeded: even after dropping all unpinned history the request needs 21,000 "
        "tokens; the model allows 14,000 input tokens (window 16,000 − max output 2,000)."
    )


def test_step_names_are_checked_against_the_one_registry() -> None:
    """`PolicyConfig` checks the order's shape; the names are the registry's (`STEPS`), checked
    when a config is loaded (`proxy.config.Policy`) and before a pipeline runs."""
    from policies.projection import check_order, project
    from proxy.policy_settings import Policy

    with pytest.raises(ValueError, match=r"unknown steps \['shrink'\]"):
        Policy(order=("shrink", "prune_groups"))
    check_order(PolicyConfig().order)
    bogus = PolicyConfig(order=("shrink", "prune_groups"))
    with pytest.raises(SettingError, match="unknown steps"):
        project([], [], None, Budget(8_000, 1_000), bogus, len)
