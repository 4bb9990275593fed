"""The `caches:` config section: defaults, validation, and the bounds it gives the caches built from it."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.catalog import ModelCatalog
from proxy.config import Caches
from proxy.config_file import parse_config
from proxy.errors import ConfigError
from proxy.projector import Projector
from proxy.services import history_cache

ROUTES = [{"name": "r", "match": {"model": "*"}, "upstream": {"base_url": "https://api.example.test/v1"}}]


def parse(caches: Any) -> Caches:
    return parse_config({"routes": ROUTES, "caches": caches}, "cfg.yaml", {}).caches


def test_defaults() -> None:
    caches = parse_config({"routes": ROUTES}, "cfg.yaml", {}).caches
    assert caches == Caches(
        history_mb=160,
        histories_per_first_message=64,
        bodies_per_credential=64,
        token_counts=100_000,
        projection_branches=256,
        projection_memo_entries=4096,
        calibrations=256,
    )


def test_bounds_reach_the_caches() -> None:
    caches = parse(
        {
            "history_mb": 1.5,
            "histories_per_first_message": 2,
            "bodies_per_credential": 5,
            "token_counts": 7,
            "projection_branches": 3,
        }
    )
    history = history_cache(caches)
    assert (history.max_bytes, history.per_key, history.bodies_per_credential) == (1536 * 1024, 2, 5)
    assert history_cache(parse({"history_per_conversation": 3})).per_key == 3  # its old name
    projector = Projector(ModelCatalog(), caches)
    counter = projector.counter("gpt-4o")
    for i in range(20):
        counter.count({"role": "user", "content": f"message {i}"})
        projector.branch_memo(f"branch-{i}")
    assert len(counter) == 7
    assert projector.cache_sizes()["projection_branches"] == 3


@pytest.mark.parametrize("field", ["history_mb", "token_counts", "projection_branches", "calibrations"])
def test_non_positive_bound_is_a_problem_line(field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({field: 0})
    assert info.value.problems == [f"cfg.yaml: caches.{field}: Input should be greater than 0"]


def test_unknown_cache_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse({"history_bytes": 10})
    assert info.value.problems == ["cfg.yaml: caches.history_bytes: Extra inputs are not permitted"]
