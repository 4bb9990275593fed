"""Anthropic Messages <-> the common model, losslessly: native messages to common ones and back.

Native -> common (what is hashed, stored and projected):

* top-level `system` (a string or text blocks) -> one leading `{"role": "system"}` message with
  the same content (the upstream body keeps `system` as the client sent it: the prefix is pinned).
* an assistant message with a string content -> the same message. With blocks: `content` is the
  text blocks' text joined by newlines (None without text), every `tool_use` block becomes a
  `tool_calls` entry (id, name, arguments = compact JSON of `input`), and the native blocks travel
  as received in `_anthropic.content` -- thinking / redacted_thinking with signatures, citations,
  cache_control, server tool blocks -- so the turn goes back upstream exactly.
* a user message with blocks is split into pieces: one `{"role": "tool"}` message per
  `tool_result` block (tool_call_id = tool_use_id; content = the block's content, a string or
  its blocks; `_anthropic.block` = the block with `content` replaced by null, which keeps its
  key order, `is_error` and `cache_control`), then one user message with the remaining blocks
  as its content (omitted when there are none). Each piece carries `_anthropic.piece`/`of`
  (which piece of how many) and `at` (the block positions in the native content). A user
  message without tool results needs no placing and carries no `_anthropic` key, so
  `[{"type": "text", "text": P, "cache_control": ...}]` and the string `P` are the same message to
  identity (Claude Code sends its newest prompt as the first and re-sends it as the second).
  A user message with a string content stays as it is.
* an assistant message holding a `compaction` block (the API's own compaction, sent back
  verbatim) is marked `PROVIDER_STATE`: pinned, never released, so no policy trims, summarizes
  or prunes it.
* a mid-conversation `{"role": "system"}` message (the API's, after a user turn) -> the same
  common system message at its place in the history (markers taken off like a user message's):
  part of the chain, not of the pinned prefix, and pinned by the policies' default `pins.roles`.
* cache_control markers are taken off the blocks and kept in the message's `_cache_markers` key,
  which identity ignores (`cache_control.py`).

Common -> native (the upstream body after a projection rewrote something):

* pieces of one native message that are all present and in order rebuild it exactly (blocks
  back at their positions); a trimmed tool result becomes its tool_result block with the new
  text, keeping every other field; a piece without `_anthropic` (the `<conversation_summary>`
  block, a synthetic `[no result recorded]` result) becomes a plain text / tool_result block;
* consecutive messages of one role merge into one native message (tool results first, as the
  API requires, because the common model puts them right after their assistant turn);
* an assistant turn whose `_anthropic` blocks agree with its common fields goes back as those
  blocks, thinking included; if a policy ever changed its text or calls, the thinking blocks are
  kept and the rest is rebuilt;
* cache_control markers are put back on the blocks that are sent (`cache_control.py`; the wire
  caps them at 4);
* a system message after the prefix goes back as a native `{"role": "system"}` message, never
  merged with a neighbour;
* if the projection starts with an assistant turn or a system message (history pruned without a
  summary), a short user text block saying so is put first: the API requires a user message first.

Identity: the Anthropic SDK re-sends the content blocks of a response as it received them
(`model_dump(exclude_unset=True)`: exactly the fields the JSON had), and the stream reassembly
(`stream.py`) reproduces the SDK's `get_final_message()`. So the stored response and the re-sent
turn convert to equal common messages. An app that sends an answer of one text block back as the
string of its text (`reply.content[0].text`) continues too: identity takes a copy of the content
that holds one text block and nothing else as that string (`proxy.identify`). A client that
re-serializes blocks with extra null fields (a plain `model_dump()`) forks the conversation at
that turn, unless the answer is one text block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from policies.pins import PROVIDER_STATE

from ...types import Json, Message
from .cache_control import MARKERS, message_markers, pop_marker, pop_markers, restore_markers
from .validate import validate_native

PRIVATE = "_anthropic"
OMITTED_TEXT = "[Earlier turns of this conversation were omitted by the proxy to fit the context window.]"
_THINKING = frozenset({"thinking", "redacted_thinking"})


def _arguments(value: Any) -> str:
    return json.dumps(value if value is not None else {}, ensure_ascii=False, separators=(",", ":"))


def _assistant_fields(blocks: list[Any]) -> tuple[str | None, list[dict[str, Any]] | None]:
    texts = [
        b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    calls = [
        {
            "id": b.get("id"),
            "type": "function",
            "function": {"name": b.get("name"), "arguments": _arguments(b.get("input"))},
        }
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    return ("\n".join(texts) if texts else None), (calls or None)


def _extra(message: Json) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in ("role", "content")}


def assistant_to_common(native: Json) -> Message:
    content = native.get("content")
    extra = _extra(native)
    if not isinstance(content, list):
        out: Message = {"role": "assistant", "content": content}
        if extra:
            out[PRIVATE] = {"extra": extra}
        return out
    text, calls = _assistant_fields(content)
    out = {"role": "assistant", "content": text}
    if calls:
        out["tool_calls"] = calls
    markers: list[dict[str, Any]] = []
    private: dict[str, Any] = {"content": pop_markers(content, [], markers)}
    if extra:
        private["extra"] = extra
    out[PRIVATE] = private
    if markers:
        out[MARKERS] = markers
    if any(isinstance(block, dict) and block.get("type") == "compaction" for block in content):
        out[PROVIDER_STATE] = True  # the API's own compaction: the policies never touch it
    return out


def user_to_common(native: Json) -> list[Message]:
    content = native.get("content")
    extra = _extra(native)
    if not isinstance(content, list):
        out: Message = {"role": "user", "content": content}
        if extra:
            out[PRIVATE] = {"extra": extra}
        return [out]
    results = [(j, b) for j, b in enumerate(content) if b.get("type") == "tool_result"]
    rest = [(j, b) for j, b in enumerate(content) if b.get("type") != "tool_result"]
    n = len(results) + (1 if rest or not results else 0)
    pieces: list[Message] = []
    for piece, (j, block) in enumerate(results):
        markers: list[dict[str, Any]] = []
        block = pop_marker(block, [], markers)
        stub = {k: (None if k == "content" else v) for k, v in block.items()}
        private: dict[str, Any] = {"piece": piece, "of": n, "at": [j], "block": stub}
        if extra and piece == 0:
            private["extra"] = extra
        message: Message = {
            "role": "tool",
            "tool_call_id": block["tool_use_id"],
            "content": block.get("content"),
            PRIVATE: private,
        }
        if markers:
            message[MARKERS] = markers
        pieces.append(message)
    if rest or not results:
        markers = []
        message = {"role": "user", "content": pop_markers([b for _, b in rest], [], markers)}
        if results or extra:
            private = {"piece": len(results), "of": n, "at": [j for j, _ in rest]}
            if extra and not results:
                private["extra"] = extra
            message[PRIVATE] = private
        # else: the whole native message, nothing to place: no private key, so the blocks hash as
        # the same content sent as a string would (a lone text block IS that string)
        if markers:
            message[MARKERS] = markers
        pieces.append(message)
    return pieces


def system_to_common(system: Any) -> list[Message]:
    if system is None:
        return []
    return [{"role": "system", "content": system}]


def mid_system_to_common(native: Json) -> Message:
    """A mid-conversation system message: its content as sent, cache markers kept aside."""
    content = native.get("content")
    out: Message = {"role": "system", "content": content}
    if isinstance(content, list):
        markers: list[dict[str, Any]] = []
        out["content"] = pop_markers(content, [], markers)
        if markers:
            out[MARKERS] = markers
    return out


def to_common(body: Json) -> list[Message]:
    """The request's messages in the common model (validating the native ones)."""
    return system_to_common(body.get("system")) + messages_to_common(body["messages"])


