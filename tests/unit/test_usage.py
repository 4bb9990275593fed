"""Usage normalization: OpenAI chat counts cached tokens inside prompt_tokens; unknown stays None."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.protocols.openai_chat.usage import from_openai_chat
from proxy.usage import TOKEN_FIELDS, Usage


def test_full_usage() -> None:
    raw = {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 128, "audio_tokens": 0},
    }
    assert from_openai_chat(raw) == Usage(
        input_total=1200, input_uncached=176, cache_read=1024, cache_write=None, output=300, reasoning=128
    )


def test_cached_is_part_of_prompt_not_added() -> None:
    u = from_openai_chat(
        {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 100}}
    )
    assert u.input_total == 100
    assert u.cache_read == 100
    assert u.input_uncached == 0


def test_zero_cached_is_zero_not_none() -> None:
    u = from_openai_chat({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}})
    assert (u.cache_read, u.input_uncached) == (0, 10)


def test_missing_details_are_none_not_zero() -> None:
    u = from_openai_chat({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12})
    assert u == Usage(input_total=10, input_uncached=None, cache_read=None, cache_write=None, output=2, reasoning=None)


@pytest.mark.parametrize(
    "details",
    [None, {}, {"audio_tokens": 3}, {"cached_tokens": None}, {"cached_tokens": "12"}, {"cached_tokens": True}, []],
)
def test_unusable_cached_details_are_none(details: Any) -> None:
    u = from_openai_chat({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": details})
    assert u.cache_read is None
    assert u.input_uncached is None
    assert u.input_total == 10


def test_reasoning_from_completion_details() -> None:
    u = from_openai_chat(
        {"prompt_tokens": 1, "completion_tokens": 50, "completion_tokens_details": {"reasoning_tokens": 40}}
    )
    assert (u.output, u.reasoning) == (50, 40)
    u = from_openai_chat({"prompt_tokens": 1, "completion_tokens": 50, "completion_tokens_details": {}})
    assert u.reasoning is None


def test_missing_prompt_tokens_leaves_uncached_unknown() -> None:
    u = from_openai_chat({"completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 5}})
    assert u == Usage(input_total=None, input_uncached=None, cache_read=5, output=3)


@pytest.mark.parametrize("raw", [None, {}, [], "usage", 3])
def test_no_usage_is_all_none(raw: Any) -> None:
    assert from_openai_chat(raw) == Usage()
    assert from_openai_chat(raw).to_dict() == {
        "input_total": None,
        "input_uncached": None,
        "cache_read": None,
        "cache_write": None,
        "output": None,
        "reasoning": None,
    }


def test_non_integer_counts_are_none() -> None:
    u = from_openai_chat({"prompt_tokens": "10", "completion_tokens": 2.5})
    assert (u.input_total, u.output) == (None, None)
    u = from_openai_chat({"prompt_tokens": False, "completion_tokens": True})
    assert (u.input_total, u.output) == (None, None)


def test_to_dict_exact() -> None:
    assert Usage(1, 2, 3, None, 5, None).to_dict() == {
        "input_total": 1,
        "input_uncached": 2,
        "cache_read": 3,
        "cache_write": None,
        "output": 5,
        "reasoning": None,
    }


def test_to_dict_names_every_field_in_order() -> None:
    """`to_dict` is written out field by field: a field added to `Usage` must be added there too."""
    assert list(Usage().to_dict()) == list(TOKEN_FIELDS)
