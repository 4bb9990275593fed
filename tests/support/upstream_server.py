"""A scripted upstream that speaks the OpenAI chat-completions wire protocol.

The end-to-end tests put the real proxy between a real SDK client and this server, so the server
has to look like api.openai.com from the proxy's side of the socket:

- ``POST /v1/chat/completions`` non-stream: one ``chat.completion`` JSON object (``n`` choices,
  ``usage`` with ``prompt_tokens_details.cached_tokens`` and
  ``completion_tokens_details.reasoning_tokens``).
- stream: ``text/event-stream`` of ``data: {chunk}\\n\\n`` and ``data: [DONE]\\n\\n``. The first chunk
  carries ``delta.role``; content and tool-call arguments are split over several chunks; parallel
  tool calls stream with ``index`` 0, 1, ...; the last choice chunk has ``finish_reason``. Only when
  the request asks ``stream_options.include_usage`` does every chunk carry ``"usage": null`` and an
  extra ``choices: []`` chunk with the usage object precede ``[DONE]`` -- exactly what the real API
  does, so a test can tell whether the proxy asked for usage and hid it again.
- ``GET /v1/models``.
- ``POST /v1/embeddings``: a three-number vector per input, its tokens as usage.
- real response headers (``x-request-id``, ``x-ratelimit-*``, ``openai-processing-ms``).
- the validation errors the real API gives for broken tool pairing, empty messages and an
  oversized context, in the real error shape and wording.

Tests script the next replies with :meth:`UpstreamServer.push` (a FIFO per server); an empty queue
answers ``"ok: <last user text>"``. Every request is recorded (:attr:`UpstreamServer.requests`) so a
test can assert what the proxy actually sent upstream.

Prompt tokens are counted by :func:`count_prompt_tokens` in the server's ``counting`` mode
(:mod:`tests.support.counting`; default ``exact``: tiktoken ``o200k_base`` loaded offline from
litellm's bundled cache, per message 3 tokens of framing plus the encoded role, content, name and
tool calls, plus 3 for the reply priming, plus ``tools`` as OpenAI renders them, ``tool_billing``).
That one count per request, bias and jitter included, is both what the model's window is enforced
against and what ``usage.prompt_tokens`` reports, as a real provider bills what it counted. An
oversized request gets the 400 of ``error_style`` (OpenAI's, or vLLM's, OpenRouter's,
llama.cpp's or litellm proxy's: :mod:`tests.support.overflow`); every request's numbers are in
:attr:`UpstreamServer.measured`, the refused ones in :attr:`UpstreamServer.overflows`.

The server runs uvicorn in a background thread with its own event loop; ``start()`` binds a free
port on 127.0.0.1 before returning, ``stop()`` shuts it down (hanging handlers are released).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
import time
from typing import Any

from tests.support.counting import EXACT, Counting, Meter, load_encoding
from tests.support.overflow import CHAT_ERROR_STYLES, Measured, chat_overflow, openai_error
from tests.support.scripted_server import RecordedRequest, ScriptedServer, _Dropped
from tests.support.scripted_server import split_text as _split

__all__ = [
    "RecordedRequest",
    "Reply",
    "UpstreamServer",
    "count_prompt_tokens",
    "count_text_tokens",
    "tool_call",
]


# --------------------------------------------------------------------------- tokens


def _load_encoding() -> Any:
    """o200k_base from litellm's bundled tiktoken cache (there is no network in the sandbox)."""
    return load_encoding("o200k_base")


_ENCODING: Any = None
_ENCODING_LOCK = threading.Lock()


def _encoding() -> Any:
    global _ENCODING
    with _ENCODING_LOCK:
        if _ENCODING is None:
            _ENCODING = _load_encoding()
    return _ENCODING


