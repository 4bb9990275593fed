"""The OpenAI Responses `Wire` (`POST /v1/responses`).

Requests with `previous_response_id` or `conversation` (the upstream owns that state), or with
input items the policies cannot pair safely, are not rewritable: they are forwarded as they are
and still recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import codec
from ...errors import ProxyError, openai_error_bytes
from ...sse import SseEvent
from ...tail_parse import BodyMemo
from ...types import Json, Message, SentBody
from ...usage import Usage
from ..base import BaseWire, Compacted, Continue, NativeRequest, Target, with_prompt_cache_key
from ..openai_chat.validate import parse_body
from . import detour
from .convert import ExactItems, message_to_items, request_messages, text_of
from .items import PRIVATE, is_mappable
from .native import compacted, compaction_request
from .output import finish_of, output_message, output_text
from .stream import ResponsesObserver
from .usage import from_openai_responses
from .validate import validate_envelope


class ResponsesWire(BaseWire):
    name = "openai_responses"
    path = "/v1/responses"
    paths: tuple[str, ...] = ("/v1/responses", "/responses")
    upstream_path = "/responses"
    count_paths: tuple[str, ...] = ("/v1/responses/input_tokens", "/responses/input_tokens")
    upstream_count_path: str | None = "/responses/input_tokens"
    call_markers: tuple[bytes, ...] = (b"output_item.added",)
    text_markers: tuple[bytes, ...] = (b"text.delta",)
    splices_relayed = True

    def count_answer(self, tokens: int) -> Json:
        return {"object": "response.input_tokens", "input_tokens": tokens}

    def parse(self, raw: bytes, memo: BodyMemo | None = None) -> Json:
        return parse_body(raw) if memo is None else memo.parse(raw, "input", parse_body)

    def envelope(self, body: Json, target: Target | None = None) -> tuple[str, bool]:
        return validate_envelope(body)

    def messages(self, body: Json, memo: BodyMemo | None = None) -> list[Message]:
        return request_messages(body)

    def provider_managed(self, body: Json) -> bool:
        """`context_management: [{"type": "compaction", "compact_threshold": N}]`: the server
        compacts past N."""
        entries = body.get("context_management")
        return isinstance(entries, list) and any(isinstance(e, dict) and e.get("type") == "compaction" for e in entries)

    def provider_trigger(self, body: Json) -> int | None:
        """The compaction entry's `compact_threshold`; None without one (the API documents no
        default)."""
        entries = body.get("context_management")
        if not isinstance(entries, list):
            return None
        for entry in entries:
            if isinstance(entry, dict) and entry.get("type") == "compaction":
                value = entry.get("compact_threshold")
                return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        return None

    def rewrite_allowed(self, body: Json) -> bool:
        """False when the upstream owns the state or the input holds items the policies cannot
        treat safely: such requests are forwarded untouched (and still recorded)."""
        if body.get("previous_response_id") is not None or body.get("conversation") is not None:
            return False
        data = body.get("input")
        if isinstance(data, str):
            return True
        if not isinstance(data, list) or not data:
            return False
        return all(isinstance(i, dict) and is_mappable(i) for i in data)

    def with_cache_key(self, body: Json, raw: bytes, key: str) -> tuple[Json, bytes]:
        return with_prompt_cache_key(body, raw, key)

    def encode(
        self, body: Json, messages: list[Message] | None, stream: bool, known: SentBody | None
    ) -> tuple[bytes | None, SentBody | None]:
        if messages is None:
            return None, None  # usage arrives with response.completed: nothing to ask for
        exact = ExactItems(body)
        items: list[Json] = []
        for message in messages:
            private = message.get(PRIVATE)
            if isinstance(private, dict) and private.get("instructions"):
                continue  # `instructions` stay in the body as the client sent them
            items.extend(message_to_items(message, exact))
        data: Any = items
        if isinstance(body.get("input"), str) and items == [{"role": "user", "content": body["input"]}]:
            data = body["input"]
        out = {key: (data if key == "input" else value) for key, value in body.items()}
        out.setdefault("input", data)
        return codec.dumps(out), None

    def tool_definition(self, name: str, description: str, parameters: Json) -> Json:
        return detour.tool_definition(name, description, parameters)

    def detour_turn(self, message: Message, names: frozenset[str]) -> Message:
        turn = detour.detour_turn(message, names)
        return turn if turn is not None else super().detour_turn(message, names)

    def continuation(self, relayed: Sequence[bytes]) -> Continue:
        return detour.continuation(relayed)

    def observer(self, body: Json) -> ResponsesObserver:
        return ResponsesObserver()

    fails_in_stream = True

    def opening_failure(self, event: SseEvent) -> bytes | bool | None:
        """A stream may open (`response.created`, `in_progress`, `queued`) and then fail
        (`response.failed`, `error`) before any output: an overflow is reported so, in a 200."""
        kind = event.event
        if kind is None and event.data is not None:
            try:
                data = codec.loads(event.data)
            except codec.JsonRejected:
                data = None
            kind = str(data.get("type")) if isinstance(data, dict) else None
        if kind in OPENING:
            return None
        if kind in ("response.failed", "error") and event.data is not None:
            return event.data.encode("utf-8", errors="replace")
        return False

    def response(self, parsed: Json) -> tuple[Message | None, str | None, Any]:
        message = output_message(parsed.get("output")) if parsed.get("status") != "failed" else None
        return message, finish_of(parsed), parsed.get("usage")

    def usage(self, raw: Any) -> Usage:
        return from_openai_responses(raw)

    def error_body(self, exc: ProxyError) -> bytes:
        return openai_error_bytes(exc)

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def summary_request(self, model: str, messages: list[Message], max_tokens: int) -> tuple[str, Json]:
        system = [text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer")]
        rest = [m for m in messages if m.get("role") not in ("system", "developer")]
        data: Any
        if len(rest) == 1 and rest[0].get("role") == "user":
            data = text_of(rest[0].get("content"))
        else:
            data = [{"role": m.get("role"), "content": text_of(m.get("content"))} for m in rest]
        body: Json = {
            "model": model,
            "instructions": "\n\n".join(system),
            "input": data,
            "max_output_tokens": max_tokens,
        }
        return self.upstream_path, body

    def summary_text(self, parsed: Json) -> tuple[str | None, Any]:
        return output_text(parsed), parsed.get("usage")

    def native_compaction(self, model: str, messages: list[Message], max_tokens: int) -> NativeRequest | None:
        return compaction_request(model, messages)

    def native_compacted(self, parsed: Json) -> Compacted:
        return compacted(parsed)


OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})

WIRE = ResponsesWire()
