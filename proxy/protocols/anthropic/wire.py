"""The Anthropic Messages `Wire` (`POST /v1/messages`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import codec
from ...errors import ProxyError
from ...tail_parse import BodyMemo
from ...types import Json, Message, SentBody, as_list
from ...usage import Usage
from ..base import BaseWire, Compacted, Continue, NativeRequest, Target
from . import detour
from .cache_control import NEAR_LOOKBACK, cache_markers, cap_own_markers, mark_point, mark_summary
from .convert import assistant_to_common, messages_to_common, system_to_common, to_native
from .errors import error_bytes
from .native import VERSION, compacted, compaction_request
from .stream import MessageStream
from .usage import from_anthropic
from .validate import parse_body, validate_envelope


class AnthropicWire(BaseWire):
    name = "anthropic"
    path = "/v1/messages"
    paths: tuple[str, ...] = ("/v1/messages",)
    upstream_path = "/v1/messages"
    count_paths: tuple[str, ...] = ("/v1/messages/count_tokens",)
    upstream_count_path: str | None = "/v1/messages/count_tokens"
    provider = "anthropic"
    client_hint = "Anthropic SDK and Claude Code base URL {url}"
    call_markers: tuple[bytes, ...] = (b"content_block_start",)
    text_markers: tuple[bytes, ...] = (b"text_delta",)
    splices_relayed = True

    def provider_managed(self, body: Json) -> bool:
        """A `compact_*` edit in `context_management.edits` (`compact_20260112`): the server
        compacts. The clearing edits (`clear_tool_uses_*`, `clear_thinking_*`; Claude Code sends
        `clear_thinking_20251015` on every request) only thin what is sent and combine with ctxproxy's."""
        return _compact_edit(body) is not None

    def provider_trigger(self, body: Json) -> int | None:
        """The compact edit's `trigger` (`{"type": "input_tokens", "value": N}`), or the API's
        default of 150,000 input tokens when the edit names none."""
        edit = _compact_edit(body)
        if edit is None:
            return None
        trigger = edit.get("trigger")
        if trigger is None:
            return DEFAULT_COMPACT_TRIGGER
        value = trigger.get("value") if isinstance(trigger, dict) else None
        ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
        return value if ok and trigger.get("type") == "input_tokens" else None

    def parse(self, raw: bytes, memo: BodyMemo | None = None) -> Json:
        return parse_body(raw) if memo is None else memo.parse(raw, "messages", parse_body)

    def envelope(self, body: Json, target: Target | None = None) -> tuple[str, bool]:
        return validate_envelope(body)

    def messages(self, body: Json, memo: BodyMemo | None = None) -> list[Message]:
        """Only the native messages the memo's previous body did not have are validated and
        converted (conversion is per message: the same objects convert the same)."""
        known = memo.derived(self.name) if memo is not None else None
        natives: list[Json] = body["messages"]
        converted = messages_to_common(natives, known)
        if memo is not None:
            memo.keep(self.name, (len(natives), converted))
        return system_to_common(body.get("system")) + converted

    def encode(
        self, body: Json, messages: list[Message] | None, stream: bool, known: SentBody | None
    ) -> tuple[bytes | None, SentBody | None]:
        if messages is None:
            return None, None  # usage is always in Anthropic streams: the client's bytes go as they are
        native = to_native(messages, prefix=0 if body.get("system") is None else 1)
        if cache_markers(body, body["messages"]):  # the client caches: so is the summarized prefix
            native = cap_own_markers(body, mark_summary(native))  # within the 4, the client's kept
        return codec.dumps({**body, "messages": native}), None

    def with_cache_point(
        self, body: Json, messages: list[Message], point: int | None, previous: int | None = None
    ) -> list[Message]:
        if point is None or not cache_markers(body, body["messages"]):
            return messages
        out = [*messages[:point], mark_point(messages[point]), *messages[point + 1 :]]
        if previous is not None and previous < point and _blocks(messages[previous + 1 : point + 1]) > NEAR_LOOKBACK:
            out[previous] = mark_point(messages[previous])  # groups of parallel calls: too far back
        return out

    def room_for_tools(self, body: Json) -> bool:
        return super().room_for_tools(body) and detour.room_for_a_turn(body)

    def tool_definition(self, name: str, description: str, parameters: Json) -> Json:
        return detour.tool_definition(name, description, parameters)

    def detour_turn(self, message: Message, names: frozenset[str]) -> Message:
        turn = detour.detour_turn(message, names)
        return turn if turn is not None else super().detour_turn(message, names)

    def continuation(self, relayed: Sequence[bytes]) -> Continue:
        return detour.continuation(relayed)

    def observer(self, body: Json) -> MessageStream:
        return MessageStream()

    def response(self, parsed: Json) -> tuple[Message | None, str | None, Any]:
        content = parsed.get("content")
        message = assistant_to_common({"role": "assistant", "content": content}) if isinstance(content, list) else None
        return message, parsed.get("stop_reason"), parsed.get("usage")

    def usage(self, raw: Any) -> Usage:
        return from_anthropic(raw)

    def error_body(self, exc: ProxyError) -> bytes:
        return error_bytes(exc)

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def probe(self, key: str | None) -> tuple[str, dict[str, str]]:
        """Anthropic's model list (GET /v1/models), which needs the API version header."""
        return "/v1/models", {"anthropic-version": "2023-06-01", **(self.auth_headers(key) if key else {})}

    def summary_request(self, model: str, messages: list[Message], max_tokens: int) -> tuple[str, Json]:
        system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") in ("system", "developer"))
        rest = [m for m in messages if m.get("role") not in ("system", "developer")]
        body: Json = {"model": model, "max_tokens": max_tokens, "temperature": 0}
        if system:
            body["system"] = system
        body["messages"] = [
            {"role": "user" if m.get("role") != "assistant" else "assistant", "content": str(m.get("content") or "")}
            for m in rest
        ]
        return self.upstream_path, body

    summary_headers = {"anthropic-version": VERSION}

    def native_compaction(self, model: str, messages: list[Message], max_tokens: int) -> NativeRequest | None:
        return compaction_request(model, messages, max_tokens)

    def native_compacted(self, parsed: Json) -> Compacted:
        return compacted(parsed)

    def summary_text(self, parsed: Json) -> tuple[str | None, Any]:
        content = as_list(parsed.get("content"))
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        text = "".join(t for t in texts if isinstance(t, str))
        return (text or None), parsed.get("usage")


WIRE = AnthropicWire()


def _blocks(messages: list[Message]) -> int:
    """Content blocks of `messages` as sent (a string content is one)."""
    return sum(len(m["content"]) if isinstance(m.get("content"), list) else 1 for m in to_native(messages, prefix=0))


DEFAULT_COMPACT_TRIGGER = 150_000
"""input tokens at which `compact_20260112` compacts when its edit names no `trigger` (the API's
default, platform.claude.com/docs/en/build-with-claude/compaction)"""


def _compact_edit(body: Json) -> Json | None:
    """The request's `compact_*` edit in `context_management.edits`, if it has one."""
    config = body.get("context_management")
    edits = config.get("edits") if isinstance(config, dict) else None
    if not isinstance(edits, list):
        return None
    return next((e for e in edits if isinstance(e, dict) and str(e.get("type", "")).startswith("compact_")), None)