def messages_to_common(natives: list[Json], known: tuple[int, list[Message]] | None = None) -> list[Message]:
    """The native messages validated and in the common model; `known`: (n, what this returned
    for `natives[:n]`, the very same objects) is reused as it is."""
    count, out = (known[0], list(known[1])) if known is not None else (0, [])
    for i in range(count, len(natives)):
        native = natives[i]
        validate_native(i, native)
        if native["role"] == "assistant":
            out.append(assistant_to_common(native))
        elif native["role"] == "system":
            out.append(mid_system_to_common(native))
        else:
            out.extend(user_to_common(native))
    return out


@dataclass
class _Fragment:
    role: str  # native role: user | assistant
    content: Any  # a string (only for a lone fragment without pieces) or a list of blocks
    positions: list[int] | None = None
    piece: int | None = None
    of: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _text_blocks(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [_native_part(p) for p in content]
    return [{"type": "text", "text": str(content)}]


def _native_part(part: Any) -> Any:
    """OpenAI content parts a policy might produce, as Anthropic blocks (native ones unchanged)."""
    if isinstance(part, dict) and part.get("type") == "input_text" and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    return part


def _assistant_fragment(message: Message) -> _Fragment:
    private: Any = message.get(PRIVATE)
    if not isinstance(private, dict):
        private = {}
    extra = private.get("extra") or {}
    native = private.get("content")
    calls = message.get("tool_calls") or None
    if isinstance(native, list):
        text, derived_calls = _assistant_fields(native)
        if text == message.get("content") and derived_calls == calls:
            return _Fragment("assistant", restore_markers(native, message_markers(message), []), extra=extra)
        blocks = [b for b in native if isinstance(b, dict) and str(b.get("type")) in _THINKING]
    else:
        if calls is None and isinstance(message.get("content"), str):
            return _Fragment("assistant", message["content"], extra=extra)
        blocks = []
    blocks.extend(_text_blocks(message.get("content")))
    for call in calls or ():
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, json.JSONDecodeError):
            arguments = {}
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": arguments})
    return _Fragment("assistant", blocks, extra=extra)


