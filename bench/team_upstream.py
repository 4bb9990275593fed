"""The team-load phase's model: streamed tool-loop answers at a realistic pace, a few recall calls.

    python -m bench.team_upstream --port P [--seed 34] [--ttft 1,3] [--rate 30,80] [--recall 0.05]

Every answer is a function of (seed, session, step, round) (`plan`), so a run is reproducible and
sessions differ from each other:

* a main request (the newest tool result names its session and step: `<<team s=S step=T>>`,
  `marker`) is answered after a time to first token drawn from `--ttft` seconds, then streamed as
  one SSE event per token at a rate drawn from `--rate` tokens/s (written in 50 ms ticks, as a
  provider's packets arrive): a short thought, then one `bash` tool call;
* with probability `--recall`, when the request offers the recall tool (`ctxproxy_recall`) and is
  not already a detour's follow-up, the answer is a recall call instead, so the proxy detours:
  it answers the call and sends the follow-up, which this model answers as above (round 1);
* a summarizer request (ctxproxy's summary prompt, or a shared summary's ask) waits a time to
  first token and the time to write `SUMMARY_TOKENS` at a drawn rate, then answers a short
  structured summary (non-stream).

`GET /team/log` returns what was served, with `time.perf_counter()` stamps (CLOCK_MONOTONIC: the
same clock in every process of the machine, so the load generator's stamps compare): per main
answer its session, step, round, arrival, first byte and end; per summary its sessions, arrival
and end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import time
from dataclasses import dataclass
from typing import Any

from bench.mock_upstream import SUMMARY_TEXT, completion, is_summary

RECALL_TOOL = "ctxproxy_recall"
SUMMARY_TOKENS = 300
TICK = 0.05
MARKER = re.compile(rb"team s=(\d+) step=(\d+)")
"""`marker`'s words, whatever its brackets became (a summarizer prompt escapes them)"""
THOUGHT = (
    "The previous command finished; its output shows what I expected in most places, but one "
    "value differs from the test's assertion, so I will look at the function that computes it "
    "and check how its arguments are parsed before changing anything else in the module. "
)


def marker(session: int, step: int) -> str:
    """The line a tool result starts with: the session, and the step of the request it goes in."""
    return f"<<team s={session} step={step}>>"


@dataclass(frozen=True)
class Answer:
    ttft: float
    rate: float
    tokens: list[str]
    """content tokens, then the tool call's argument pieces"""
    recall: bool


def plan(seed: int, session: int, step: int, round_: int, opts: argparse.Namespace) -> Answer:
    """What the model answers for this session's step (round 1: after a recall detour)."""
    rng = random.Random(f"{seed}:{session}:{step}:{round_}")
    ttft = rng.uniform(*opts.ttft)
    rate = rng.uniform(*opts.rate)
    recall = round_ == 0 and rng.random() < opts.recall
    words = THOUGHT.split(" ")
    n = rng.randint(40, 160)
    tokens = [(" " if i else "") + words[i % len(words)] for i in range(n)]
    return Answer(ttft, rate, tokens, recall)


def _event(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    choices = [] if usage else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    chunk: dict[str, Any] = {
        "id": "chatcmpl-team",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "team",
        "choices": choices,
    }
    if usage:
        chunk["usage"] = usage
    data = b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def answer_events(answer: Answer, session: int, step: int, prompt_tokens: int, usage_asked: bool) -> list[bytes]:
    """The SSE events of one answer, each chunk-encoded: one per token (and the usage, when asked)."""
    if answer.recall:
        call_id, name, args = f"call_recall_s{session}_t{step}", RECALL_TOOL, json.dumps({"query": "exit code"})
        text: list[str] = []
    else:
        call_id, name = f"call_s{session}_t{step}", "bash"
        args = json.dumps({"command": f"python -m pytest -q tests/test_step_{step}.py"})
        text = answer.tokens
    events = [_event({"role": "assistant", "content": "" if text else None})]
    events += [_event({"content": t}) for t in text]
    call = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    events.append(_event({"tool_calls": [call]}))
    pieces = [args[i : i + 12] for i in range(0, len(args), 12)]
    events += [_event({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces]
    events.append(_event({}, "tool_calls"))
    output = len(text) + len(pieces) + 2
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": output, "total_tokens": prompt_tokens + output}
    if usage_asked:
        events.append(_event({}, usage=usage))
    events.append(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
    return events


HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
)


class Team:
    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.log: list[dict[str, Any]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                if "chunked" in headers.get("transfer-encoding", ""):
                    body = b""
                    while size := int((await reader.readline()).split(b";")[0], 16):
                        body += (await reader.readexactly(size + 2))[:-2]
                    await reader.readline()
                else:
                    body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                await self.answer(method, path, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        arrival = time.perf_counter()
        if method == "GET":
            data = json.dumps(self.log if path.startswith("/team/log") else {"status": "ok"}).encode()
            writer.write(_whole(data))
            return
        if is_summary(body):
            await self.summary(body, writer, arrival)
            return
        found = [(int(t), int(s)) for s, t in MARKER.findall(body)]
        if not found:
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            return
        step, session = max(found)
        round_ = 1 if f'"call_recall_s{session}_t{step}"'.encode() in body else 0
        answer = plan(self.opts.seed, session, step, round_, self.opts)
        if answer.recall and RECALL_TOOL.encode() not in body:
            answer = Answer(answer.ttft, answer.rate, answer.tokens, False)
        await asyncio.sleep(answer.ttft)
        events = answer_events(answer, session, step, len(body) // 4, b"include_usage" in body)
        writer.write(HEAD + events[0] + events[1])  # the role and the first token
        first = time.perf_counter()
        pos, started = 2, first
        while pos < len(events):
            await asyncio.sleep(TICK)
            due = min(len(events), 2 + int((time.perf_counter() - started) * answer.rate))
            if due > pos:
                writer.write(b"".join(events[pos:due]))
                pos = due
        await writer.drain()
        entry = {"kind": "main", "s": session, "t": step, "round": round_, "recall": answer.recall}
        self.log.append({**entry, "arrival": arrival, "first": first, "end": time.perf_counter()})

    async def summary(self, body: bytes, writer: asyncio.StreamWriter, arrival: float) -> None:
        sessions = sorted({int(s) for s, _ in MARKER.findall(body)})
        rng = random.Random(f"{self.opts.seed}:summary:{sessions}:{len(body)}")
        await asyncio.sleep(rng.uniform(*self.opts.ttft) + SUMMARY_TOKENS / rng.uniform(*self.opts.rate))
        writer.write(_whole(completion(SUMMARY_TEXT)))
        self.log.append({"kind": "summary", "sessions": sessions, "arrival": arrival, "end": time.perf_counter()})


def _whole(data: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data)


def _pair(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    return float(low), float(high or low)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.team_upstream")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--ttft", type=_pair, default=(1.0, 3.0), help="time to first token, seconds: low,high")
    p.add_argument("--rate", type=_pair, default=(30.0, 80.0), help="tokens per second: low,high")
    p.add_argument("--recall", type=float, default=0.05, help="share of main requests answered by a recall call")
    return p.parse_args(argv)


async def amain(opts: argparse.Namespace) -> None:
    team = Team(opts)
    server = await asyncio.start_server(team.serve, opts.host, opts.port, backlog=1024, limit=2**24)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(amain(parse_args()))
    except KeyboardInterrupt:
        pass
