"""The team-load phase's agents, in a process of their own so their CPU never counts as the proxy's.

    python -m bench.team_client SPEC.json

Each session is one coding agent's tool loop on its own keep-alive connection and API key: it
sends its whole history (streamed, `include_usage`), reads the answer's events, appends the
assistant message it streamed (text and `bash` call) and the call's result -- a real tool output
from the vendored transcripts, cut to `result_chars`, led by `bench.team_upstream.marker` -- waits
a drawn "tool run" time, and sends again. Sessions open with `start_pairs[s]` such turns already
made; the warm-up request of each stores that history in the proxy (unmeasured). Protocol with the
parent like `bench.loadgen`: READY after the warm-up, GO on stdin, one JSON line of samples (with
`time.perf_counter()` stamps, comparable with the model's log) when every session has made `turns`
requests or `max_seconds` passed.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

from bench.bodies import generated_session
from bench.team_upstream import marker

Json = dict[str, Any]
IDLE_S = 4.0
"""A keep-alive connection idle longer is not reused (uvicorn closes them after 5 s)."""


def opening(session: int, pairs: int, results: list[str], result_chars: int) -> tuple[list[Json], Any]:
    """A session's history before the run: system, task, `pairs` turns of the agent's loop; its tools."""
    source = generated_session(1, 0)
    system, task = source["messages"][:2]
    messages = [system, {**task, "content": f"[team session {session}] {task['content']}"}]
    for step in range(pairs):
        call_id = f"call_open_s{session}_t{step}"
        call = {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        messages.append({"role": "assistant", "content": f"Step {step}: listing the files.", "tool_calls": [call]})
        messages.append(tool_result(session, step + 1, call_id, results, result_chars))
    return messages, source["tools"]


def tool_result(session: int, step: int, call_id: str, results: list[str], chars: int) -> Json:
    text = results[(session * 7 + step) % len(results)][:chars]
    return {"role": "tool", "tool_call_id": call_id, "content": f"{marker(session, step)}\n{text}"}


def read_events(data: bytes, answer: Json) -> bool:
    """Fold the SSE events in `data` into `answer` (content, tool calls); whether any carried a token."""
    token = False
    for block in data.split(b"\n\n"):
        if not block.startswith(b"data: {"):
            continue
        for choice in json.loads(block[6:]).get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                answer["content"] = (answer.get("content") or "") + delta["content"]
                token = True
            for call in delta.get("tool_calls") or []:
                calls = answer.setdefault("tool_calls", [])
                while len(calls) <= call["index"]:
                    calls.append({"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                mine = calls[call["index"]]
                mine["id"] = call.get("id") or mine["id"]
                fn = call.get("function") or {}
                mine["function"]["name"] += fn.get("name") or ""
                mine["function"]["arguments"] += fn.get("arguments") or ""
                token = True
    return token


class Session:
    def __init__(self, spec: Json, s: int, results: list[str]) -> None:
        self.spec, self.s, self.results = spec, s, results
        self.messages, self.tools = opening(s, spec["start_pairs"][s], results, spec["result_chars"])
        self.step = spec["start_pairs"][s]
        self.rng = random.Random(f"{spec['seed']}:client:{s}")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = 0.0

    async def request(self) -> Json:
        """One turn: send the history, read the answer, append it and its tool's result."""
        spec = self.spec
        body = json.dumps(
            {
                "model": "gpt-4o",
                "messages": self.messages,
                "tools": self.tools,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {spec['host']}\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer sk-team-{spec['run']}-{self.s}\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        sample: Json = {"s": self.s, "t": self.step, "bytes": len(body)}
        try:
            await asyncio.wait_for(self._exchange(head + body, sample), spec["timeout"])
        except Exception as exc:  # noqa: BLE001 - counted and reported
            sample["error"] = repr(exc)[:300]
            self.close()
        return sample

    async def _exchange(self, data: bytes, sample: Json) -> None:
        idle = time.perf_counter() - self.used
        if self.writer is None or self.writer.is_closing() or self.reader is None or self.reader.at_eof():
            self.close()
        elif idle > IDLE_S:  # the server may be closing it right now: a client's pool retires such connections
            self.close()
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.spec["host"], self.spec["port"])
        reader, writer = self.reader, self.writer
        assert reader is not None
        sample["send"] = time.perf_counter()
        writer.write(data)
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
        answer: Json = {"role": "assistant", "content": None}
        raw = b""
        if "chunked" in headers.get("transfer-encoding", ""):
            pending = b""
            while size := int((await reader.readline()).split(b";")[0], 16):
                piece = (await reader.readexactly(size + 2))[:-2]
                raw += piece
                pending += piece
                cut = pending.rfind(b"\n\n")
                if cut >= 0:
                    if read_events(pending[: cut + 2], answer) and "first" not in sample:
                        sample["first"] = time.perf_counter()
                    pending = pending[cut + 2 :]
            await reader.readline()
        else:
            raw = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        sample["end"] = self.used = time.perf_counter()
        calls = answer.get("tool_calls") or []
        if status != 200 or len(calls) != 1 or calls[0]["function"]["name"] != "bash":
            sample["error"] = f"{status}: {raw[:300].decode('utf-8', 'replace')}"
            return
        self.messages.append(answer)
        self.step += 1
        self.messages.append(tool_result(self.s, self.step, calls[0]["id"], self.results, self.spec["result_chars"]))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def run(spec: Json) -> None:
    results = [str(m["content"]) for m in generated_session(64, 1000)["messages"] if m["role"] == "tool"]
    sessions = [Session(spec, s, results) for s in range(spec["sessions"])]
    warm = await asyncio.gather(*(s.request() for s in sessions))
    print("READY", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if line.strip() != "GO":
        return
    deadline = time.perf_counter() + spec["max_seconds"]
    samples: list[Json] = []

    async def agent(session: Session) -> None:
        await asyncio.sleep(session.rng.uniform(0, spec["stagger_s"]))  # sessions are not in step
        for _ in range(spec["turns"]):
            if time.perf_counter() > deadline:
                return
            sample = await session.request()
            samples.append(sample)
            await asyncio.sleep(session.rng.uniform(*spec["tool_s"]))

    t0 = time.perf_counter()
    await asyncio.gather(*(agent(s) for s in sessions))
    wall = time.perf_counter() - t0
    for s in sessions:
        s.close()
    warm_errors = [w["error"] for w in warm if "error" in w]
    print(json.dumps({"wall_s": wall, "samples": samples, "warmup_errors": warm_errors[:5]}), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        asyncio.run(run(json.load(fh)))
