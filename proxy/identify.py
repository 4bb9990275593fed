"""Conversation identity: which stored conversation and branch an incoming request continues.

Chat-completions clients are stateless: every request re-sends the whole history. We find the
conversation by a hash chain over canonicalized messages (as simonw/llm does): message i's hash
covers its canonical form and the hash of message i-1, so the longest incoming prefix whose last
hash is stored is exactly the stored history this request continues. The chain's root covers the
tenant, so identical histories of two tenants never meet.

The leading system/developer messages are *not* in the chain: agents rewrite them every turn
(Claude Code puts the date and git status there) and a chain over them would start a new
conversation on every request. They are stored with each call instead.

Canonicalization exists because clients re-serialize the assistant messages we returned. An
assistant message is hashed the same whether the client sends it back with `content: null`,
`content: ""` or no `content` key; with `refusal: null`, `annotations: []`, `audio: null`,
`function_call: null`, `tool_calls: []` or without them; with `tool_calls[].index` or not; with keys
in any order; with text content as `"hi"` or `[{"type": "text", "text": "hi"}]` (with or without
`cache_control`); and with tool-call arguments spelled `{"a": 1, "b": 2}` or `{"b":2,"a":1}`
(compared as parsed JSON; the raw string when it does not parse). A key whose value is null, "" or
an empty list is treated as absent. `annotations` are always ignored (citation metadata some
clients drop). An answer's parallel tool calls compare in the order of their ids, and the text
beside them without surrounding whitespace.

A wire's private copy of a message's content (a `_`-prefixed key, `proxy.protocols.base`) is part
of the message, except when it holds that content and nothing else: exactly `{"content": [{"type":
"text", "text": T}]}` (empty fields absent) where T is the message's content. The Anthropic wire
stores an answer so (its content blocks as the API returned them, to send them back exactly), and
a client built on the SDK sends that answer back as the string T (`reply.content[0].text`): both
are the message `{"role": "assistant", "content": T}`. Several blocks, a thinking block, a block
with citations or any other field keep the copy, and so match only the same copy.

Two re-renderings are the message they render (`proxy.renderings` states the rules and their
risk): an answer's tool calls rendered as assistant text -- the same answer rendered differently --
and a user message without its transient date reminder part. "The same answer" means the same
tool calls, each with the same id, name and arguments (as parsed JSON), and the same text beside
them; the rendering carries them as `Calling tools:\n` and a Python literal list, the text before
it (smolagents' `ToolCallingAgent`). Example: the stored answer `{"role": "assistant",
"tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments":
"{\"path\": \".\"}"}}]}` and the client's `{"role": "assistant", "content": "Calling tools:\n[{'id':
'call_1', 'type': 'function', 'function': {'name': 'ls', 'arguments': {'path': '.'}}}]"}` hash the
same, so the request continues the branch past that answer; with `'call_2'` or `{'path': '..'}`
it is another answer, and the history forks there. The stored answer stays as the upstream gave
it (history is append-only); the client's rendering is what the chain matches it by and what is
projected upstream (the request's own messages). Anything else that differs -- other text,
another tool id or argument value, an extra non-empty field -- is a different message, and the
history forks there.

Example: [sys, u1, a1, u2] after a stored [u1, a1] matches 2 messages (sys is not chained); u2 is
appended. If the client then sends [sys, u1, a1', u3] with an edited a1', the match stops at u1 and
the store forks a branch after u1.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from . import codec, renderings
from .types import Message

PREFIX_ROLES = frozenset({"system", "developer"})
CACHE_MARKERS = "_cache_markers"
"""Where a wire keeps prompt-cache breakpoints (Anthropic's cache_control): clients move them every
turn, so they are not part of a message's identity."""
_IGNORED_KEYS = frozenset({"annotations", CACHE_MARKERS})
_EMPTY: tuple[Any, ...] = (None, "", [], {})
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_C_ENCODE = (
    # `json.dumps` with `_ENCODER`'s settings builds this encoder on every call; built once, without
    # the circular-reference check (parsed JSON has no cycles), it writes the same text.
    c_make_encoder(None, _ENCODER.default, encode_basestring, None, ":", ",", True, False, True)
    if c_make_encoder is not None
    else None
)


def _dumps(value: Any) -> str:
    """The compact, key-sorted JSON (non-ASCII as is) every hash here covers."""
    if _C_ENCODE is None or isinstance(value, str):
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


def split_prefix(messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """Leading system/developer messages (the pinned prefix) and the chained history after them."""
    cut = 0
    while cut < len(messages) and isinstance(messages[cut], dict) and messages[cut].get("role") in PREFIX_ROLES:
        cut += 1
    return list(messages[:cut]), list(messages[cut:])


def _canonical_content(content: Any) -> Any:
    if isinstance(content, list):
        parts = [_strip(p) if isinstance(p, dict) else p for p in content]
        if len(parts) == 1 and isinstance(parts[0], dict) and parts[0].get("type") == "text":
            return parts[0].get("text", "")
        return parts
    return content


def canonical_arguments(arguments: Any) -> Any:
    """Tool-call arguments as compared: the compact, key-sorted JSON of the parsed string (pi
    re-stringifies `{"command": "ls"}` as `{"command":"ls"}`; models emit both), the string itself
    when it does not parse. Only for matching: the client's spelling is what goes upstream."""
    if not isinstance(arguments, str) or not arguments:
        return arguments or ""
    try:
        value = codec.loads(arguments)
    except codec.JsonRejected:  # not JSON, or hostile JSON (too deep, huge integers)
        return arguments
    return _dumps(value)


def _canonical_tool_call(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    function = call.get("function") or {}
    out: dict[str, Any] = {"id": call.get("id"), "type": call.get("type") or "function"}
    if isinstance(function, dict):
        out["function"] = {"name": function.get("name"), "arguments": canonical_arguments(function.get("arguments"))}
    else:
        out["function"] = function
    return out


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if v not in _EMPTY and k not in _IGNORED_KEYS}


def _lone_text_copy(value: Any, content: Any) -> bool:
    """Whether a private key's value is a copy of the message's content that adds nothing to it:
    `{"content": [{"type": "text", "text": content}]}`, empty fields absent (module docstring)."""
    if not isinstance(value, dict) or set(value) != {"content"} or not isinstance(content, str) or not content:
        return False
    parts = value["content"]
    if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict):
        return False
    return _strip(parts[0]) == {"type": "text", "text": content}


def canonical(message: Message, transient: renderings.Transient = renderings.DEFAULT_TRANSIENT) -> dict[str, Any]:
    """The form that is hashed; see the module docstring for what is treated as equal.
    `transient` is the configured transient-part rule (`Config.transient_parts`)."""
    out = _strip(message)
    for key in [k for k, v in out.items() if k.startswith("_") and _lone_text_copy(v, out.get("content"))]:
        del out[key]
    rendered = renderings.rendered_answer(out)
    if rendered is not None:
        out = {**_strip(rendered), **{k: v for k, v in out.items() if k not in ("content", "role")}}
    if out.get("role") == "user" and isinstance(out.get("content"), list):
        out["content"] = transient.drop(out["content"])
    calls = out.get("tool_calls")
    if "content" in out:
        content = _canonical_content(out["content"])
        if isinstance(content, str) and isinstance(calls, list):
            content = content.strip()
        if content in _EMPTY:
            del out["content"]
        else:
            out["content"] = content
    if isinstance(calls, list):
        out["tool_calls"] = sorted((_canonical_tool_call(c) for c in calls), key=_call_order)
    return out


def _call_order(call: Any) -> str:
    """Parallel calls are compared in the order of their ids (smolagents renders them sorted so)."""
    return str(call.get("id")) if isinstance(call, dict) else ""


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def root_hash(tenant: str) -> str:
    return _digest(b"ctxproxy/chain/v1\x00" + tenant.encode())


def message_hash(parent: str, message: Message, transient: renderings.Transient = renderings.DEFAULT_TRANSIENT) -> str:
    body = _plain(message) or _dumps(canonical(message, transient))
    return _digest(parent.encode() + b"\x00" + body.encode("utf-8", "surrogatepass"))


def _plain(message: Message) -> str | None:
    """`_dumps(canonical(message))` of a message that is only a role and non-empty text (not an
    answer rendered as text: no `Calling tools:` in it), which `canonical` returns as it is: its
    JSON written directly, without the canonical form's copies and checks (most messages of an
    agent's history; a whole history's chain is hashed on every request no cache holds). None:
    another message, for `canonical`."""
    if type(message) is not dict or len(message) != 2:
        return None
    role, content = message.get("role"), message.get("content")
    if type(role) is not str or type(content) is not str or not role or not content:
        return None
    if role == "assistant" and renderings.CALLING_TOOLS in content:
        return None
    return '{"content":' + encode_basestring(content) + ',"role":' + encode_basestring(role) + "}"


def chain(
    tenant: str, history: Sequence[Message], transient: renderings.Transient = renderings.DEFAULT_TRANSIENT
) -> list[str]:
    """hashes[i] identifies history[: i + 1] for this tenant."""
    return chain_from(root_hash(tenant), history, transient)


def chain_from(
    parent: str, history: Sequence[Message], transient: renderings.Transient = renderings.DEFAULT_TRANSIENT
) -> list[str]:
    """The chain continued from `parent` (the hash of everything before `history`)."""
    out: list[str] = []
    for message in history:
        parent = message_hash(parent, message, transient)
        out.append(parent)
    return out


def prefix_hash(prefix: Sequence[Message]) -> str:
    body = _dumps([canonical(m) for m in prefix])
    return _digest(b"ctxproxy/prefix/v1\x00" + body.encode("utf-8", "surrogatepass"))


def blob_hash(data: str) -> str:
    return _digest(b"ctxproxy/blob/v1\x00" + data.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class Session:
    """An agent session named by a request header (Claude Code's `x-claude-code-session-id`).

    Links requests whose history matches nothing stored (the agent's own compaction rebuilt it)
    to the session's conversation. `ref` is the conversation's external id (the header's name
    and value, hashed: the tenant scopes the lookup); `tools` the digest of the request's tool
    definitions, which tells the main loop (the session's tools) from a side call (a title or
    classification request: no tools, or others)."""

    ref: str
    tools: str | None


def session_of(names: Sequence[str], headers: Mapping[str, str], tools: Any) -> Session | None:
    """The first configured session header the request carries (None: no session)."""
    for name in names:
        value = headers.get(name)
        if value:
            digest = _digest(b"ctxproxy/session/v1\x00" + name.lower().encode() + b"\x00" + value.encode())
            return Session("session:" + digest, tools_hash(tools))
    return None


def blob_text(value: Any) -> str:
    """How a blob (tool definitions, a system prefix) is stored: key-sorted JSON."""
    return codec.dumps_sorted(value).decode()


def tools_hash(tools: Any) -> str | None:
    """The digest under which a call's tool definitions are stored (None without tools)."""
    if not tools:
        return None
    return blob_hash(blob_text(tools))


def tenant_of(api_key: str | None, salt: bytes) -> str:
    """A salted fingerprint of the client's key: the tenant. The key itself is never stored."""
    if not api_key:
        return "anonymous"
    return "t_" + hashlib.blake2b(api_key.encode(), key=salt[:64], digest_size=12).hexdigest()
