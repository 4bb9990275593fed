"""Token counting with tiktoken, offline: what a message costs in a chat request.

Problem: budgets are in tokens of the rendered request, and a 2,000-event history must not be
re-encoded on every call. tiktoken also downloads its BPE files on first use, which fails in
sandboxes without network.

Invariants:
- Works offline: litellm ships the o200k/cl100k/p50k files under
  `litellm/litellm_core_utils/tokenizers`, named by tiktoken's cache key. If
  `TIKTOKEN_CACHE_DIR` is unset we point it there (found with `importlib.util.find_spec`, without
  importing litellm, which costs seconds). This is done lazily, never at import time. This is the
  only module of `policies/` that touches the environment or tiktoken.
- Counts follow OpenAI's chat framing: 3 tokens per message, plus role, content (text parts),
  `name` (+1), tool calls (name + arguments + 3) and `tool_call_id`; an image part is a fixed
  estimate (`IMAGE_TOKENS`, `IMAGE_TOKENS_LOW` at low detail). The request's reply priming (3)
  belongs in `Budget.fixed_tokens`, with `count_tools`: tool definitions by their API's
  published rendering (OpenAI's TypeScript namespaces, `policies.tool_render`; Anthropic's JSON
  plus its tool-use system prompt).
- Pure counting only: caching counts between requests (an LRU with a lock) is the caller's
  business; the proxy's `proxy.token_counter.TokenCounter` keys them by event hash, so a request
  costs encoding work proportional to what is new.

Example::

    enc = encoding_for_model("gpt-4o")
    count_message({"role": "user", "content": "hi"}, enc)   # 5: 3 framing + role + content
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import tiktoken

from policies.base import Message
from policies.text import call_arguments, call_name, tool_calls
from policies.tool_render import function_of, render_functions

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_TOOL_CALL = 3
IMAGE_TOKENS = 765  # a 1024x1024 image at high detail (OpenAI: 85 + 170 per 512px tile)
IMAGE_TOKENS_LOW = 85  # OpenAI's fixed cost of an image at `detail: "low"`

_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "o1", "o3", "o4")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding")


def encoding_name_for_model(model: str) -> str:
    """o200k_base for the gpt-4o/4.1/5 and o-series families, cl100k_base for gpt-4/3.5 and
    the older OpenAI models, o200k_base for anything unknown (closest modern default)."""
    name = model.rsplit("/", 1)[-1].lower()
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"


def _litellm_tokenizers_dir() -> str | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "litellm_core_utils", "tokenizers")
    return path if os.path.isdir(path) else None


def ensure_offline_cache() -> None:
    """Point tiktoken at litellm's bundled BPE files unless the operator chose a cache dir."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    path = _litellm_tokenizers_dir()
    if path is not None:
        os.environ["TIKTOKEN_CACHE_DIR"] = path


def encoding_for_model(model: str) -> tiktoken.Encoding:
    """The tiktoken encoding for `model`, loaded without network access."""
    ensure_offline_cache()
    return tiktoken.get_encoding(encoding_name_for_model(model))


def _encode_len(enc: tiktoken.Encoding, text: str) -> int:
    # encode_ordinary: special-token text inside user data ("<|endoftext|>") is plain text here.
    return len(enc.encode_ordinary(text)) if text else 0


def count_text(text: str, enc: tiktoken.Encoding) -> int:
    """Tokens of plain text (no message framing)."""
    return _encode_len(enc, text)


def _content_tokens(content: Any, enc: tiktoken.Encoding) -> int:
    if isinstance(content, str):
        return _encode_len(enc, content)
    if not isinstance(content, list):
        return 0
    total = 0
    for part in content:
        if not isinstance(part, Mapping):
            continue
        if isinstance(part.get("text"), str):
            total += _encode_len(enc, part["text"])
        elif part.get("type") in ("image_url", "image", "input_image"):
            total += _image_tokens(part)
        else:
            total += _encode_len(enc, json.dumps(part, sort_keys=True, ensure_ascii=False))
    return total


