"""A scripted upstream that speaks the OpenAI Responses API (``POST /v1/responses``).

Same style as :mod:`tests.support.upstream_server`: uvicorn in a background thread, a FIFO of scripted
replies (:meth:`ResponsesServer.push`, else :attr:`responder`, else ``"ok: <last user text>"``),
every request recorded. It validates like the real API:

- ``model`` required; ``input`` a string or an array of objects; ``previous_response_id`` must name
  a stored response (the stored input + output are prepended, as the real API does);
- every ``function_call_output`` answers a ``function_call`` earlier in the input
  (``No tool call found for function call output with call_id ...``);
- a ``function_call`` sent in input is followed by its output before the next message item
  (``No tool output found for function call ...``);
- a ``reasoning`` item is followed by an assistant-side item
  (``Item '...' of type 'reasoning' was provided without its required following item.``);
- the input plus ``max_output_tokens`` fits the model's window, else the real API's 400
  (``context_length_exceeded``, "Your input exceeds the context window of this model. Please
  adjust your input and try again.": :mod:`tests.support.overflow`), recorded in ``overflows``.

The input is counted by :func:`count_input_tokens` in the server's ``counting`` mode
(:mod:`tests.support.counting`; default ``exact``: tiktoken o200k, 3 per item, tools as OpenAI
renders them). One count per request, bias and jitter included, is both what the window is
enforced against and what ``usage.input_tokens`` bills.

Answers: non-stream a ``response`` object; stream the real event sequence (``response.created``,
``response.in_progress``, per item ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta``..., ``response.output_text.done``, ``response.content_part.done`` or
``response.function_call_arguments.delta``/``.done``, ``response.output_item.done``, then
``response.completed`` / ``response.incomplete`` / ``response.failed``), each as
``event: TYPE`` + ``data: JSON`` with a ``sequence_number``. Usage: ``input_tokens`` (the count
unless overridden) with ``input_tokens_details.cached_tokens`` (part of it, never more),
``output_tokens`` with ``output_tokens_details.reasoning_tokens``.

Context management (:mod:`tests.support.responses_context`): ``POST /v1/responses/compact``,
``context_management`` compaction thresholds, the ``compaction_trigger`` input item, verified
compaction items in input (:attr:`ResponsesServer.compactions` records each compaction), and
``POST /v1/responses/input_tokens``.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.support.counting import EXACT, Counting, Meter
from tests.support.overflow import Measured, openai_error, responses_overflow
from tests.support.responses_context import (
    COMPACTION_ITEM_TOKENS,
    compacted_response,
    compaction_item,
    compaction_threshold,
    default_summary,
    input_problem,
)
from tests.support.scripted_server import RecordedRequest, ScriptedServer
from tests.support.scripted_server import split_text as _split

__all__ = ["ResponsesReply", "ResponsesServer", "count_input_tokens", "fcall"]

_PATHS = ("/v1/responses", "/v1/responses/compact", "/v1/responses/input_tokens")


def fcall(name: str, arguments: Any, call_id: str | None = None) -> dict[str, Any]:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"name": name, "arguments": arguments, "call_id": call_id or "call_" + secrets.token_hex(8)}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def count_input_tokens(
    instructions: Any, items: list[dict[str, Any]], tools: Any = None, counting: Counting = EXACT
) -> int:
    """Input tokens as this server bills them, in `counting`'s encoding and framing (before its
    bias and jitter): framing, instructions, items and, like the real API, the tool definitions
    (function and namespace tools as OpenAI's renderer writes them, other shapes as their JSON:
    `tool_billing`; or all as JSON with `tools_as_json`)."""
    text = counting.text
    total = 3 + counting.openai_tools(tools)
    if isinstance(instructions, str) and instructions:
        total += 4 + text(instructions)
    for item in items:
        total += counting.message_tokens
        kind = item.get("type", "message")
        if kind == "message":
            total += counting.role(str(item.get("role", ""))) + text(_text(item.get("content")))
        elif kind == "function_call":
            total += text(str(item.get("name", ""))) + text(str(item.get("arguments", "")))
        elif kind == "function_call_output":
            total += text(_text(item.get("output")))
        elif kind == "reasoning":
            total += 8
        elif kind == "compaction":  # stands for what it compacted (responses_context)
            total += COMPACTION_ITEM_TOKENS
    return total


@dataclasses.dataclass
class ResponsesReply:
    """One scripted answer (every field optional).

    text            assistant text (None and no calls: ``"ok: <last user text>"``).
    calls           function calls (see :func:`fcall`); emitted after the text.
    reasoning       emit a reasoning item (with ``encrypted_content``) first.
    input_tokens / output_tokens / cached_tokens / cache_write_tokens / reasoning_tokens   usage.
    status          HTTP status (not 200: ``error_body`` or a default OpenAI error).
    end             ``"completed"``, ``"incomplete"`` or ``"failed"``.
    chunks          pieces per text / arguments when streaming.
    drop_after_events   stream: close the connection after k events (no end event).
    hold / hold_after_events   stream: wait for the ``threading.Event`` after k events.
    compaction_summary  what a compaction during this reply seals (else the server's
                    ``compactor``, else :func:`default_summary`).
    """

    text: str | None = None
    calls: list[dict[str, Any]] | None = None
    reasoning: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0
    status: int = 200
    error_body: Any = None
    end: str = "completed"
    chunks: int = 3
    drop_after_events: int | None = None
    hold: threading.Event | None = None
    hold_after_events: int = 2
    compaction_summary: str | None = None

    disconnected: threading.Event = dataclasses.field(default_factory=threading.Event)
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    sent_events: list[tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=list)
    sent_json: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None


class ResponsesServer(ScriptedServer[ResponsesReply]):
    reply_class = ResponsesReply
    thread_name = "responses-upstream"
    start_error = "responses upstream did not start"

    def __init__(
        self,
        context_windows: dict[str, int] | None = None,
        default_window: int = 128_000,
        counting: Counting | str | None = None,
    ) -> None:
        super().__init__()
        self.context_windows = dict(context_windows or {})
        self.default_window = default_window
        self.meter = Meter(counting)  # how this server counts a request (window check and usage)
        self.overflow_in_stream = False
        """Answer a streamed request over the window with a 200 stream that fails (`response.failed`)."""
        self.paths = _PATHS
        """The paths served (an upstream without `/input_tokens`, as many gateways are: leave it out)."""
        self.rejections: list[dict[str, Any]] = []
        self.stored: dict[str, list[dict[str, Any]]] = {}
        # Context management (tests.support.responses_context):
        self.compactor: Callable[[list[dict[str, Any]]], str] | None = None
        """input items -> the summary a compaction seals (None: `default_summary`)."""
        self.default_compact_threshold: int | None = None
        """For a `context_management` entry without `compact_threshold` (None: 80% of the window)."""
        self.compactions: list[dict[str, Any]] = []
        """Every compaction made: via ("compact", "threshold", "trigger"), item, summary, items, input_tokens."""
        self.compact_failure: tuple[int, dict[str, Any]] | None = None
        """(status, error body) every ``/v1/responses/compact`` answers instead (None: it compacts)."""

    @property
    def counting(self) -> Counting:
        return self.meter.counting

    def _warm_up(self) -> None:
        self.counting.text("warm up")

    def _reset(self) -> None:
        self.rejections.clear()
        self.compactions.clear()
        self.compact_failure = None

    @property
    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.body for r in self.requests if isinstance(r.body, dict)]

    @property
    def last(self) -> RecordedRequest:
        with self._lock:
            assert self.requests, "no request reached the responses upstream"
            return self.requests[-1]

    @property
    def last_reply(self) -> ResponsesReply:
        with self._lock:
            return self.replies_sent[-1]

    # ---- validation

    def _error(self, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
        error = openai_error(message, param=param, code=code)
        with self._lock:
            self.rejections.append(error)
        return error

    def _full_input(self, body: dict[str, Any]) -> list[dict[str, Any]] | dict[str, Any]:
        data = body.get("input")
        items: list[dict[str, Any]] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            with self._lock:
                stored = self.stored.get(previous)
            if stored is None:
                return self._error(
                    f"Previous response with id '{previous}' not found.",
                    "previous_response_id",
                    "previous_response_not_found",
                )
            items.extend(stored)
        if isinstance(data, str):
            items.append({"type": "message", "role": "user", "content": data})
        elif isinstance(data, list):
            for i, item in enumerate(data):
                if not isinstance(item, dict):
                    return self._error(
                        f"Invalid type for 'input[{i}]': expected an object.", f"input[{i}]", "invalid_type"
                    )
                items.append(item if "type" in item else {"type": "message", **item})
        elif data is not None:
            return self._error("Invalid type for 'input': expected a string or an array.", "input", "invalid_type")
        return items

    def _validate(self, body: Any) -> dict[str, Any] | list[dict[str, Any]]:
        return self._check(body)[0]

    def _check(self, body: Any) -> tuple[dict[str, Any] | list[dict[str, Any]], int | None]:
        """(the error body, or the full input) and the input as this server counted it (one draw
        per request: the window check and usage both use it; None when refused before counting)."""
        items = self._shape(body)
        if isinstance(items, dict):
            return items, None
        model = body["model"]
        window = self.context_windows.get(model, self.default_window)
        prompt = self.meter.measure(lambda c: count_input_tokens(body.get("instructions"), items, body.get("tools"), c))
        reserve = int(body.get("max_output_tokens") or 0)
        overflow = responses_overflow(window=window, prompt=prompt, max_output_tokens=reserve)
        self._measured(Measured(model, prompt, reserve, window, body, overflow))
        if overflow is not None:
            with self._lock:
                self.rejections.append(overflow)
        return (items if overflow is None else overflow), prompt

    def _shape(self, body: Any) -> dict[str, Any] | list[dict[str, Any]]:
        if not isinstance(body, dict):
            return self._error("We could not parse the JSON body of your request.")
        if not isinstance(body.get("model"), str):
            return self._error("Missing required parameter: 'model'.", "model", "missing_required_parameter")
        items = self._full_input(body)
        if isinstance(items, dict):
            return items
        window = self.context_windows.get(body["model"], self.default_window)
        threshold = compaction_threshold(body, self.default_compact_threshold or int(window * 0.8))
        problem = input_problem(items) or (threshold if isinstance(threshold, dict) else None)
        if problem is not None:
            with self._lock:
                self.rejections.append(problem)
            return problem
        calls: dict[str, int] = {}
        open_calls: list[str] = []
        for i, item in enumerate(items):
            kind = item.get("type")
            if kind == "function_call":
                calls[item["call_id"]] = i
                open_calls.append(item["call_id"])
            elif kind == "function_call_output":
                if item.get("call_id") not in calls:
                    return self._error(
                        f"No tool call found for function call output with call_id {item.get('call_id')}.", "input"
                    )
                if item["call_id"] in open_calls:
                    open_calls.remove(item["call_id"])
            elif kind == "message" and item.get("role") != "assistant" and open_calls:
                return self._error(f"No tool output found for function call {open_calls[0]}.", "input")
            elif kind == "reasoning":
                following = next((j for j in items[i + 1 :] if j.get("type") != "reasoning"), None)
                if following is None or not (
                    following.get("type") == "function_call"
                    or (following.get("type") == "message" and following.get("role") == "assistant")
                ):
                    return self._error(
                        f"Item '{item.get('id')}' of type 'reasoning' was provided without its "
                        "required following item.",
                        "input",
                    )
        limit = body.get("max_output_tokens")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            return self._error(
                f"Invalid type for 'max_output_tokens': expected an integer, but got {type(limit).__name__} instead.",
                "max_output_tokens",
                "invalid_type",
            )
        if limit is not None and limit < 16:
            return self._error(
                f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got {limit} "
                "instead.",
                "max_output_tokens",
                "integer_below_min_value",
            )
        return items

    # ---- ASGI

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        record = await self._receive_request(scope, receive)
        if record is None:
            return
        body = record.body
        path = scope["path"].rstrip("/")
        if path not in self.paths or scope["method"] != "POST":
            await self._json(send, 404, openai_error(f"Invalid URL ({scope['method']} {scope['path']})"))
            return
        if path == "/v1/responses/input_tokens":
            await self._input_tokens(send, body)
            return
        checked, counted = self._check(body)
        if path == "/v1/responses/compact":
            await self._compact(send, body, checked, counted)
            return
        if isinstance(checked, dict) and self.overflow_in_stream and isinstance(body, dict) and body.get("stream"):
            if checked.get("error", {}).get("code") == "context_length_exceeded":
                await self._failed_stream(send, body, checked["error"])
                return
        if isinstance(checked, dict) or not isinstance(body, dict):
            await self._json(send, 400, checked)
            return
        reply = self._next_reply(body)
        try:
            await self._answer(reply, body, checked, send, receive, counted)
        finally:
            reply.done.set()

    async def _input_tokens(self, send: Any, body: Any) -> None:
        """``POST /v1/responses/input_tokens``: the input as this server counts it (`model` is
        optional there)."""
        if isinstance(body, dict) and body.get("model") is None:
            body = {**body, "model": ""}
        items = self._shape(body)
        if isinstance(items, dict):
            await self._json(send, 400, items)
            return
        tokens = self.meter.measure(lambda c: count_input_tokens(body.get("instructions"), items, body.get("tools"), c))
        await self._json(send, 200, {"object": "response.input_tokens", "input_tokens": tokens})

    def _compaction(
        self, via: str, reply: ResponsesReply | None, items: list[dict[str, Any]], counted: int | None
    ) -> dict[str, Any]:
        """Compact `items` (the input as counted): the compaction item, recorded."""
        summary = reply.compaction_summary if reply is not None else None
        if summary is None:
            summary = self.compactor(items) if self.compactor is not None else default_summary(items)
        item = compaction_item(summary, items, counted or 0)
        with self._lock:
            self.compactions.append(
                {"via": via, "item": item, "summary": summary, "items": len(items), "input_tokens": counted}
            )
        return item

    async def _compact(self, send: Any, body: Any, checked: Any, counted: int | None) -> None:
        """``POST /v1/responses/compact``: a ``response.compaction`` object."""
        if isinstance(checked, dict) or not isinstance(body, dict):
            await self._json(send, 400, checked)
            return
        if self.compact_failure is not None:
            await self._json(send, *self.compact_failure)
            return
        item = self._compaction("compact", None, checked, counted)
        summary = self.compactions[-1]["summary"]
        await self._json(send, 200, compacted_response(checked, item, counted or 0, self.counting.text(summary)))

    async def _failed_stream(self, send: Any, body: dict[str, Any], error: dict[str, Any]) -> None:
        """A streamed request over the window, as the API may answer it: a 200 stream whose
        `response.created` is followed by `response.failed` naming the overflow."""
        response = {"id": "resp_" + secrets.token_hex(12), "object": "response", "model": body["model"], "output": []}
        created = {"type": "response.created", "sequence_number": 0, "response": {**response, "status": "in_progress"}}
        failure = {"code": error["code"], "message": error["message"]}
        failed = {
            "type": "response.failed",
            "sequence_number": 1,
            "response": {**response, "status": "failed", "error": failure},
        }
        data = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in (created, failed))
        await self._send_body(send, 200, [(b"content-type", b"text/event-stream; charset=utf-8")], data)

    async def _json(self, send: Any, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        await self._send_body(
            send,
            status,
            [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (b"x-request-id", ("req_" + secrets.token_hex(8)).encode()),
            ],
            data,
        )

    def _output(self, reply: ResponsesReply, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if reply.reasoning:
            out.append(
                {
                    "id": "rs_" + secrets.token_hex(8),
                    "type": "reasoning",
                    "summary": [],
                    "encrypted_content": "enc_" + secrets.token_hex(16),
                }
            )
        text = reply.text
        if text is None and not reply.calls:
            last = next(
                (
                    _text(i.get("content"))
                    for i in reversed(items)
                    if i.get("type") == "message" and i.get("role") == "user"
                ),
                "",
            )
            text = f"ok: {last[:200]}"
        if text is not None:
            out.append(
                {
                    "id": "msg_" + secrets.token_hex(8),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
                }
            )
        for call in reply.calls or ():
            out.append(
                {
                    "id": "fc_" + secrets.token_hex(8),
                    "type": "function_call",
                    "status": "completed",
                    "arguments": call["arguments"],
                    "call_id": call["call_id"],
                    "name": call["name"],
                }
            )
        return out

    def _usage(
        self,
        reply: ResponsesReply,
        body: dict[str, Any],
        items: list[dict[str, Any]],
        output: list[dict[str, Any]],
        counted: int | None = None,
    ) -> dict[str, Any]:
        """The usage object: the input as counted for the window check (`counted`), unless the
        reply scripts it; cached tokens are part of it and never more than it."""
        if reply.input_tokens is not None:
            input_tokens = reply.input_tokens
        elif counted is not None:
            input_tokens = counted
        else:
            input_tokens = self.meter.measure(
                lambda c: count_input_tokens(body.get("instructions"), items, body.get("tools"), c)
            )
        if reply.output_tokens is not None:
            output_tokens = reply.output_tokens
        else:
            framing = 3 + self.counting.message_tokens  # count_input_tokens' 3 plus one item's framing
            output_tokens = reply.reasoning_tokens + sum(
                count_input_tokens(None, [o], counting=self.counting) - framing for o in output
            )
        details = {
            "cached_tokens": min(reply.cached_tokens, input_tokens),
            "cache_write_tokens": min(reply.cache_write_tokens, input_tokens),
        }
        return {
            "input_tokens": input_tokens,
            "input_tokens_details": details,
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
            "total_tokens": input_tokens + output_tokens,
        }

    def _response(
        self, rid: str, body: dict[str, Any], status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None
    ) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": {},
        }

    async def _answer(
        self,
        reply: ResponsesReply,
        body: dict[str, Any],
        items: list[dict[str, Any]],
        send: Any,
        receive: Any,
        counted: int | None = None,
    ) -> None:
        if reply.status != 200:
            await self._json(
                send,
                reply.status,
                reply.error_body
                or openai_error("The server had an error while processing your request.", "server_error"),
            )
            return
        rid = "resp_" + secrets.token_hex(12)
        output = self._output(reply, items)
        window = self.context_windows.get(body["model"], self.default_window)
        threshold = compaction_threshold(body, self.default_compact_threshold or int(window * 0.8))
        if items and items[-1].get("type") == "compaction_trigger":  # the compaction item alone
            output = [self._compaction("trigger", reply, items[:-1], counted)]
        elif isinstance(threshold, int) and (counted or 0) >= threshold:  # compacted, then answered
            output = [self._compaction("threshold", reply, items, counted), *output]
        usage = self._usage(reply, body, items, output, counted)
        reply.usage = usage
        final = self._response(rid, body, reply.end, output, usage)
        if reply.end == "failed":
            final["error"] = {"code": "server_error", "message": "The model failed to generate a response."}
            final["output"] = []
        elif reply.end == "incomplete":
            final["incomplete_details"] = {"reason": "max_output_tokens"}
        if body.get("store", True) is not False:
            with self._lock:
                self.stored[rid] = [*(i for i in items if i.get("type") != "compaction_trigger"), *output]
        if not body.get("stream"):
            reply.sent_json = final
            await self._json(send, 200, final)
            return
        await self._stream(reply, body, rid, output, final, send, receive)

    def _events(
        self, body: dict[str, Any], rid: str, output: list[dict[str, Any]], final: dict[str, Any], reply: ResponsesReply
    ) -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []

        def add(kind: str, **fields: Any) -> None:
            events.append((kind, {"type": kind, "sequence_number": len(events), **fields}))

        start = self._response(rid, body, "in_progress", [], None)
        add("response.created", response=start)
        add("response.in_progress", response=start)
        for index, item in enumerate(final["output"]):
            kind = item["type"]
            if kind == "message":
                add(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                add("response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part)
                text = item["content"][0]["text"]
                for piece in _split(text, reply.chunks):
                    add(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=index,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
                add(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
                add(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=item["content"][0],
                )
            elif kind == "function_call":
                add(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for piece in _split(item["arguments"], reply.chunks):
                    add("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=piece)
                add(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
            elif kind == "compaction":
                add("response.output_item.added", output_index=index, item=item)
                add("response.compaction.compacting", item_id=item["id"], output_index=index)
            else:
                add("response.output_item.added", output_index=index, item=item)
            add("response.output_item.done", output_index=index, item=item)
        add(f"response.{reply.end}", response=final)
        return events

    async def _stream(
        self,
        reply: ResponsesReply,
        body: dict[str, Any],
        rid: str,
        output: list[dict[str, Any]],
        final: dict[str, Any],
        send: Any,
        receive: Any,
    ) -> None:
        events = self._events(body, rid, output, final, reply)
        chunks = [f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode() for kind, data in events]
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"x-request-id", ("req_" + secrets.token_hex(8)).encode()),
        ]
        async with self._watching(receive, reply) as finished:
            await self._write_stream(
                send,
                reply,
                headers,
                chunks,
                finished,
                lambda k, _: reply.sent_events.append(events[k]),
                drop_after=reply.drop_after_events,
                hold_after=reply.hold_after_events,
            )
