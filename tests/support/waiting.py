"""One way to wait for something that happens in another thread or process.

Call records, checkpoints, retention passes and server start-ups all land a moment after the
action a test can see. Tests poll for them with :func:`wait_until` instead of sleeping a fixed
time: it returns as soon as the condition holds, and when it never does it fails naming what it
waited for and the last value seen, instead of a bare ``assert`` on stale data.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str | None = None,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy, and return that.

    Exceptions of the ``ignore`` types count as "not yet" (a server still starting, say). After
    ``timeout`` seconds an :class:`AssertionError` names ``what`` (or the predicate) and the last
    value or exception.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
        except ignore as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what or describe(predicate)}; last: {last!r}"
            )
        time.sleep(interval)


def describe(predicate: Callable[..., object]) -> str:
    """A readable name: the function's name and first docstring line, or a lambda's source line."""
    name = getattr(predicate, "__qualname__", repr(predicate))
    if "<lambda>" not in name:
        doc = (inspect.getdoc(predicate) or "").strip().splitlines()
        return f"{name} ({doc[0]})" if doc else name
    try:
        return inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return name