def _image_tokens(part: Mapping[str, Any]) -> int:
    """An image part: `detail: "low"` (chat `image_url.detail`, Responses `detail`) is OpenAI's
    fixed 85; otherwise the dimensions are unknown here, so a 1024x1024 high-detail image."""
    image_url = part.get("image_url")
    detail = image_url.get("detail") if isinstance(image_url, Mapping) else part.get("detail")
    return IMAGE_TOKENS_LOW if detail == "low" else IMAGE_TOKENS


def count_message(message: Message, enc: tiktoken.Encoding) -> int:
    """Tokens `message` adds to a chat request, with OpenAI's per-message framing."""
    total = TOKENS_PER_MESSAGE + _encode_len(enc, str(message.get("role", "")))
    total += _content_tokens(message.get("content"), enc)
    refusal = message.get("refusal")
    if isinstance(refusal, str):
        total += _encode_len(enc, refusal)
    name = message.get("name")
    if isinstance(name, str) and name:
        total += _encode_len(enc, name) + TOKENS_PER_NAME
    for call in tool_calls(message):
        total += TOKENS_PER_TOOL_CALL
        total += _encode_len(enc, call_name(call)) + _encode_len(enc, call_arguments(call))
    tool_call_id = message.get("tool_call_id")
    if isinstance(tool_call_id, str):
        total += _encode_len(enc, tool_call_id)
    return total


TOOLS_FRAMING = 4
"""The developer message OpenAI renders the tools section into: `<|start|>developer<|message|>`
... `<|end|>`."""
ANTHROPIC_TOOL_PROMPT = {"auto": 346, "none": 346, "any": 313, "tool": 313}
"""The tool-use system prompt Anthropic adds to a request with tools (its published table for the
Claude 4 family), by `tool_choice` type."""
_ANTHROPIC_SERVER_TOOL = re.compile(r"_\d{8}$")  # bash_20250124, web_search_20250305, ...


def _is_anthropic(tool: Mapping[str, Any]) -> bool:
    kind = tool.get("type")
    return "input_schema" in tool or (isinstance(kind, str) and _ANTHROPIC_SERVER_TOOL.search(kind) is not None)


def _json_tokens(tool: Mapping[str, Any], enc: tiktoken.Encoding) -> int:
    visible = {k: v for k, v in tool.items() if k != "cache_control"}  # a marker is not model input
    return _encode_len(enc, json.dumps(visible, sort_keys=True, ensure_ascii=False, default=str))


def count_tools(tools: Sequence[Mapping[str, Any]] | None, enc: tiktoken.Encoding, tool_choice: Any = None) -> int:
    """What tool definitions add to a request, by each API's published rendering.

    - OpenAI (chat `{"type": "function", "function": {...}}`, Responses flat function tools and
      `namespace` tools with their nested tools, as Codex sends them): the TypeScript
      namespaces OpenAI's harmony renderer writes (`policies.tool_render`), in their developer
      message (`TOOLS_FRAMING`).
    - Anthropic (`input_schema` tools, server tools such as `bash_20250124`): each tool's JSON
      (what the model reads; `cache_control` is not part of it) plus the tool-use system prompt
      for `tool_choice` (`ANTHROPIC_TOOL_PROMPT`).
    - Every other shape (custom free-form tools with their grammar `format`, web search, MCP
      server lists): its JSON."""
    if not tools:
        return 0
    valid = [tool for tool in tools if isinstance(tool, Mapping)]
    rendered = render_functions(valid)
    total = _encode_len(enc, rendered) + TOOLS_FRAMING if rendered else 0
    others = [t for t in valid if function_of(t) is None and not (t.get("type") == "namespace" and "name" in t)]
    total += sum(_json_tokens(tool, enc) for tool in others)
    if any(_is_anthropic(tool) for tool in valid):
        kind = tool_choice.get("type") if isinstance(tool_choice, Mapping) else "auto"
        total += ANTHROPIC_TOOL_PROMPT.get(str(kind), ANTHROPIC_TOOL_PROMPT["auto"])
    return total


__all__ = [
    "ANTHROPIC_TOOL_PROMPT",
    "IMAGE_TOKENS",
    "IMAGE_TOKENS_LOW",
    "TOOLS_FRAMING",
    "count_message",
    "count_text",
    "count_tools",
    "encoding_for_model",
    "encoding_name_for_model",
    "ensure_offline_cache",
]
