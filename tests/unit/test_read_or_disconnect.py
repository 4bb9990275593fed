"""`relay.read_or_disconnect`: an answer already in memory is returned without a disconnect
watch (no task started and cancelled for it); any other is read under `or_disconnect`, which
still sees the client hang up."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.relay import read_or_disconnect
from proxy.upstream.base import HeldResponse, UpstreamResponse


class Slow(UpstreamResponse):
    """An answer whose body is still on its way (it never comes)."""

    def __init__(self) -> None:
        super().__init__(200, [], "application/json", None, 0.0)
        self.closed = asyncio.Event()

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        try:
            await asyncio.Event().wait()
        finally:
            self.closed.set()
        return b""


async def never_called() -> dict[str, Any]:
    raise AssertionError("the answer was in memory: nothing to watch")


async def test_an_answer_in_memory_is_read_without_a_watch() -> None:
    held = HeldResponse(Slow(), b'{"ok":true}')
    before = asyncio.all_tasks()
    assert await read_or_disconnect(never_called, held) == b'{"ok":true}'
    assert asyncio.all_tasks() == before  # no watcher task, not even a cancelled one


async def test_an_answer_on_its_way_is_abandoned_when_the_client_hangs_up() -> None:
    slow = Slow()
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    reading = asyncio.ensure_future(read_or_disconnect(receive, slow))
    await asyncio.sleep(0.01)
    assert not reading.done()
    gone.set()
    assert await asyncio.wait_for(reading, 5) is None
    assert slow.closed.is_set()
