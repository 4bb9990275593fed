"""The transient-part rule as configured (`transient_parts`, `transient_max_chars`): the defaults
are the shipped rule, an operator's list replaces it, `[]` turns it off, a pattern that does not
compile is refused at startup, and the history cache built from the config hashes with it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy import identify, renderings
from proxy.config_file import parse_config
from proxy.errors import ConfigError
from proxy.renderings import Transient
from proxy.services import history_cache

ROUTES = [{"name": "r", "match": {"model": "*"}, "upstream": {"base_url": "https://api.example.test/v1"}}]
PROMPT = {"type": "text", "text": "Read the README."}
QWEN_DATE = (
    "<system-reminder>\nThe current date is: Saturday, December 5, 2026. Note: This is the authoritative "
    'current date \u2014 it may differ from the "Today\'s date" mentioned earlier in the conversation '
    "startup context.\n</system-reminder>"
)
PLAN = "<system-reminder>Plan mode is on.</system-reminder>"


def rule(**section: Any) -> Transient:
    config = parse_config({"routes": ROUTES, **section}, "cfg.yaml", {})
    return history_cache(config.caches, Transient.of(config.transient_parts, config.transient_max_chars)).transient


texts = st.lists(st.text(max_size=12).filter(lambda t: "system-reminder" not in t), min_size=1, max_size=3)
dates = st.lists(st.sampled_from(["Friday, December 4, 2026", "Saturday, December 5, 2026"]), max_size=2)


def dated(days: list[str], parts: list[str]) -> dict[str, Any]:
    reminders = [{"type": "text", "text": f"<system-reminder>Today's date is {d}.</system-reminder>"} for d in days]
    return {"role": "user", "content": [*reminders, *({"type": "text", "text": t} for t in parts)]}


@given(dates, texts, dates, texts)
def test_the_rule_never_joins_messages_whose_other_parts_differ(
    days_a: list[str], a: list[str], days_b: list[str], b: list[str]
) -> None:
    """With or without date reminders, two user messages are one exactly when their other parts
    are the same; the history after an edited one forks there."""
    assert same(rule(), dated(days_a, a), dated(days_b, b)) == (a == b)
    answer = {"role": "assistant", "content": "ok"}
    first = identify.chain("t", [dated(days_a, a), answer, dated([], ["go on"])])
    second = identify.chain("t", [dated(days_b, b), answer, dated([], ["go on"])])
    assert (first[-1] == second[-1]) == (a == b)


def user(*texts: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts] + [PROMPT]}


def same(transient: Transient, a: dict[str, Any], b: dict[str, Any]) -> bool:
    return identify.chain("t", [a], transient) == identify.chain("t", [b], transient)


def test_the_defaults_are_the_shipped_rule() -> None:
    default = rule()
    assert default == renderings.DEFAULT_TRANSIENT
    assert same(default, user(QWEN_DATE), user())  # Qwen Code's per-turn date, as it sends it
    assert not same(default, user(PLAN), user())


def test_an_operators_list_replaces_the_defaults() -> None:
    plan = rule(transient_parts=[r"<system-reminder>Plan mode is (?:on|off)\.</system-reminder>"])
    assert same(plan, user(PLAN), user())
    assert not same(plan, user(QWEN_DATE), user())  # the defaults are gone, not added to


def test_an_empty_list_turns_the_rule_off_and_length_bounds_it() -> None:
    assert not same(rule(transient_parts=[]), user(QWEN_DATE), user())
    assert not same(rule(transient_max_chars=100), user(QWEN_DATE), user())  # longer: content


def test_the_rule_is_for_matching_only() -> None:
    """The hashed form drops the part; the message itself is not changed."""
    message = user(QWEN_DATE)
    canonical = identify.canonical(message, rule())
    assert canonical["content"] == "Read the README." and len(message["content"]) == 2


@pytest.mark.parametrize("section", [{"transient_parts": ["<system-reminder>(unclosed"]}, {"transient_max_chars": -1}])
def test_a_bad_rule_is_refused_at_startup(section: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        parse_config({"routes": ROUTES, **section}, "cfg.yaml", {})