def _fragment(message: Message) -> _Fragment:
    role = message.get("role")
    if role == "assistant":
        return _assistant_fragment(message)
    private: Any = message.get(PRIVATE)
    if not isinstance(private, dict):
        private = {}
    extra = private.get("extra") or {}
    piece, of, at = private.get("piece"), private.get("of"), private.get("at")
    content = message.get("content")
    if role == "tool":
        stub = private.get("block")
        if isinstance(stub, dict):
            block = {k: (content if k == "content" else v) for k, v in stub.items()}
            if "content" not in stub and content not in (None, ""):
                block["content"] = content
            block = restore_markers(block, message_markers(message), [])
        else:
            block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": content}
            block = restore_markers(block, message_markers(message), [])
        return _Fragment("user", [block], at, piece, of, extra)
    if piece is None:
        if role == "user":
            if isinstance(content, str):
                return _Fragment("user", content, extra=extra)
            return _Fragment("user", restore_markers(_text_blocks(content), message_markers(message), []), extra=extra)
        # a system/developer message after the prefix (a mid-conversation system message)
        if isinstance(content, str):
            return _Fragment("system", content)
        return _Fragment("system", restore_markers(_text_blocks(content), message_markers(message), []))
    return _Fragment("user", restore_markers(_text_blocks(content), message_markers(message), []), at, piece, of, extra)


def _segments(run: list[_Fragment]) -> list[list[_Fragment]]:
    """Fragments grouped by the native message they came from (consecutive pieces)."""
    out: list[list[_Fragment]] = []
    for frag in run:
        last = out[-1][-1] if out else None
        if (
            frag.piece is not None
            and frag.piece > 0
            and last is not None
            and last.piece is not None
            and last.of == frag.of
            and frag.piece > last.piece
        ):
            out[-1].append(frag)
        else:
            out.append([frag])
    return out


def _segment_blocks(segment: list[_Fragment]) -> list[Any]:
    if len(segment) == 1 and isinstance(segment[0].content, str):
        return _text_blocks(segment[0].content)
    placed: list[tuple[int, int, Any]] = []
    for order, frag in enumerate(segment):
        blocks = frag.content if isinstance(frag.content, list) else _text_blocks(frag.content)
        positions = frag.positions if frag.positions is not None and len(frag.positions) == len(blocks) else None
        for k, block in enumerate(blocks):
            placed.append((positions[k] if positions is not None else order, k, block))
    if all(frag.positions is not None for frag in segment):
        placed.sort(key=lambda entry: (entry[0], entry[1]))
    return [block for _, _, block in placed]


def _native_run(run: list[_Fragment]) -> Json:
    role = run[0].role
    segments = _segments(run)
    if len(segments) == 1:
        segment = segments[0]
        extra = segment[0].extra
        if len(segment) == 1 and isinstance(segment[0].content, str):
            return {"role": role, "content": segment[0].content, **extra}
        return {"role": role, "content": _segment_blocks(segment), **extra}
    content: list[Any] = []
    for segment in segments:
        content.extend(_segment_blocks(segment))
    if role == "user":  # tool results first, as the API requires; otherwise order kept
        content = [b for b in content if _is_result(b)] + [b for b in content if not _is_result(b)]
    return {"role": role, "content": content}


def _is_result(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


def to_native(messages: list[Message], prefix: int | None = None) -> list[Json]:
    """The native messages for common `messages` without the first `prefix` ones (the top-level
    `system`; None: every leading system message). A later system message stays one."""
    start = 0
    if prefix is None:
        while start < len(messages) and messages[start].get("role") in ("system", "developer"):
            start += 1
    else:
        start = prefix
    out: list[Json] = []
    run: list[_Fragment] = []
    for message in messages[start:]:
        frag = _fragment(message)
        if run and (run[-1].role != frag.role or frag.role == "system"):
            out.append(_native_run(run))
            run = []
        run.append(frag)
    if run:
        out.append(_native_run(run))
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": OMITTED_TEXT})
    return out
