"""A scripted upstream that speaks Google's Gemini API (`generateContent`) and validates like it.

Same scaffolding as the other protocol servers (:mod:`tests.support.scripted_server`): uvicorn in
a background thread, a FIFO of scripted :class:`Reply` objects (plus an optional ``responder``),
every request recorded.

- ``POST /v1beta/models/{model}:generateContent`` (and under ``/v1``, as the API serves both):
  one ``GenerateContentResponse`` (``candidates[0].content.parts``, ``finishReason``,
  ``usageMetadata``, ``modelVersion``, ``responseId``).
- ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``: the same answer as
  ``data: {GenerateContentResponse}`` chunks (text in pieces, each function call whole, the
  ``finishReason`` on the last one), no ``[DONE]``; every chunk carries the usage so far (a
  snapshot: the last one is the call's usage). Without ``alt=sse`` the chunks come as one JSON array.
- ``POST /v1beta/models/{model}:countTokens``: ``{"totalTokens": N}`` for ``contents`` or a
  ``generateContentRequest`` (counted as usage counts a prompt), validated as a model call; a
  field beside them is refused as the JSON mapping of ``CountTokensRequest`` does.
- ``GET /v1beta/models``: one model.
- Credentials: ``x-goog-api-key`` or ``?key=``; a wrong key is the API's 400 ``API_KEY_INVALID``,
  none its 403 ``PERMISSION_DENIED``.
- Validation, with the API's error body ``{"error": {"code", "message", "status"}}`` and wording:
  ``contents`` required and non-empty, each with non-empty ``parts``; roles ``user`` / ``model``
  only; unknown fields of a part refused as the JSON mapping of its protobuf does; a function call
  turn must follow a user turn or a function response turn, a function response turn must follow
  a function call turn and answer each of its calls; every ``thoughtSignature`` must be the one
  this server issued for that part (an HMAC of the part's content, compared as bytes: the field
  is `bytes`, so standard and URL-safe base64 are the same signature; an altered or invented one
  is refused) and on ``gemini-3*`` models the first function call of each model turn of the current
  turn must carry one; the prompt must fit the model's window (input alone, as Gemini checks:
  "The input token count (N) exceeds the maximum number of tokens allowed (W).").
- Tokens are counted this server's own way (:data:`tests.support.gemini_rules.GEMINI_COUNTING`: cl100k, 4 tokens per
  content, 1 per role, tools as their JSON, 8% more than the text), never by ctxproxy's
  estimator. Implicit caching is simulated: the longest prefix (system, tools, contents) of at
  least ``cache_minimum`` tokens sent before is reported as ``cachedContentTokenCount``, a part of
  ``promptTokenCount``. ``candidatesTokenCount`` counts the answer, ``thoughtsTokenCount`` its
  thought, ``totalTokenCount`` their sum.

Sources (stored public copies, read 2026-12): googleapis/python-genai ``google/genai/types.py``
(Part, FunctionCall, FunctionResponse, GenerateContentResponseUsageMetadata field names) and
``models.py`` (``{model}:generateContent``, ``:streamGenerateContent?alt=sse``, ``x-goog-api-key``);
error bodies quoted in google-gemini/gemini-cli#4118, #6678, #11248 (input token count), #2321,
#17208 (function response parts), #11814 (function call turn), langchain-ai/langchain#27799
(function response turn), langgenius/dify-official-plugins#566 ("Please use a valid role: user,
model."), #2088 and nearai/ironclaw#1510 (missing thought_signature).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import secrets
import threading
from typing import Any
from urllib.parse import parse_qs

from tests.support.counting import Counting, Meter
from tests.support.gemini_rules import (
    CALL_TURN,
    GEMINI_COUNTING,
    PART_FIELDS,
    RESPONSE_COUNT,
    RESPONSE_TURN,
    SKIP_SIGNATURE,
    camel,
    decoded,
    error_body,
    estimate_tokens,
    native_part,
    part_text,
    segments,
    sign,
)
from tests.support.overflow import Measured
from tests.support.scripted_server import RecordedRequest, ScriptedServer
from tests.support.scripted_server import split_text as _split

PATH = re.compile(r"^/(?P<version>v1|v1beta)/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")


@dataclasses.dataclass
class Reply:
    """One scripted answer.

    text            the model's text; None without calls -> ``"ok: <last user text>"``.
    thought         a thought: billed as ``thoughtsTokenCount``, sent as a ``thought`` part when
                    the request asks ``thinkingConfig.includeThoughts``; the answer is signed.
    calls           ``[{"name", "args"}]`` -> functionCall parts (the first one signed).
    status, error   a non-200 answer with a Gemini error body (``error`` overrides it).
    chunks          pieces the text is streamed in.
    """

    text: str | None = None
    thought: str | None = None
    calls: list[dict[str, Any]] | None = None
    status: int = 200
    error: Any = None
    chunks: int = 3
    hold: threading.Event | None = None
    hold_after_events: int = 1
    drop_after_events: int | None = None

    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    disconnected: threading.Event = dataclasses.field(default_factory=threading.Event)
    usage: dict[str, Any] | None = None
    """The usage this reply reported (set by the server)."""
    content: dict[str, Any] | None = None
    """The complete model content this reply stands for (set by the server)."""


class GeminiUpstream(ScriptedServer[Reply]):
    reply_class = Reply
    thread_name = "gemini-upstream"
    start_error = "scripted Gemini upstream did not start"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        context_windows: dict[str, int] | None = None,
        default_context_window: int = 1_048_576,
        counting: Counting | str | None = GEMINI_COUNTING,
        cache_minimum: int = 1024,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.context_windows = dict(context_windows or {})
        self.default_context_window = default_context_window
        self.meter = Meter(counting)
        self.cache_minimum = cache_minimum
        self.rejections: list[tuple[Any, dict[str, Any]]] = []
        self._cache: dict[str, int] = {}

    @property
    def counting(self) -> Counting:
        return self.meter.counting

    def _warm_up(self) -> None:
        self.counting.text("warm up")

    def _reset(self) -> None:
        self.rejections.clear()
        self._cache.clear()

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """The generateContent calls, streamed or not."""
        with self._lock:
            return [
                r for r in self.requests if r.path.endswith("GenerateContent") or r.path.endswith(":generateContent")
            ]

    # ---- validation

    def validate(self, model: str, body: Any) -> dict[str, Any] | None:
        """The 400 body the API answers `body` with, or None when it takes it."""
        if not isinstance(body, dict):
            return error_body(400, "Invalid JSON payload received. Expected an object.")
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            return error_body(400, "* GenerateContentRequest.contents: contents is not specified\n")
        previous: str | None = None  # the kind of the previous turn: user, call, response, model
        calls = 0
        current = _current_turn(contents)
        for i, content in enumerate(contents):
            if not isinstance(content, dict):
                return error_body(400, f"Invalid value at 'contents[{i}]', expected an object.")
            role = content.get("role", "user")
            if role not in ("user", "model"):
                return error_body(400, "Please use a valid role: user, model.")
            parts = content.get("parts")
            if not isinstance(parts, list) or not parts:
                return error_body(
                    400, f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.\n"
                )
            for j, raw in enumerate(parts):
                if not isinstance(raw, dict):
                    return error_body(400, f"Invalid value at 'contents[{i}].parts[{j}]', expected an object.")
                for key in raw:
                    if camel(key) not in PART_FIELDS:
                        return error_body(
                            400,
                            f"Invalid JSON payload received. Unknown name \"{key}\" at 'contents[{i}].parts[{j}]': "
                            "Cannot find field.",
                        )
            parts = [native_part(p) for p in parts]
            n_calls = sum(1 for p in parts if "functionCall" in p)
            n_responses = sum(1 for p in parts if "functionResponse" in p)
            if n_responses:
                if previous != "call":
                    return error_body(400, RESPONSE_TURN)
                if n_responses != calls:
                    return error_body(400, RESPONSE_COUNT)
            elif previous == "call":
                return error_body(400, RESPONSE_COUNT)
            if n_calls and previous not in ("user", "response", None):
                return error_body(400, CALL_TURN)
            if role == "model":
                problem = self._signatures(model, parts, n_calls and i >= current, i)
                if problem is not None:
                    return problem
            kind = "call" if n_calls else ("response" if n_responses else ("model" if role == "model" else "user"))
            previous, calls = kind, n_calls
        if previous == "call":
            return error_body(400, RESPONSE_COUNT)
        return None

    @staticmethod
    def _signatures(model: str, parts: list[dict[str, Any]], current: bool, i: int) -> dict[str, Any] | None:
        for j, part in enumerate(parts):
            signature = part.get("thoughtSignature")
            if signature not in (None, SKIP_SIGNATURE) and decoded(signature) != decoded(sign(part)):
                return error_body(400, f"Corrupted thought signature at contents[{i}].parts[{j}].")
        first = next((p for p in parts if "functionCall" in p), None)
        if current and model.startswith("gemini-3") and first is not None and "thoughtSignature" not in first:
            name = first["functionCall"].get("name")
            return error_body(
                400,
                "Function call is missing a thought_signature in functionCall parts. This is required for tools "
                "to work correctly, and missing thought_signature may lead to degraded model performance. "
                f"Additional data, function call `default_api:{name}` , position {i + 1}. Please refer to "
                "https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
            )
        return None

    def _window(self, model: str, body: dict[str, Any], factor: float) -> tuple[int, dict[str, Any] | None]:
        window = self.context_windows.get(model, self.default_context_window)
        prompt = self.counting.scaled(estimate_tokens(body, self.counting), factor)
        problem = None
        if prompt > window:
            problem = error_body(
                400, f"The input token count ({prompt}) exceeds the maximum number of tokens allowed ({window})."
            )
        self._measured(Measured(model, prompt, 0, window, body, problem))
        return prompt, problem

    def _cached(self, body: dict[str, Any], prompt: int) -> int:
        """Tokens of the longest prefix sent before (implicit caching), scaled like the prompt."""
        digest = hashlib.sha256()
        cumulative, total = 0, estimate_tokens(body, self.counting) or 1
        read, keys = 0, []
        for segment, tokens in segments(body, self.counting):
            digest.update(json.dumps(segment, sort_keys=True).encode())
            cumulative += tokens
            keys.append((digest.hexdigest(), cumulative))
        with self._lock:
            for key, through in keys:
                if key in self._cache and through >= self.cache_minimum:
                    read = through
            self._cache.update(keys)
        return min(prompt, round(read * prompt / total))

    # ---- ASGI

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        record = await self._receive_request(scope, receive)
        if record is None:
            return
        query = parse_qs(record.query)
        key = record.headers.get("x-goog-api-key") or (query.get("key") or [None])[0]
        if self.api_key is not None and key is None:
            message = (
                "Method doesn't allow unregistered callers (callers without established identity). Please use "
                "API Key or other form of API consumer identity to call this API."
            )
            await self._json(send, 403, error_body(403, message, "PERMISSION_DENIED"))
            return
        if self.api_key is not None and key != self.api_key:
            await self._json(send, 400, error_body(400, "API key not valid. Please pass a valid API key."))
            return
        if record.path.rstrip("/") in ("/v1/models", "/v1beta/models") and record.method == "GET":
            model = {"name": "models/gemini-2.5-flash", "displayName": "Gemini 2.5 Flash", "inputTokenLimit": 1048576}
            await self._json(send, 200, {"models": [model]})
            return
        match = PATH.match(record.path)
        methods = ("generateContent", "streamGenerateContent", "countTokens")
        if match is None or match["method"] not in methods or record.method != "POST":
            await self._json(
                send, 404, error_body(404, f"Method not found: {record.method} {record.path}", "NOT_FOUND")
            )
            return
        model, method, body = match["model"], match["method"], record.body
        if body is None:
            await self._json(send, 400, error_body(400, "Invalid JSON payload received."))
            return
        if method == "countTokens":
            target = body.get("generateContentRequest", body) if isinstance(body, dict) else body
            problem = _count_fields(body) or self.validate(model, target)
            if problem is not None:
                await self._json(send, 400, problem)
                return
            await self._json(send, 200, {"totalTokens": self.meter.measure(lambda c: estimate_tokens(target, c))})
            return
        problem = self.validate(model, body)
        prompt = 0
        if problem is None:
            prompt, problem = self._window(model, body, self.meter.factor())
        if problem is not None:
            with self._lock:
                self.rejections.append((body, problem))
            await self._json(send, 400, problem)
            return
        reply = self._next_reply(body)
        try:
            await self._answer(reply, model, body, prompt, method == "streamGenerateContent", query, send, receive)
        finally:
            reply.done.set()

    async def _json(self, send: Any, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        headers = [(b"content-type", b"application/json; charset=UTF-8"), (b"content-length", str(len(data)).encode())]
        await self._send_body(send, status, headers, data)

    def _parts(self, reply: Reply, body: dict[str, Any]) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        config = body.get("generationConfig") or {}
        thinking = config.get("thinkingConfig") or {}
        if reply.thought is not None and thinking.get("includeThoughts"):
            parts.append({"text": reply.thought, "thought": True})
        text = reply.text
        if text is None and not reply.calls:
            last = ""
            for content in body["contents"]:
                texts = [p["text"] for p in content["parts"] if isinstance(p.get("text"), str) and not p.get("thought")]
                if content.get("role", "user") == "user" and texts:
                    last = texts[-1]
            text = f"ok: {last}"
        if text:
            parts.append({"text": text})
        for call in reply.calls or []:
            parts.append({"functionCall": {"name": call["name"], "args": call.get("args", {})}})
        if reply.thought is not None:  # the signature goes on the first call, else on the last part
            target = next((p for p in parts if "functionCall" in p), parts[-1] if parts else None)
            if target is not None:
                target["thoughtSignature"] = sign(target)
        return parts

    def _usage(self, prompt: int, cached: int, output: int, thoughts: int) -> dict[str, Any]:
        usage: dict[str, Any] = {"promptTokenCount": prompt}
        if output:
            usage["candidatesTokenCount"] = output
        if cached:
            usage["cachedContentTokenCount"] = cached
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        usage["totalTokenCount"] = prompt + output + thoughts
        usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
        return usage

    async def _answer(
        self,
        reply: Reply,
        model: str,
        body: dict[str, Any],
        prompt: int,
        stream: bool,
        query: dict[str, list[str]],
        send: Any,
        receive: Any,
    ) -> None:
        if reply.status != 200:
            status = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}.get(reply.status, "UNKNOWN")
            await self._json(
                send, reply.status, reply.error or error_body(reply.status, "The model is overloaded.", status)
            )
            return
        parts = self._parts(reply, body)
        visible = [p for p in parts if not p.get("thought")]
        output = max(1, sum(self.counting.text(part_text(p)) for p in visible))
        thoughts = self.counting.text(reply.thought) if reply.thought else 0
        usage = self._usage(prompt, self._cached(body, prompt), output, thoughts)
        reply.usage, reply.content = usage, {"parts": parts, "role": "model"}
        finish = {"finishReason": "STOP", "index": 0}
        meta = {"modelVersion": model, "responseId": secrets.token_urlsafe(16)}
        if not stream:
            answer = {"candidates": [{"content": reply.content, **finish}], "usageMetadata": usage, **meta}
            await self._json(send, 200, answer)
            return
        pieces: list[dict[str, Any]] = []
        for part in parts:
            if isinstance(part.get("text"), str) and "thoughtSignature" not in part:
                pieces.extend({**part, "text": t} for t in _split(part["text"], reply.chunks))
            else:
                pieces.append(part)
        chunks = []
        for k, piece in enumerate(pieces):
            last = k == len(pieces) - 1
            so_far = usage if last else self._usage(prompt, usage.get("cachedContentTokenCount", 0), 0, 0)
            candidate = {"content": {"parts": [piece], "role": "model"}, **(finish if last else {"index": 0})}
            chunks.append({"candidates": [candidate], "usageMetadata": so_far, **meta})
        if "sse" not in query.get("alt", []):
            await self._json(send, 200, chunks)
            return
        events = [b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks]
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        async with self._watching(receive, reply) as finished:
            await self._write_stream(
                send,
                reply,
                headers,
                events,
                finished,
                lambda k, data: None,
                drop_after=reply.drop_after_events,
                hold_after=reply.hold_after_events,
            )


def _count_fields(body: Any) -> dict[str, Any] | None:
    """The 400 for a field a `CountTokensRequest` does not have (it has two: `contents` and
    `generateContentRequest`, each also by its proto name)."""
    known = ("contents", "generateContentRequest")
    for key in body if isinstance(body, dict) else ():
        if camel(key) not in known:
            return error_body(400, f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.')
    return None


def _current_turn(contents: list[Any]) -> int:
    """Where the current turn starts: the last user content with text (not function responses)."""
    for i in range(len(contents) - 1, -1, -1):
        content = contents[i]
        if isinstance(content, dict) and content.get("role", "user") == "user":
            parts = content.get("parts") or []
            if any(isinstance(p, dict) and "text" in p for p in parts):
                return i
    return 0