def count_text_tokens(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif isinstance(part.get("refusal"), str):
                    parts.append(part["refusal"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return json.dumps(content)


def count_prompt_tokens(body: dict[str, Any], counting: Counting = EXACT) -> int:
    """The prompt tokens of a chat-completions request body counted in `counting`'s encoding and
    framing (before its bias and jitter; see the module docstring)."""
    text = counting.text
    total = 3
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        total += counting.message_tokens
        total += counting.role(str(message.get("role", "")))
        total += text(_content_text(message.get("content")))
        if isinstance(message.get("name"), str):
            total += 1 + text(message["name"])
        for call in message.get("tool_calls") or []:
            fn = (call or {}).get("function") or {}
            total += 3 + text(str(fn.get("name", "")))
            total += text(str(fn.get("arguments", "")))
    return total + counting.openai_tools(body.get("tools"))


# --------------------------------------------------------------------------- script


def tool_call(name: str, arguments: Any, id: str | None = None) -> dict[str, Any]:
    """A tool call in the OpenAI wire form; ``arguments`` may be a dict (JSON-encoded here)."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {
        "id": id or "call_" + secrets.token_hex(12),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


@dataclasses.dataclass
class Reply:
    """One scripted answer. Every field is optional; the defaults give a normal 200 reply.

    content         assistant text; ``None`` with no tool_calls -> ``"ok: <last user text>"``.
    contents        one content per choice for ``n > 1`` (else every choice gets ``content``).
    tool_calls      list of wire-form tool calls (see :func:`tool_call`); ``{"name", "arguments"}``
                    shorthand is accepted too.
    finish_reason   default ``"tool_calls"`` when there are tool calls, else ``"stop"``.
    usage           replaces the whole usage object when given.
    prompt_tokens / completion_tokens   override the estimates in the usage object.
    cached_tokens / reasoning_tokens    ``prompt_tokens_details`` / ``completion_tokens_details``.
    status          HTTP status; not 200 -> ``error_body`` (dict/str/bytes) or a default
                    OpenAI-shaped error for that status.
    body            raw response body override (bytes/str/dict), for non-stream replies.
    headers         extra response headers (added to/overriding the realistic defaults).
    delay_before_headers   seconds to wait before sending anything.
    delay_between_chunks   seconds between stream chunks.
    chunks          number of pieces content/arguments are split into when streaming.
    hang            never answer (until the client goes away or the server stops).
    drop_after_chunks      stream: close the connection after k chunks, no ``[DONE]``;
                           non-stream: close without any response when k == 0.
    hold / hold_after_chunks   stream: after ``hold_after_chunks`` chunks (default 1) wait until the
                    test sets the ``threading.Event`` ``hold`` before sending the rest.
    model           the model name reported in the reply (default: the requested one).
    extra_message   extra keys merged into the non-stream assistant message.

    Set by the server while answering: ``first_chunk_sent`` (Event, set after the first stream
    chunk has been written), ``done`` (Event, set when the handler ends), ``disconnected`` (Event,
    set when the client went away before the reply was complete), ``chunks_sent`` (int).
    """

    content: str | None = None
    contents: list[str] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    status: int = 200
    error_body: Any = None
    body: Any = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    delay_before_headers: float = 0.0
    delay_between_chunks: float = 0.0
    chunks: int = 3
    hang: bool = False
    drop_after_chunks: int | None = None
    hold: threading.Event | None = None
    hold_after_chunks: int = 1
    model: str | None = None
    extra_message: dict[str, Any] | None = None

    sent_usage: dict[str, Any] | None = None  # set by the server: the usage object it reported
    first_chunk_sent: threading.Event = dataclasses.field(default_factory=threading.Event)
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    disconnected: threading.Event = dataclasses.field(default_factory=threading.Event)
    chunks_sent: int = 0
    sent_status: int | None = None
    sent_headers: dict[str, str] = dataclasses.field(default_factory=dict)
    sent_body: bytes = b""  # non-stream body as sent
    sent_events: list[bytes] = dataclasses.field(default_factory=list)  # SSE events as sent

    def sent_json(self) -> Any:
        return json.loads(self.sent_body)

    def sent_chunks(self) -> list[dict[str, Any]]:
        """The JSON chunks actually written (without ``[DONE]``)."""
        out = []
        for e in self.sent_events:
            data = e.decode()[len("data: ") :].strip()
            if data != "[DONE]":
                out.append(json.loads(data))
        return out


_DEFAULT_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("Bad request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to sample from this model", "invalid_request_error", None),
    404: ("The model does not exist or you do not have access to it.", "invalid_request_error", "model_not_found"),
    429: ("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request. Sorry about that!", "server_error", None),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}


# --------------------------------------------------------------------------- server


class UpstreamServer(ScriptedServer[Reply]):
    """Scripted OpenAI-compatible upstream on 127.0.0.1; see the module docstring."""

    reply_class = Reply
    thread_name = "upstream-server"

    def __init__(
        self,
        *,
        models: list[str] | None = None,
        context_windows: dict[str, int] | None = None,
        default_context_window: int = 128_000,
        default_max_tokens: int = 0,
        api_key: str | None = None,
        counting: Counting | str | None = None,
        error_style: str = "openai",
    ) -> None:
        super().__init__()
        if error_style not in CHAT_ERROR_STYLES:
            raise ValueError(f"unknown error style {error_style!r}: one of {', '.join(CHAT_ERROR_STYLES)}")
        self.models = models or ["gpt-4o", "gpt-4o-mini", "gpt-small"]
        self.context_windows = dict(context_windows or {})
        self.default_context_window = default_context_window
        self.default_max_tokens = default_max_tokens
        self.api_key = api_key  # when set, other bearer keys get 401
        self.meter = Meter(counting)  # how this server counts a request (window check and usage)
        self.error_style = error_style  # whose 400 an oversized request gets

    @property
    def counting(self) -> Counting:
        return self.meter.counting

    def _warm_up(self) -> None:
        _encoding()  # load the tokenizer before the first request, not inside a timed one
        self.counting.text("warm up")

    # ---- inspection

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def last_chat(self) -> RecordedRequest:
        reqs = self.chat_requests
        assert reqs, "upstream received no chat request"
        return reqs[-1]

    @property
    def last_reply(self) -> Reply:
        with self._lock:
            assert self.replies_sent, "upstream sent no chat reply"
            return self.replies_sent[-1]

    # ---- ASGI

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        record = await self._receive_request(scope, receive)
        if record is None:
            return
        headers, raw, body = record.headers, record.raw, record.body

        started = time.monotonic()
        path = scope["path"].rstrip("/")
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            await self._send_json(
                send,
                401,
                openai_error(
                    "Incorrect API key provided. You can find your API key at "
                    "https://platform.openai.com/account/api-keys.",
                    code="invalid_api_key",
                ),
                started,
            )
            return
        if scope["method"] == "GET" and path == "/v1/models":
            await self._send_json(
                send,
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": m, "object": "model", "created": 1700000000, "owned_by": "system"} for m in self.models
                    ],
                },
                started,
            )
            return
        if scope["method"] == "POST" and path == "/v1/embeddings" and isinstance(body, dict):
            inputs = body.get("input")
            texts = inputs if isinstance(inputs, list) else [inputs]
            tokens = sum(count_text_tokens(str(text)) for text in texts)
            data = [
                {"object": "embedding", "index": i, "embedding": [float(len(str(text))), 0.5, -0.25]}
                for i, text in enumerate(texts)
            ]
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
            await self._send_json(
                send, 200, {"object": "list", "data": data, "model": body.get("model"), "usage": usage}, started
            )
            return
        if path != "/v1/chat/completions":
            await self._send_json(
                send, 404, openai_error(f"Invalid URL ({scope['method']} {scope['path']})", code=None), started
            )
            return
        if scope["method"] != "POST":
            await self._send_json(
                send, 405, openai_error(f"Invalid method for URL ({scope['method']} {scope['path']})"), started
            )
            return
        if raw and body is None:
            await self._send_json(
                send,
                400,
                openai_error(
                    "We could not parse the JSON body of your request. (HINT: This likely means you "
                    "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, "
                    "but what was sent was not valid JSON. If you have trouble figuring out how to fix "
                    "this, please contact us through our help center at help.openai.com.)"
                ),
                started,
            )
            return
        error, prompt = self._check(body)
        if error is not None:
            await self._send_json(send, 400, error, started)
            return

        reply = self._next_reply(body)
        try:
            await self._answer(reply, body, send, receive, started, prompt)
        finally:
            reply.done.set()

    # ---- validation, like the real API

    def context_window(self, model: str) -> int:
        return self.context_windows.get(model, self.default_context_window)

    def _validate(self, body: Any) -> dict[str, Any] | None:
        return self._check(body)[0]

    def _check(self, body: Any) -> tuple[dict[str, Any] | None, int | None]:
        """(the 400 body, or None) and the prompt as this server counted it (None when the body
        was refused before counting)."""
        problem = self._shape(body)
        if problem is not None:
            return problem, None
        return self._fits(body)

    def _shape(self, body: Any) -> dict[str, Any] | None:
        if not isinstance(body, dict):
            return openai_error(
                "Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter"
            )
        if "model" not in body:
            return openai_error("you must provide a model parameter", param=None)
        messages = body.get("messages")
        if messages is None:
            return openai_error(
                "Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter"
            )
        if not isinstance(messages, list):
            return openai_error(
                f"Invalid type for 'messages': expected an array, but got {type(messages).__name__} instead.",
                param="messages",
                code="invalid_type",
            )
        if not messages:
            return openai_error(
                "Invalid 'messages': empty array. Expected an array with minimum length 1, but got "
                "an empty array instead.",
                param="messages",
                code="empty_array",
            )
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                return openai_error(
                    f"Invalid type for 'messages[{i}]': expected an object, but got {type(m).__name__} instead.",
                    param=f"messages[{i}]",
                    code="invalid_type",
                )
            if "role" not in m:
                return openai_error(
                    f"Missing required parameter: 'messages[{i}].role'.",
                    param=f"messages[{i}].role",
                    code="missing_required_parameter",
                )
        # Tool pairing: results answer ids of the nearest preceding assistant tool_calls, and
        # every id is answered before the next non-tool message.
        open_ids: list[str] = []
        open_at = -1
        known_ids: set[str] = set()
        for i, m in enumerate(messages):
            role = m.get("role")
            if role == "tool":
                if m.get("tool_call_id") not in known_ids:
                    return openai_error(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.",
                        param=f"messages.[{i}].role",
                    )
                if m.get("tool_call_id") in open_ids:
                    open_ids.remove(m["tool_call_id"])
                continue
            if open_ids:
                return openai_error(
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                    f"response messages: {', '.join(open_ids)}",
                    param=f"messages.[{open_at}].role",
                )
            known_ids = set()
            if role == "assistant" and m.get("tool_calls"):
                open_ids = [c.get("id") for c in m["tool_calls"] if isinstance(c, dict)]
                known_ids = set(open_ids)
                open_at = i
        if open_ids:
            return openai_error(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(open_ids)}",
                param=f"messages.[{open_at}].role",
            )
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        if max_tokens is None:
            return None
        name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            return openai_error(
                f"Invalid type for '{name}': expected an integer, but got {type(max_tokens).__name__} instead.",
                param=name,
                code="invalid_type",
            )
        if max_tokens < 1:
            return openai_error(
                f"Invalid '{name}': integer below minimum value. Expected a value >= 1, but got {max_tokens} instead.",
                param=name,
                code="integer_below_min_value",
            )
        return None

    def _fits(self, body: dict[str, Any]) -> tuple[dict[str, Any] | None, int]:
        """The window check with this request's one count (drawn here: jitter draws anew)."""
        model = str(body["model"])
        window = self.context_window(model)
        prompt = self.meter.measure(lambda c: count_prompt_tokens(body, c))
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        max_tokens = int(asked or self.default_max_tokens)
        tool_tokens = self.counting.openai_tools(body.get("tools")) if self.error_style == "openrouter" else 0
        error = chat_overflow(
            self.error_style,
            window=window,
            prompt=prompt,
            max_tokens=max_tokens,
            asked=bool(asked),
            model=model,
            tool_tokens=min(tool_tokens, prompt),
        )
        self._measured(Measured(model, prompt, max_tokens, window, body, error))
        return error, prompt

    # ---- answering

    def _headers(self, reply: Reply, started: float, content_type: str) -> list[tuple[bytes, bytes]]:
        h = {
            "content-type": content_type,
            "x-request-id": "req_" + secrets.token_hex(16),
            "openai-processing-ms": str(int((time.monotonic() - started) * 1000)),
            "openai-version": "2020-10-01",
            "openai-organization": "user-test",
            "x-ratelimit-limit-requests": "10000",
            "x-ratelimit-remaining-requests": "9999",
            "x-ratelimit-limit-tokens": "30000000",
            "x-ratelimit-remaining-tokens": "29999000",
            "x-ratelimit-reset-requests": "6ms",
            "x-ratelimit-reset-tokens": "2ms",
        }
        h.update({k.lower(): v for k, v in reply.headers.items()})
        return [(k.encode("latin-1"), str(v).encode("latin-1")) for k, v in h.items()]

    async def _send_json(self, send: Any, status: int, obj: Any, started: float, reply: Reply | None = None) -> None:
        data = obj if isinstance(obj, bytes) else (obj.encode() if isinstance(obj, str) else json.dumps(obj).encode())
        headers = self._headers(reply or Reply(), started, "application/json")
        headers.append((b"content-length", str(len(data)).encode()))
        if reply is not None:
            reply.sent_status = status
            reply.sent_headers = {k.decode(): v.decode() for k, v in headers}
            reply.sent_body = data
        await self._send_body(send, status, headers, data)

    async def _answer(
        self, reply: Reply, body: dict[str, Any], send: Any, receive: Any, started: float, prompt: int | None = None
    ) -> None:
        async with self._watching(receive, reply) as finished:
            await self._answer_inner(reply, body, send, started, finished, prompt)

    def _usage(
        self, reply: Reply, body: dict[str, Any], choices: list[dict[str, Any]], counted: int | None = None
    ) -> dict:
        """The usage object: the prompt as counted for the window check (`counted`), unless the
        reply scripts it; cached tokens are part of it and never more than it."""
        if reply.usage is not None:
            return reply.usage
        if reply.prompt_tokens is not None:
            prompt = reply.prompt_tokens
        elif counted is not None:
            prompt = counted
        else:
            prompt = self.meter.measure(lambda c: count_prompt_tokens(body, c))
        text = self.counting.text
        if reply.completion_tokens is not None:
            completion = reply.completion_tokens
        else:
            completion = 0
            for c in choices:
                completion += text(c["content"] or "")
                for call in c["tool_calls"] or []:
                    completion += text(call["function"]["name"])
                    completion += text(call["function"]["arguments"])
            completion += reply.reasoning_tokens
        cached = min(reply.cached_tokens, prompt)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reply.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def _choices(self, reply: Reply, body: dict[str, Any]) -> list[dict[str, Any]]:
        n = int(body.get("n") or 1)
        tool_calls = None
        if reply.tool_calls:
            tool_calls = []
            for c in reply.tool_calls:
                if "function" not in c:
                    c = tool_call(c["name"], c.get("arguments", "{}"), c.get("id"))
                tool_calls.append(c)
        content = reply.content
        if content is None and not tool_calls:
            last_user = ""
            for m in body["messages"]:
                if isinstance(m, dict) and m.get("role") == "user":
                    last_user = _content_text(m.get("content"))
            content = f"ok: {last_user}"
        out = []
        for i in range(n):
            text = reply.contents[i] if reply.contents and i < len(reply.contents) else content
            finish = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
            out.append({"content": text, "tool_calls": tool_calls, "finish_reason": finish})
        return out

    @staticmethod
    def _logprobs(text: str) -> dict[str, Any]:
        enc = _encoding()
        items = []
        for tok in enc.encode(text or "", disallowed_special=()):
            b = enc.decode_single_token_bytes(tok)
            s = b.decode("utf-8", errors="replace")
            items.append({"token": s, "logprob": -0.01, "bytes": list(b), "top_logprobs": []})
        return {"content": items, "refusal": None}

    async def _answer_inner(
        self,
        reply: Reply,
        body: dict[str, Any],
        send: Any,
        started: float,
        finished: threading.Event,
        prompt: int | None = None,
    ) -> None:
        if reply.delay_before_headers:
            await self._sleep(reply.delay_before_headers)
        if reply.hang:
            await self._wait(reply, lambda: False, timeout=3600)
            return
        if reply.drop_after_chunks == 0 and not body.get("stream"):
            raise _Dropped()
        if reply.status != 200:
            if reply.error_body is not None:
                payload = reply.error_body
            else:
                msg, typ, code = _DEFAULT_ERRORS.get(reply.status, ("Upstream error.", "server_error", None))
                payload = openai_error(msg, typ, None, code)
            finished.set()
            await self._send_json(send, reply.status, payload, started, reply)
            return

        model = reply.model or body["model"]
        cid = "chatcmpl-" + secrets.token_hex(12)
        created = int(time.time())
        choices = self._choices(reply, body)
        usage = self._usage(reply, body, choices, prompt)
        reply.sent_usage = usage
        want_logprobs = bool(body.get("logprobs"))

        if not body.get("stream"):
            finished.set()
            if reply.body is not None:
                await self._send_json(send, 200, reply.body, started, reply)
                return
            wire_choices = []
            for i, c in enumerate(choices):
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": c["content"],
                    "refusal": None,
                    "annotations": [],
                }
                if c["tool_calls"]:
                    message["tool_calls"] = c["tool_calls"]
                if reply.extra_message:
                    message.update(reply.extra_message)
                wire_choices.append(
                    {
                        "index": i,
                        "message": message,
                        "logprobs": self._logprobs(c["content"] or "") if want_logprobs else None,
                        "finish_reason": c["finish_reason"],
                    }
                )
            await self._send_json(
                send,
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": wire_choices,
                    "usage": usage,
                    "service_tier": "default",
                    "system_fingerprint": "fp_scripted",
                },
                started,
                reply,
            )
            return

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(choice_list: list[dict[str, Any]], usage_value: Any = None) -> bytes:
            obj: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "service_tier": "default",
                "system_fingerprint": "fp_scripted",
                "choices": choice_list,
            }
            if include_usage:
                obj["usage"] = usage_value
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        events: list[bytes] = []
        for i, c in enumerate(choices):

            def piece(delta: dict[str, Any], finish: str | None = None, lp: Any = None, i: int = i) -> bytes:
                return chunk([{"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish}])

            role_sent = False
            if c["content"] is not None and (c["content"] or not c["tool_calls"]):
                events.append(
                    piece(
                        {"role": "assistant", "content": "", "refusal": None},
                        lp={"content": [], "refusal": None} if want_logprobs else None,
                    )
                )
                role_sent = True
                for text in _split(c["content"], reply.chunks):
                    lp = self._logprobs(text) if want_logprobs else None
                    events.append(piece({"content": text}, lp=lp))
            for k, call in enumerate(c["tool_calls"] or []):
                head: dict[str, Any] = {
                    "tool_calls": [
                        {
                            "index": k,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
                if not role_sent:
                    head = {"role": "assistant", "content": None, **head, "refusal": None}
                    role_sent = True
                events.append(piece(head))
                for part in _split(call["function"]["arguments"], reply.chunks):
                    events.append(piece({"tool_calls": [{"index": k, "function": {"arguments": part}}]}))
            events.append(piece({}, finish=c["finish_reason"]))
        if include_usage:
            events.append(chunk([], usage))
        events.append(b"data: [DONE]\n\n")

        headers = self._headers(reply, started, "text/event-stream; charset=utf-8")
        reply.sent_status = 200
        reply.sent_headers = {k.decode(): v.decode() for k, v in headers}

        def on_sent(k: int, data: bytes) -> None:
            reply.sent_events.append(data)
            reply.chunks_sent += 1
            if k == 0:
                reply.first_chunk_sent.set()

        await self._write_stream(
            send,
            reply,
            headers,
            events,
            finished,
            on_sent,
            drop_after=reply.drop_after_chunks,
            hold_after=reply.hold_after_chunks,
            hold_timeout=60.0,
            delay_between=reply.delay_between_chunks,
        )
