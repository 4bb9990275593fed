"""What tool definitions cost as input, billed the way the providers publish it, for the scripted
upstreams.

- OpenAI (chat and Responses): function tools and Responses `namespace` tools are rendered by
  OpenAI's own harmony renderer (the `openai-harmony` package, the format OpenAI published with
  its open-weight models): a developer message holding a TypeScript namespace per tool namespace,
  counted with its framing tokens. Any other tool (custom, web search, MCP) costs its JSON.
- Anthropic: each tool costs its JSON (name, description, input_schema), plus the tool-use
  system prompt Anthropic documents for the Claude 4 family when tools are present: 346 tokens
  with `tool_choice` auto/none, 313 with any/tool.

This is independent of the proxy's estimate (`policies.tool_render`, `policies.tokens`): a
different implementation of the same published rules, so the agent tests can hold the estimate
to 3% of what these servers bill.

harmony loads its BPE file from `TIKTOKEN_ENCODINGS_BASE`; there is no network here, so the
o200k file litellm ships is copied once into a private directory named the way harmony expects.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

ANTHROPIC_TOOL_PROMPT = {"auto": 346, "none": 346, "any": 313, "tool": 313}
_O200K_CACHE_KEY = "fb374d419588a4632f3f557e76b4b70aebbca790"  # sha1 of tiktoken's o200k_base URL
_lock = threading.Lock()
_harmony: Any = None


def _harmony_encoding() -> Any:
    global _harmony
    with _lock:
        if _harmony is None:
            if "TIKTOKEN_ENCODINGS_BASE" not in os.environ:
                spec = importlib.util.find_spec("litellm")
                assert spec is not None and spec.submodule_search_locations, "litellm is not installed"
                source = os.path.join(
                    list(spec.submodule_search_locations)[0], "litellm_core_utils", "tokenizers", _O200K_CACHE_KEY
                )
                target = tempfile.mkdtemp(prefix="harmony-encodings-")
                shutil.copyfile(source, os.path.join(target, "o200k_base.tiktoken"))
                os.environ["TIKTOKEN_ENCODINGS_BASE"] = target
            from openai_harmony import HarmonyEncodingName, load_harmony_encoding

            _harmony = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
        return _harmony


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if tool.get("type", "function") != "function":
        return None
    function = tool.get("function", tool)
    return function if isinstance(function, Mapping) and isinstance(function.get("name"), str) else None


def _description(function: Mapping[str, Any]) -> Any:
    from openai_harmony import ToolDescription

    return ToolDescription.new(function["name"], function.get("description") or "", function.get("parameters"))


def harmony_tools_text(tools: list[Any]) -> tuple[str, int]:
    """The developer message harmony renders for the function and namespace tools in `tools`
    (its text and its tokens, framing included); ("", 0) when there are none."""
    from openai_harmony import DeveloperContent, Message, Role, ToolNamespaceConfig

    content = DeveloperContent.new()
    functions = []
    any_tools = False
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        function = _function(tool)
        if function is not None:
            functions.append(_description(function))
            any_tools = True
        elif tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            nested = [f for f in (_function(t) for t in tool.get("tools") or [] if isinstance(t, Mapping)) if f]
            config = ToolNamespaceConfig(
                name=tool["name"], description=tool.get("description"), tools=[_description(f) for f in nested]
            )
            content = content.with_tools(config)
            any_tools = True
    if functions:
        content = content.with_function_tools(functions)
    if not any_tools:
        return "", 0
    encoding = _harmony_encoding()
    tokens = encoding.render(Message.from_role_and_content(Role.DEVELOPER, content))
    return encoding.decode_utf8(tokens), len(tokens)


def openai_tools_tokens(tools: Any, count_text: Any, *, recount: bool = False) -> int:
    """Input tokens of an OpenAI request's `tools`: harmony's rendering of the function and
    namespace tools, the JSON of every other tool (`count_text` counts a string). `recount`:
    count the rendered text with `count_text` too (another encoding than harmony's o200k)."""
    if not isinstance(tools, list) or not tools:
        return 0
    text, rendered = harmony_tools_text(tools)
    if recount:
        rendered = count_text(text) if text else 0
    others = [t for t in tools if not (isinstance(t, Mapping) and (_function(t) or t.get("type") == "namespace"))]
    return rendered + sum(count_text(json.dumps(t, sort_keys=True, ensure_ascii=False)) for t in others)


def anthropic_tool_prompt(body: Mapping[str, Any]) -> int:
    """The tool-use system prompt's tokens for an Anthropic request with tools (0 without)."""
    if not body.get("tools"):
        return 0
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, Mapping) else "auto"
    return ANTHROPIC_TOOL_PROMPT.get(str(kind), ANTHROPIC_TOOL_PROMPT["auto"])
