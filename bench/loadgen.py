"""Load generator, run in its own process so its CPU never counts against the proxy.

    python -m bench.loadgen SPEC.json

Raw asyncio HTTP/1.1 client, one keep-alive connection per worker, request bytes built before
the clock starts. Protocol with the parent on stdin/stdout: build bodies, warm up (one
unmeasured request per worker: it stores the conversation in ctxproxy and opens the connection),
print "READY", wait for "GO", run, print one JSON line with the samples.

Every request k of a worker continues its conversation by one turn: the base body, then
k x (the mock's exact assistant reply + a new user message), so ctxproxy sees a stored history
plus exactly one new turn per request (never an idempotent replay). Workers use distinct API
keys, so each owns one conversation (a tenant each). With `conversations_per_worker` K > 1 a
worker owns K conversations (a key each) and takes them in turn: every conversation is stored by
the warm-up, then each round grows all K by one turn, so K x workers conversations are active at
once and a request's conversation was last seen K requests ago on its worker. With `auth_key`
every worker sends that one key (one tenant); with `mark_message` i, message i of each
conversation is marked with the conversation's name, so conversations under one key are still
distinct (i = 1: they open differently; a later i: they open alike, as agents started in one
repository or by one harness do).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from bench.mock_upstream import REPLY_TEXT


def next_turn(k: int) -> list[dict[str, Any]]:
    observation = (
        f"Observation for step {k}: the command finished with exit code 0. "
        + "Output lines were checked and match the expected values. " * 6
    )
    return [{"role": "assistant", "content": REPLY_TEXT}, {"role": "user", "content": observation}]


def build_bodies(spec: dict[str, Any], mark: str | None = None) -> list[bytes]:
    """The bodies of one conversation, turn by turn (message `mark_message` marked with `mark`)."""
    with open(spec["base_body"], encoding="utf-8") as fh:
        base = json.load(fh)
    if mark is not None:
        message = base["messages"][spec["mark_message"]]
        message["content"] = f"[{mark}] {message['content']}"
    base["model"] = spec.get("model", base.get("model", "gpt-4o"))
    if spec.get("stream"):
        base["stream"] = True
        if spec.get("include_usage"):
            base["stream_options"] = {"include_usage": True}
    else:
        base.pop("stream", None)
    messages = list(base["messages"])
    bodies = []
    for k in range(spec["requests_per_worker"] + 1):
        if k:
            messages += next_turn(k)
        bodies.append(json.dumps({**base, "messages": messages}).encode())
    return bodies


class Conn:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, head: bytes, body: bytes, timeout: float) -> dict[str, Any]:
        return await asyncio.wait_for(self._request(head, body), timeout)

    async def _request(self, head: bytes, body: bytes) -> dict[str, Any]:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=2**22)
        reader, writer = self.reader, self.writer
        assert reader is not None
        t0 = time.perf_counter()
        writer.write(head + b"content-length: %d\r\n\r\n" % len(body) + body)
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        stamps: list[float] = []  # arrival time of each piece of body
        events = 0
        first = b""
        if "chunked" in headers.get("transfer-encoding", ""):
            while True:
                size = int((await reader.readline()).split(b";")[0], 16)
                data = await reader.readexactly(size + 2)
                if size == 0:
                    break
                stamps.append(time.perf_counter())
                events += data.count(b"data:")
                if len(first) < 300:
                    first += data[:300]
        elif "content-length" in headers:
            data = await reader.readexactly(int(headers["content-length"]))
            stamps.append(time.perf_counter())
            first = data[:300]
        else:
            data = await reader.read()
            stamps.append(time.perf_counter())
            first = data[:300]
            writer.close()
        if headers.get("connection", "").lower() == "close":
            writer.close()
        end = time.perf_counter()
        return {"status": status, "t0": t0, "stamps": stamps, "end": end, "events": events, "first": first}


async def run(spec: dict[str, Any]) -> None:
    host, port, path = spec["host"], spec["port"], spec["path"]
    conc = spec["concurrency"]
    conns = [Conn(host, port) for _ in range(conc)]
    per = spec.get("conversations_per_worker", 1)
    if spec.get("mark_message") is None:
        shared = build_bodies(spec)
        bodies = [[shared] * per for _ in range(conc)]
    else:
        bodies = [[build_bodies(spec, f"conversation {w}-{c}") for c in range(per)] for w in range(conc)]

    def key(w: int, c: int) -> str:
        return spec.get("auth_key") or spec["key_prefix"] + "-" + str(w) + ("" if per == 1 else f"-{c}")

    heads = [
        [
            (
                f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
                f"authorization: Bearer {key(w, c)}\r\n"
            ).encode()
            for c in range(per)
        ]
        for w in range(conc)
    ]
    timeout = spec.get("timeout", 60.0)
    warm_errors = []

    async def warm(w: int) -> None:
        for c in range(per):
            try:
                r = await conns[w].request(heads[w][c], bodies[w][c][0], timeout)
            except Exception as exc:  # noqa: BLE001 - reported
                warm_errors.append(repr(exc)[:300])
                conns[w] = Conn(host, port)
                continue
            if r["status"] != 200:
                warm_errors.append(r["first"].decode("utf-8", "replace"))

    await asyncio.gather(*(warm(w) for w in range(conc)))
    print("READY", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if line.strip() != "GO":
        return
    deadline = time.perf_counter() + spec["max_seconds"]
    samples: list[dict[str, Any]] = []
    errors: list[str] = []

    async def worker(w: int) -> None:
        for k, c in ((k, c) for k in range(1, spec["requests_per_worker"] + 1) for c in range(per)):
            if time.perf_counter() > deadline:
                return
            try:
                r = await conns[w].request(heads[w][c], bodies[w][c][k], timeout)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                errors.append(repr(exc)[:300])
                conns[w] = Conn(host, port)
                continue
            if r["status"] != 200:
                errors.append(f"{r['status']}: {r['first'].decode('utf-8', 'replace')}")
                continue
            stamps = r["stamps"]
            gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
            samples.append(
                {
                    "latency_ms": (r["end"] - r["t0"]) * 1000,
                    "ttft_ms": (stamps[0] - r["t0"]) * 1000 if stamps else None,
                    "stream_ms": (stamps[-1] - stamps[0]) * 1000 if len(stamps) > 1 else 0.0,
                    "pieces": len(stamps),
                    "events": r["events"],
                    "max_gap_ms": max(gaps) * 1000 if gaps else 0.0,
                }
            )

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(conc)))
    wall = time.perf_counter() - t0
    for c in conns:
        if c.writer is not None:
            c.writer.close()
    print(
        json.dumps(
            {
                "wall_s": wall,
                "samples": samples,
                "errors": errors[:20],
                "error_count": len(errors),
                "warmup_errors": warm_errors[:5],
                "body_bytes": [len(bodies[0][0][1]), len(bodies[0][0][-1])],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        asyncio.run(run(json.load(fh)))
