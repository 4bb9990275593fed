"""The serving process's collector tuning (`proxy/serving/heap.py`): fewer young collections, cycles
still collected without anyone calling `gc.collect`."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from proxy.serving import heap


@pytest.fixture
def tuned() -> Iterator[None]:
    before = gc.get_threshold()
    heap.tune()
    try:
        yield
    finally:
        gc.set_threshold(*before)


def test_tune_raises_only_the_young_threshold(tuned: None) -> None:
    assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
    assert gc.isenabled()


def test_a_reference_cycle_is_still_collected_automatically(tuned: None) -> None:
    class Node:
        pass

    gc.collect()
    node = Node()
    node.me = node  # type: ignore[attr-defined]
    ref = weakref.ref(node)
    del node
    alive = []
    for _ in range(heap.YOUNG_THRESHOLD // 2):
        alive.append([])
    assert ref() is not None  # below the threshold: the cycle waits
    for _ in range(heap.YOUNG_THRESHOLD):
        alive.append([])
    assert ref() is None
