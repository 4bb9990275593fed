"""The wire contract suite's parametrization: every wire of the registry, with its samples."""

from __future__ import annotations

import importlib

import pytest

from proxy.protocols import WIRES
from proxy.protocols.base import Wire
from tests.wires.samples import Samples

MAIN = [wire for wire in WIRES if wire.purpose == "main"]
"""The wires whose calls are answered with a message (a client's own compaction endpoint is not)."""


def wire_id(wire: Wire) -> str:
    return f"{wire.name}{wire.path if wire.purpose == 'main' else ':' + wire.purpose}"


def samples_of(wire: Wire) -> Samples:
    try:
        module = importlib.import_module(f"tests.wires.samples_{wire.name}")
    except ModuleNotFoundError:
        pytest.fail(
            f"wire {wire.name!r} has no samples: add tests/wires/samples_{wire.name}.py (tests/wires/samples.py)"
        )
    return module.SAMPLES


@pytest.fixture(params=WIRES, ids=wire_id)
def any_wire(request: pytest.FixtureRequest) -> Wire:
    """Every registered wire."""
    return request.param


@pytest.fixture(params=MAIN, ids=wire_id)
def wire(request: pytest.FixtureRequest) -> Wire:
    """Every registered wire whose calls are answered with a message."""
    return request.param


@pytest.fixture
def samples(wire: Wire) -> Samples:
    return samples_of(wire)
