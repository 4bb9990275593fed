"""The real proxy served with a window on its garbage collector, for tests of reference cycles.

``python -m tests.support.gc_probe serve --config FILE --host H --port P`` serves exactly what
``ctxproxy serve`` serves (`proxy.serving.server.run`: the young-GC threshold, the edge, the app from
`create_app`), plus two paths this wrapper answers itself, before the edge:

- ``POST /_gc/start``: a full collection, then automatic collection off and
  ``gc.DEBUG_SAVEALL`` on, so every object found in a cycle from here on is kept for inspection.
- ``POST /_gc/report``: one collection; the JSON answer says what it found (:func:`inspect`),
  then the saved objects are dropped and automatic collection is on again.

A cycle is found only once nothing outside it references it any more, so a test calls
``report`` after the work it measures is over, background bookkeeping included.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

from proxy.config_file import load_config

OURS = tuple(str(Path(__file__).resolve().parents[2] / package) for package in ("proxy", "policies"))
BIG = 10_000
"""bytes of one str / bytes / bytearray / memoryview held by a cycle that count as large"""


def describe(obj: object) -> str:
    """A type name, and for code objects in a cycle where the code is."""
    if isinstance(obj, types.FrameType):
        return f"frame {obj.f_code.co_filename}:{obj.f_code.co_name}"
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)):
        return f"{type(obj).__name__} {obj.__qualname__}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def is_ours(obj: object) -> bool:
    if isinstance(obj, types.FrameType):
        return obj.f_code.co_filename.startswith(OURS)
    if isinstance(obj, types.FunctionType):
        return obj.__code__.co_filename.startswith(OURS)
    return type(obj).__module__.split(".")[0] in ("proxy", "policies")


def _size(obj: object) -> int:
    if isinstance(obj, memoryview):
        return obj.nbytes
    return sys.getsizeof(obj) if isinstance(obj, (str, bytes, bytearray)) else 0


def inspect(garbage: list[Any]) -> dict[str, Any]:
    """What a collection found: how many objects, by type; those of the proxy's own code
    (`proxy/`, `policies/`: classes, functions, frames); and each large string or buffer a
    cycle held (with the type of the object that held it)."""
    big = []
    for obj in garbage:
        for ref in gc.get_referents(obj):
            if _size(ref) > BIG:
                big.append({"size": _size(ref), "type": type(ref).__name__, "held_by": describe(obj)})
    return {
        "collected": len(garbage),
        "types": Counter(describe(obj) for obj in garbage).most_common(25),
        "ours": sorted({describe(obj) for obj in garbage if is_ours(obj)}),
        "big": big,
    }


class GarbageProbe:
    """ASGI: ``/_gc/start`` and ``/_gc/report`` here, everything else to `app`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path") if scope["type"] == "http" else None
        if path == "/_gc/start":
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.disable()
            await _answer(send, {"started": True})
        elif path == "/_gc/report":
            gc.collect()
            found = inspect(gc.garbage)
            gc.garbage.clear()
            gc.set_debug(0)
            gc.enable()
            await _answer(send, found)
        else:
            await self.app(scope, receive, send)


async def _answer(send: Any, obj: object) -> None:
    body = json.dumps(obj).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main(argv: list[str] | None = None) -> int:
    from proxy.serving.app import create_app
    from proxy.serving.server import run

    p = argparse.ArgumentParser(prog="python -m tests.support.gc_probe")
    p.add_argument("command", choices=["serve"])
    p.add_argument("--config", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    config = load_config(args.config)
    run(config, GarbageProbe(create_app(config)), args.host, args.port, "warning", False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
