"""A scripted upstream that speaks the Anthropic Messages API and validates like the real one.

Same style as :mod:`tests.support.upstream_server`: uvicorn in a background thread, a FIFO of scripted
:class:`Reply` objects (plus an optional ``responder``), every request recorded.

- ``GET /v1/models``: one model (400 without ``anthropic-version``, as the real API).
- ``POST /v1/messages`` non-stream: a ``message`` object; stream: the real event sequence
  (``message_start`` with usage, ``ping``, per block ``content_block_start`` / ``_delta``
  (``thinking_delta`` + ``signature_delta``, ``text_delta``, ``input_json_delta``) /
  ``content_block_stop``, ``message_delta`` with cumulative usage and ``stop_reason``,
  ``message_stop``), each as ``event: NAME\\ndata: JSON\\n\\n``.
- ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}`` (with ``context_management``, the
  count after its edits and ``context_management.original_input_tokens``).
- Context management (:mod:`tests.support.anthropic_context`): ``context_management`` edits
  (``clear_tool_uses_20250919``, ``clear_thinking_20251015``, ``compact_20260112``) behind their
  ``anthropic-beta`` values, applied to what the model sees and reported in
  ``context_management.applied_edits``; a due compaction answers a ``compaction`` block (streamed
  as one ``compaction_delta``) with ``usage.iterations``; a compaction block sent back drops what
  precedes it. :attr:`AnthropicUpstream.compactions` records each compaction.
- Validation, with the real API's error shape and wording: first message must be a user
  message; a mid-conversation ``{"role": "system"}`` message (text only) must immediately follow
  a user message; every ``tool_use`` of an assistant turn needs its ``tool_result`` in the next user
  message (and no ``tool_result`` without its ``tool_use``; results before other blocks); every
  thinking block's signature must verify (they are HMACs of the thinking text, so an altered or
  invented block is rejected); with ``thinking`` enabled, a final assistant turn with tool use
  must start with its thinking block; at most 4 ``cache_control`` blocks; non-empty text; the
  prompt must fit the model's window.
- Usage: ``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``,
  ``output_tokens``. Prompt caching is simulated: a ``cache_control`` breakpoint whose exact
  prefix (markers aside) was sent before as a breakpoint is read from the cache, the rest up to
  the last breakpoint is written. As the API does, a breakpoint also finds an entry up to 20
  content blocks before it (``LOOKBACK``), so a client's breakpoint on its newest message reads
  the previous request's.
  Tokens are counted in the server's ``counting`` mode (:mod:`tests.support.counting`; default
  ``exact``: tiktoken o200k over the text, 3 per turn, tools as their JSON plus the tool-use
  system prompt Anthropic documents; see :func:`estimate_tokens`, ``tool_billing``). One count
  per request, bias and jitter included, is what the window is enforced against (with the API's
  two real messages: "prompt is too long: ..." when the prompt alone is over the window, "input
  length and `max_tokens` exceed context limit: ..." when only prompt + max_tokens is;
  :mod:`tests.support.overflow`) and what usage bills; cache reads and writes are scaled with it,
  so ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens`` is that count.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import secrets
import threading
from collections.abc import Callable
from typing import Any

from tests.support import anthropic_context as context
from tests.support.counting import EXACT, Counting, Meter
from tests.support.overflow import Measured, anthropic_overflow
from tests.support.scripted_server import RecordedRequest, ScriptedServer
from tests.support.scripted_server import split_text as _split
from tests.support.tool_billing import anthropic_tool_prompt

SIGNING_KEY = b"scripted-anthropic-thinking-key"
LOOKBACK = 20
"""content blocks before a breakpoint where the cache looks for an entry (the API's documented window)"""


def sign(thinking: str) -> str:
    return base64.b64encode(hmac.new(SIGNING_KEY, thinking.encode(), hashlib.sha256).digest()).decode()


def error_body(type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type, "message": message}}


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "thinking":
        return str(block.get("thinking", ""))
    if kind == "tool_use":
        return str(block.get("name", "")) + json.dumps(block.get("input"))
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return "\n".join(_block_text(b) for b in content)
        return str(content or "")
    if kind == "compaction":  # the summary is what the model sees (encrypted_content is not)
        return str(block.get("content") or "")
    if kind in ("image", "redacted_thinking"):
        return ""
    return json.dumps(block)


