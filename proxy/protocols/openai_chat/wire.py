"""The chat-completions `Wire`: native messages are the common message model."""

from __future__ import annotations

from typing import Any

from ...errors import ProxyError, openai_error_bytes
from ...tail_parse import BodyMemo
from ...types import Json, Message, SentBody
from ...usage import Usage
from ..base import BaseWire, Target, with_prompt_cache_key
from .encode import encode_body, with_usage_requested
from .stream import StreamFilter, client_wants_usage
from .usage import from_openai_chat
from .validate import parse_body, validate_envelope, validate_messages


def response_message(body: Json) -> tuple[Message | None, str | None]:
    """Choice 0's message and finish reason from a non-streamed completion."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, None
    message = choices[0].get("message")
    return (message if isinstance(message, dict) else None), choices[0].get("finish_reason")


class OpenAIChatWire(BaseWire):
    """The chat-completions API: native messages are the common message model."""

    name = "openai_chat"
    path = "/v1/chat/completions"
    paths: tuple[str, ...] = ("/v1/chat/completions", "/chat/completions")
    upstream_path = "/chat/completions"
    client_hint = "OpenAI SDKs base_url {url}/v1"
    call_markers: tuple[bytes, ...] = (b'"tool_calls"',)
    text_markers: tuple[bytes, ...] = (b'"content"',)

    def parse(self, raw: bytes, memo: BodyMemo | None = None) -> Json:
        return parse_body(raw) if memo is None else memo.parse(raw, "messages", parse_body)

    def envelope(self, body: Json, target: Target | None = None) -> tuple[str, bool]:
        model, _, stream = validate_envelope(body)
        return model, stream

    def messages(self, body: Json, memo: BodyMemo | None = None) -> list[Message]:
        messages: list[Message] = body["messages"]
        return messages

    def validate(self, messages: list[Message], start: int, stop: int | None = None) -> None:
        validate_messages(messages, start, stop)

    def with_cache_key(self, body: Json, raw: bytes, key: str) -> tuple[Json, bytes]:
        return with_prompt_cache_key(body, raw, key)

    def encode(
        self, body: Json, messages: list[Message] | None, stream: bool, known: SentBody | None
    ) -> tuple[bytes | None, SentBody | None]:
        """The upstream body, or None when the client's bytes can go as they are."""
        if messages is None and (not stream or client_wants_usage(body)):
            return None, None  # nothing to add: the client's bytes go as they are
        outgoing = with_usage_requested(body) if stream else body
        return encode_body(outgoing, messages if messages is not None else body["messages"], known)

    def observer(self, body: Json) -> StreamFilter:
        return StreamFilter(client_wants_usage(body))

    def response(self, parsed: Json) -> tuple[Message | None, str | None, Any]:
        message, finish = response_message(parsed)
        return message, finish, parsed.get("usage")

    def usage(self, raw: Any) -> Usage:
        return from_openai_chat(raw)

    def error_body(self, exc: ProxyError) -> bytes:
        return openai_error_bytes(exc)

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def chat_request(self, body: Json, stream: bool) -> Json | None:
        """Already one: the body the pipeline encoded (its stream flag and usage request)."""
        return body

    def summary_request(self, model: str, messages: list[Message], max_tokens: int) -> tuple[str, Json]:
        return self.upstream_path, {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}

    def summary_text(self, parsed: Json) -> tuple[str | None, Any]:
        message, _, usage = self.response(parsed)
        content = message.get("content") if message else None
        return (content if isinstance(content, str) else None), usage


WIRE = OpenAIChatWire()