def _segments(body: dict[str, Any], counting: Counting = EXACT) -> list[tuple[Any, int, bool]]:
    """(segment, tokens, has cache_control) in cache-prefix order: tools, system, messages."""
    text = counting.text
    out: list[tuple[Any, int, bool]] = []
    if body.get("tools"):
        out.append(("tool-use system prompt", anthropic_tool_prompt(body), False))
    for tool in body.get("tools") or []:
        visible = {k: v for k, v in tool.items() if k != "cache_control"}
        out.append((tool, counting.json(visible), bool(tool.get("cache_control"))))
    system = body.get("system")
    if isinstance(system, str):
        out.append((system, text(system), False))
    elif isinstance(system, list):
        for block in system:
            out.append((block, text(_block_text(block)), bool(block.get("cache_control"))))
    turn = counting.message_tokens + (counting.role_tokens or 0)  # the role is not counted as text
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [content] if isinstance(content, str) else list(content or [])
        out.append((("role", message.get("role")), turn, False))  # a tuple: not a content block
        for block in blocks:
            marked = isinstance(block, dict) and bool(block.get("cache_control"))
            out.append((block, text(_block_text(block)), marked))
    return out


def estimate_tokens(body: dict[str, Any], counting: Counting = EXACT) -> int:
    """The input tokens of a Messages request in `counting`'s encoding and framing (before its
    bias and jitter)."""
    return sum(tokens for _, tokens, _ in _segments(body, counting))


@dataclasses.dataclass
class Reply:
    """One scripted answer.

    text            assistant text; None without tool uses -> ``"ok: <last user text>"``.
    thinking        a thinking block first (signed by the server); ``redacted`` adds a
                    redacted_thinking block after it.
    tool_uses       ``[{"name", "input", "id"?}]`` -> tool_use blocks (stop_reason tool_use).
    input_tokens / output_tokens / cache_read / cache_write   override the simulated usage.
    status, error   a non-200 answer with an Anthropic error body (``error`` overrides it).
    chunks          pieces each text / thinking / tool input is streamed in.
    duplicate_final_delta   stream: send the final message_delta twice.
    error_after_events      stream: after k events send an ``error`` event and close.
    drop_after_events       stream: close the connection after k events (no message_stop).
    hold / hold_after_events  stream: wait for the Event before sending event k.
    compaction_summary  what a compaction during this reply summarizes to (else the server's
                    ``compactor``, else ``anthropic_context.default_summary``).
    """

    text: str | None = None
    thinking: str | None = None
    redacted: bool = False
    tool_uses: list[dict[str, Any]] | None = None
    stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    status: int = 200
    error: Any = None
    chunks: int = 3
    duplicate_final_delta: bool = False
    error_after_events: int | None = None
    drop_after_events: int | None = None
    hold: threading.Event | None = None
    hold_after_events: int = 1
    compaction_summary: str | None = None

    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    disconnected: threading.Event = dataclasses.field(default_factory=threading.Event)
    sent_status: int | None = None
    sent_body: bytes = b""
    sent_events: list[bytes] = dataclasses.field(default_factory=list)
    usage: dict[str, Any] | None = None
    """The final usage this reply reported (set by the server)."""
    message: dict[str, Any] | None = None
    """The complete message this reply stands for (set by the server, streamed or not)."""


class AnthropicUpstream(ScriptedServer[Reply]):
    reply_class = Reply
    thread_name = "anthropic-upstream"
    start_error = "scripted Anthropic upstream did not start"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        context_windows: dict[str, int] | None = None,
        default_context_window: int = 200_000,
        counting: Counting | str | None = None,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.context_windows = dict(context_windows or {})
        self.default_context_window = default_context_window
        self.meter = Meter(counting)  # how this server counts a request (window check and usage)
        self.rejections: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._cache: set[str] = set()
        # Context management (tests.support.anthropic_context):
        self.compactor: Callable[[list[dict[str, Any]]], str] | None = None
        """messages (as the model sees them) -> the summary of a compaction (None: the default)."""
        self.compactions: list[dict[str, Any]] = []
        """Every compaction made: block, summary, input_tokens (the closed context), paused, instructions."""

    @property
    def counting(self) -> Counting:
        return self.meter.counting

    def _warm_up(self) -> None:
        self.counting.text("warm up")

    def _reset(self) -> None:
        self.rejections.clear()
        self._cache.clear()
        self.compactions.clear()

    @property
    def message_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == "/v1/messages"]

    # ---- validation

    def validate(self, body: Any) -> dict[str, Any] | None:
        return self._check(body)[0]

    def _check(self, body: Any, seen: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, float]:
        """(the 400 body, or None) and this request's counting factor (bias and jitter, drawn
        once: the window check and usage both use it). `seen` is the request as the model sees
        it (context management applied; default `body`): what the window check counts."""
        problem = self._shape(body)
        if problem is not None:
            return problem, 1.0
        factor = self.meter.factor()
        window = self.context_windows.get(body["model"], self.default_context_window)
        prompt = self.counting.scaled(estimate_tokens(seen or body, self.counting), factor)
        problem = anthropic_overflow(window=window, prompt=prompt, max_tokens=body["max_tokens"])
        self._measured(Measured(body["model"], prompt, body["max_tokens"], window, body, problem))
        return problem, factor

    def _shape(self, body: Any) -> dict[str, Any] | None:
        def bad(message: str) -> dict[str, Any]:
            return error_body("invalid_request_error", message)

        if not isinstance(body, dict):
            return bad("Request body must be a JSON object")
        if not isinstance(body.get("model"), str):
            return bad("model: Field required")
        if not isinstance(body.get("max_tokens"), int):
            return bad("max_tokens: Field required")
        if body["max_tokens"] < 1:
            return bad("max_tokens: Input should be greater than or equal to 1")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return bad("messages: Field required")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
                return bad(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
            content = m.get("content")
            if m["role"] == "system":  # a mid-conversation system message: right after a user turn
                if i == 0 or messages[i - 1].get("role") != "user":
                    return bad(f"messages.{i}: a system message must immediately follow a user message")
                blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
                if (
                    not isinstance(blocks, list)
                    or not blocks
                    or any(not isinstance(b, dict) or b.get("type") != "text" or not b.get("text") for b in blocks)
                ):
                    return bad(f"messages.{i}.content: a system message needs non-empty text content")
                continue
            if isinstance(content, str):
                if not content and not (i == len(messages) - 1 and m["role"] == "assistant"):
                    return bad(
                        f"messages.{i}: all messages must have non-empty content except for the "
                        "optional final assistant message"
                    )
                continue
            if not isinstance(content, list) or not content:
                return bad(
                    f"messages.{i}: all messages must have non-empty content except for the "
                    "optional final assistant message"
                )
            for j, block in enumerate(content):
                if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                    return bad(f"messages.{i}.content.{j}: Input should be a valid dictionary")
                if block["type"] == "text" and not block.get("text"):
                    return bad("messages: text content blocks must be non-empty")
        if messages[0]["role"] != "user":
            return bad('messages: first message must use the "user" role')
        # tool pairing
        for i, m in enumerate(messages):
            blocks = m["content"] if isinstance(m["content"], list) else []
            if m["role"] == "assistant":
                ids = [b.get("id") for b in blocks if b["type"] == "tool_use"]
                if not ids:
                    continue
                following = messages[i + 1] if i + 1 < len(messages) else None
                answered: set[Any] = set()
                if following is not None and following["role"] == "user" and isinstance(following["content"], list):
                    answered = {b.get("tool_use_id") for b in following["content"] if b.get("type") == "tool_result"}
                missing = [x for x in ids if x not in answered]
                if missing:
                    return bad(
                        f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                        f"after: {', '.join(map(str, missing))}. Each `tool_use` block must have a "
                        "corresponding `tool_result` block in the next message."
                    )
            else:
                previous = messages[i - 1] if i > 0 else None
                issued = set()
                if previous is not None and previous["role"] == "assistant" and isinstance(previous["content"], list):
                    issued = {b.get("id") for b in previous["content"] if b.get("type") == "tool_use"}
                seen_other = False
                for j, b in enumerate(blocks):
                    if b["type"] != "tool_result":
                        seen_other = True
                        continue
                    if b.get("tool_use_id") not in issued:
                        return bad(
                            f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                            f"blocks: {b.get('tool_use_id')}. Each `tool_result` block must have a "
                            "corresponding `tool_use` block in the previous message."
                        )
                    if seen_other:
                        return bad(
                            f"messages.{i}.content.{j}: `tool_result` blocks must come first in the "
                            "content array of a user message, before any other blocks."
                        )
        # thinking signatures, and the final assistant turn with tool use
        thinking_on = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == "enabled"
        last_assistant = None
        for i, m in enumerate(messages):
            if m["role"] != "assistant" or not isinstance(m["content"], list):
                continue
            last_assistant = i
            for j, b in enumerate(m["content"]):
                if b["type"] == "thinking" and b.get("signature") != sign(str(b.get("thinking", ""))):
                    return bad(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
                if b["type"] == "redacted_thinking" and not str(b.get("data", "")).startswith("redacted:"):
                    return bad(f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block")
        if thinking_on and last_assistant is not None:
            blocks = messages[last_assistant]["content"]
            if any(b["type"] == "tool_use" for b in blocks) and blocks[0]["type"] not in (
                "thinking",
                "redacted_thinking",
            ):
                return bad(
                    f"messages.{last_assistant}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                    f"but found `{blocks[0]['type']}`. When `thinking` is enabled, a final `assistant` "
                    "message must start with a thinking block (preceeding the lastmost set of `tool_use` "
                    "and `tool_result` blocks). We recommend you include thinking blocks from previous "
                    "turns. To avoid this requirement, disable `thinking`."
                )
        markers = sum(1 for _, _, marked in _segments(body) if marked)
        if markers > 4:
            return bad(f"A maximum of 4 blocks with cache_control may be provided. Found {markers}.")
        return None

    # ---- usage with a simulated prompt cache

    def _lookup(self, keys: list[tuple[str, int, bool]]) -> int:
        """Tokens read from the cache for a breakpoint at the end of `keys`: the newest entry at
        this block or one of the LOOKBACK content blocks before it (0: none)."""
        blocks = 0
        with self._lock:
            for key, through, is_block in reversed(keys):
                if key in self._cache:
                    return through
                blocks += is_block
                if blocks > LOOKBACK:
                    return 0
        return 0

    def _input_usage(self, body: dict[str, Any], reply: Reply, factor: float = 1.0) -> dict[str, int]:
        """Input usage with the simulated cache, in this server's counting: the prefix is cached
        in the mode's tokens, then the request's factor scales the three parts alike."""
        segments = _segments(body, self.counting)
        total = sum(tokens for _, tokens, _ in segments)
        digest = hashlib.sha256()
        cumulative = 0
        keys: list[tuple[str, int, bool]] = []  # (prefix key, tokens through it, a content block)
        read = write_upto = 0
        new_keys = []
        for segment, tokens, marked in segments:
            if isinstance(segment, dict):  # the marker itself is not part of the cached prefix
                segment = {k: v for k, v in segment.items() if k != "cache_control"}
            digest.update(json.dumps(segment, sort_keys=True).encode())
            cumulative += tokens
            keys.append((digest.copy().hexdigest(), cumulative, not isinstance(segment, tuple)))
            if marked:
                read = max(read, self._lookup(keys))
                write_upto = cumulative
                new_keys.append(keys[-1][0])
        with self._lock:
            self._cache.update(new_keys)
        write = max(0, write_upto - read)
        if factor != 1.0:
            scaled = self.counting.scaled
            total, read, write = scaled(total, factor), scaled(read, factor), scaled(write, factor)
            read = min(read, total)
            write = min(write, total - read)
        usage = {
            "input_tokens": max(0, total - read - write),
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
        }
        if reply.cache_read is not None:
            usage["cache_read_input_tokens"] = reply.cache_read
        if reply.cache_write is not None:
            usage["cache_creation_input_tokens"] = reply.cache_write
        if reply.input_tokens is not None:
            usage["input_tokens"] = reply.input_tokens
        return usage

    # ---- ASGI

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        record = await self._receive_request(scope, receive, path=scope.get("path", "").rstrip("/"))
        if record is None:
            return
        path = record.path
        headers, body = record.headers, record.body
        if self.api_key is not None and headers.get("x-api-key") != self.api_key:
            await self._json(send, 401, error_body("authentication_error", "invalid x-api-key"))
            return
        if path == "/v1/models" and scope["method"] == "GET":
            if not headers.get("anthropic-version"):  # the real API's answer without the header
                await self._json(
                    send, 400, error_body("invalid_request_error", "anthropic-version: header is required")
                )
                return
            model = {"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5"}
            listed = {"data": [model], "has_more": False, "first_id": model["id"], "last_id": model["id"]}
            await self._json(send, 200, listed)
            return
        if path not in ("/v1/messages", "/v1/messages/count_tokens") or scope["method"] != "POST":
            await self._json(send, 404, error_body("not_found_error", f"Not found: {scope['method']} {path}"))
            return
        if not headers.get("anthropic-version"):  # the API's own answer; the SDKs always send it
            await self._json(send, 400, error_body("invalid_request_error", "anthropic-version: header is required"))
            return
        if body is None:
            await self._json(
                send,
                400,
                error_body("invalid_request_error", "There was an error parsing the body of your request as JSON."),
            )
            return
        problem = context.request_problem(body, headers) if isinstance(body, dict) else None
        if problem is not None:
            with self._lock:
                self.rejections.append((body, problem))
            await self._json(send, 400, problem)
            return
        seen = context.plan(body, lambda b: estimate_tokens(b, self.counting)) if isinstance(body, dict) else None
        if path == "/v1/messages/count_tokens":
            target = seen.body if seen is not None else body
            counted: dict[str, Any] = {"input_tokens": self.meter.measure(lambda c: estimate_tokens(target, c))}
            if seen is not None and seen.managed:
                counted["context_management"] = {"original_input_tokens": seen.original_tokens}
            await self._json(send, 200, counted)
            return
        problem, factor = self._check(body, seen.body if seen is not None else None)
        if problem is not None or seen is None:
            assert problem is not None  # a body that is not an object fails `_shape`
            with self._lock:
                self.rejections.append((body, problem))
            await self._json(send, 400, problem)
            return
        reply = self._next_reply(body)
        try:
            await self._answer(reply, seen.body, send, receive, factor, seen)
        finally:
            reply.done.set()

    async def _json(self, send: Any, status: int, obj: Any, reply: Reply | None = None) -> None:
        data = json.dumps(obj).encode()
        if reply is not None:
            reply.sent_status, reply.sent_body = status, data
        await self._send_body(
            send,
            status,
            [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (b"request-id", ("req_" + secrets.token_hex(12)).encode()),
                (b"anthropic-organization-id", b"org-scripted"),
            ],
            data,
        )

    def _content(self, reply: Reply, body: dict[str, Any]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.thinking is not None:
            blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": sign(reply.thinking)})
            if reply.redacted:
                blocks.append({"type": "redacted_thinking", "data": "redacted:" + secrets.token_hex(8)})
        text = reply.text
        if text is None and not reply.tool_uses:
            last = ""
            for m in body["messages"]:
                if m["role"] == "user":
                    content = m["content"]
                    texts = (
                        [content]
                        if isinstance(content, str)
                        else [b.get("text", "") for b in content if b.get("type") == "text"]
                    )
                    if texts:
                        last = texts[-1]
            text = f"ok: {last}"
        if text:
            blocks.append({"type": "text", "text": text})
        for use in reply.tool_uses or []:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": use.get("id") or "toolu_" + secrets.token_hex(12),
                    "name": use["name"],
                    "input": use.get("input", {}),
                }
            )
        return blocks

    def _managed(
        self,
        plan: context.Plan,
        reply: Reply,
        body: dict[str, Any],
        content: list[dict[str, Any]],
        usage: dict[str, Any],
        factor: float,
    ) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
        """Content, usage and stop reason (None: the reply's own) of a request with a
        ``compact_20260112`` edit: counted and summarized here, assembled by
        :func:`anthropic_context.compacted`."""
        if plan.compact is None:
            return content, usage, None
        scaled = self.counting.scaled
        prompt = scaled(estimate_tokens(body, self.counting), factor)
        if prompt < plan.compaction_trigger():
            return content, {**usage, "iterations": [context.iteration("message", usage)]}, None
        summary = reply.compaction_summary
        if summary is None:
            messages = body["messages"]
            summary = self.compactor(messages) if self.compactor is not None else context.default_summary(messages)
        block = context.compaction_block(summary)
        paused = bool(plan.compact.get("pause_after_compaction"))
        with self._lock:
            self.compactions.append(
                {
                    "block": block,
                    "summary": summary,
                    "input_tokens": prompt,
                    "paused": paused,
                    "instructions": plan.compact.get("instructions"),
                }
            )
        summarizing = {"input_tokens": prompt, "output_tokens": max(1, self.counting.text(summary))}
        # the model goes on from the summary alone
        after = {**body, "messages": [{"role": "assistant", "content": [block]}]}
        resumed = scaled(estimate_tokens(after, self.counting), factor)
        return context.compacted(content, usage, block, summarizing, resumed, paused)

    async def _answer(
        self,
        reply: Reply,
        body: dict[str, Any],
        send: Any,
        receive: Any,
        factor: float = 1.0,
        plan: context.Plan | None = None,
    ) -> None:
        if reply.status != 200:
            payload = (
                reply.error
                if reply.error is not None
                else error_body(
                    {
                        529: "overloaded_error",
                        429: "rate_limit_error",
                        500: "api_error",
                        401: "authentication_error",
                    }.get(reply.status, "api_error"),
                    "Overloaded" if reply.status == 529 else "Upstream error",
                )
            )
            await self._json(send, reply.status, payload, reply)
            return
        content = self._content(reply, body)
        usage = self._input_usage(body, reply, factor)
        output = (
            reply.output_tokens
            if reply.output_tokens is not None
            else max(1, sum(self.counting.text(_block_text(b)) for b in content))
        )
        final_usage: dict[str, Any] = {**usage, "output_tokens": output}
        stop = reply.stop_reason or ("tool_use" if reply.tool_uses else "end_turn")
        managed: dict[str, Any] = {}
        if plan is not None:
            content, final_usage, compacted = self._managed(plan, reply, body, content, final_usage, factor)
            stop = compacted or stop
            usage = {k: v for k, v in final_usage.items() if k not in ("output_tokens", "iterations")}
            if plan.managed:
                managed = {"context_management": {"applied_edits": plan.applied_edits}}
        reply.usage = final_usage
        message = {
            "id": "msg_" + secrets.token_hex(12),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": final_usage,
            **managed,
        }
        reply.message = message
        if not body.get("stream"):
            await self._json(send, 200, message, reply)
            return

        def event(name: str, data: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

        events = [
            event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        **message,
                        "content": [],
                        "stop_reason": None,
                        "usage": {**usage, "output_tokens": 1},
                        **({"context_management": None} if managed else {}),
                    },
                },
            ),
            event("ping", {"type": "ping"}),
        ]
        for index, block in enumerate(content):
            kind = block["type"]
            if kind == "thinking":
                start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [{"type": "thinking_delta", "thinking": p} for p in _split(block["thinking"], reply.chunks)]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            elif kind == "text":
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in _split(block["text"], reply.chunks)]
            elif kind == "compaction":  # the summary arrives whole in one compaction_delta
                start = {"type": "compaction", "content": None, "encrypted_content": None}
                deltas = [{"type": "compaction_delta", **{k: block[k] for k in ("content", "encrypted_content")}}]
            elif kind == "tool_use":
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": ""}] + [
                    {"type": "input_json_delta", "partial_json": p}
                    for p in _split(json.dumps(block["input"]), reply.chunks)
                ]
            else:
                start, deltas = block, []
            events.append(
                event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
            )
            events.extend(
                event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
                for d in deltas
            )
            events.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
        final = event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": final_usage,
                **managed,
            },
        )
        events.append(final)
        if reply.duplicate_final_delta:
            events.append(final)
        events.append(event("message_stop", {"type": "message_stop"}))

        reply.sent_status = 200
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"request-id", ("req_" + secrets.token_hex(12)).encode()),
        ]
        async with self._watching(receive, reply) as finished:
            await self._write_stream(
                send,
                reply,
                headers,
                events,
                finished,
                lambda k, data: reply.sent_events.append(data),
                drop_after=reply.drop_after_events,
                hold_after=reply.hold_after_events,
                error_after=reply.error_after_events,
                error_event=event("error", error_body("overloaded_error", "Overloaded")),
            )
