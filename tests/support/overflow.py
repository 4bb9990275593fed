"""What each provider answers when a request does not fit its model's window: the rule it checks
and its exact 400 body, for the scripted upstreams.

Every answer is HTTP 400. The rule differs by provider, and so does the wording a client (or the
proxy) has to recognize:

- OpenAI chat: input + max_tokens > window. "This model's maximum context length is W tokens.
  However, you requested N tokens (I in the messages, M in the completion). Please reduce the
  length of the messages or completion." (without max_tokens: "However, your messages resulted
  in I tokens. Please reduce the length of the messages."), code "context_length_exceeded".
- OpenAI Responses: input + max_output_tokens > window. "Your input exceeds the context window of
  this model. Please adjust your input and try again." (param "input", code
  "context_length_exceeded"; no numbers).
- Anthropic: input > window: "prompt is too long: I tokens > W maximum"; else input + max_tokens
  > window: "input length and `max_tokens` exceed context limit: I + M > W, decrease input length
  or `max_tokens` and try again".
- vLLM: input >= window: "This model's maximum context length is W tokens. However, your request
  has I input tokens. Please reduce the length of the input messages."; else (max_tokens asked)
  input + max_tokens > window: "'max_tokens' or 'max_completion_tokens' is too large: M. This
  model's maximum context length is W tokens and your request has I input tokens (M > W - I)."
- OpenRouter: input + max_tokens > window. "This endpoint's maximum context length is W tokens.
  However, you requested about N tokens (T of text input, U of tool input, M in the output).
  Please reduce the length of either one, or use the "middle-out" transform to compress your
  prompt automatically."
- llama.cpp server: input >= n_ctx (max_tokens is not checked: generation stops at the window).
  "request (I tokens) exceeds the available context size (W tokens), try increasing it", type
  "exceed_context_size_error", with n_prompt_tokens and n_ctx.
- litellm proxy over an OpenAI-compatible upstream: that upstream's rule, its message wrapped:
  "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError:
  OpenAIException - <message>. Received Model Group=<model>\nAvailable Model Group
  Fallbacks=None", type and param null, code "400".

Sources (stored public copies, read 2026-12):
- OpenAI Responses: bodies quoted in dyad-sh/dyad#1672 and the-open-agent/openagent#2344
  (`{"type":"invalid_request_error","code":"context_length_exceeded","message":"Your input exceeds
  the context window of this model. Please adjust your input and try again.","param":"input"}`).
  Whether max_output_tokens counts in the rule is not documented; kept as the chat API's.
- Anthropic: "prompt is too long: 219898 tokens > 200000 maximum" (earendil-works/pi#102, with
  `request_id`), "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000,
  decrease input length or `max_tokens` and try again" (docker/docker-agent#569,
  continuedev/continue#6080): the first when the prompt alone is over, the second when only
  prompt + max_tokens is.
- vLLM: `OpenAIServing._validate_input` in vllm/entrypoints/openai/serving_engine.py (v0.10.2 to
  v0.17; regexes of it in litellm's proxy tests and elsewhere); the envelope
  `{"error": {"message", "type": "BadRequestError", "param": null, "code": 400}}` (v0.10.1+). Later
  releases word it differently (vllm/renderers/params.py); this is the widely deployed one.
- OpenRouter: bodies in Aider-AI/aider#3721, OpenHands/OpenHands#9937 and #8149,
  boldsoftware/shelley#159 (the "of tool input" part appears when tools are sent).
- llama.cpp: tools/server/server-context.cpp (`n_tokens() >= slot.n_ctx` ->
  ERROR_TYPE_EXCEED_CONTEXT_SIZE), `server_task_result_error::to_json` adding n_prompt_tokens and
  n_ctx; `format_error_response` gives `{"code": 400, "message", "type"}`.
- litellm proxy: litellm/exceptions.py (`ContextWindowExceededError` prefixes
  "litellm.ContextWindowExceededError: " to BadRequestError's "litellm.BadRequestError: "),
  litellm_core_utils/exception_mapping_utils.py ("ContextWindowExceededError: OpenAIException -
  {upstream message}"), proxy `ProxyException.to_dict` (code as a string); the router's
  "Received Model Group=..." suffix and null type/param as in OpenHands#8149 and BrokkAi#540.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = [
    "CHAT_ERROR_STYLES",
    "RESPONSES_MESSAGE",
    "Measured",
    "anthropic_overflow",
    "chat_overflow",
    "openai_error",
    "responses_overflow",
]

CHAT_ERROR_STYLES = ("openai", "vllm", "openrouter", "llama.cpp", "litellm")
RESPONSES_MESSAGE = "Your input exceeds the context window of this model. Please adjust your input and try again."


@dataclasses.dataclass(frozen=True)
class Measured:
    """One request at a scripted server's window check: the numbers it checked and, when it
    refused the request as too long, the 400 body it answered."""

    model: str
    counted: int  # the input as the server counted it (what it bills when it answers)
    max_tokens: int  # the output reserve it checked with (0: none)
    window: int
    request: dict[str, Any] = dataclasses.field(repr=False)  # the request body
    error: dict[str, Any] | None = None  # the overflow answer, None when the request fit

    @property
    def over(self) -> bool:
        """Input + reserve over the window by this server's count (a llama.cpp-style server
        accepts such a request: it checks the input alone)."""
        return self.counted + self.max_tokens > self.window

    @property
    def message(self) -> str:
        error = (self.error or {}).get("error")
        return str(error.get("message", "")) if isinstance(error, dict) else ""


def openai_error(
    message: str, type: str | None = "invalid_request_error", param: str | None = None, code: Any = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _openai_message(window: int, prompt: int, max_tokens: int, asked: bool) -> str:
    if asked:
        return (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt + max_tokens} tokens ({prompt} in the messages, {max_tokens} in the completion). "
            "Please reduce the length of the messages or completion."
        )
    return (
        f"This model's maximum context length is {window} tokens. However, your messages resulted in "
        f"{prompt} tokens. Please reduce the length of the messages."
    )


def chat_overflow(
    style: str, *, window: int, prompt: int, max_tokens: int, asked: bool, model: str, tool_tokens: int = 0
) -> dict[str, Any] | None:
    """The 400 body a chat-completions server of `style` answers, or None when the request fits.

    `max_tokens`: the reply reserve (the request's, else the server's default); `asked`: whether
    the request stated it; `tool_tokens`: the part of `prompt` that is tool definitions."""
    if style == "vllm":
        if prompt >= window:
            message = (
                f"This model's maximum context length is {window} tokens. However, your request has "
                f"{prompt} input tokens. Please reduce the length of the input messages."
            )
        elif asked and prompt + max_tokens > window:
            message = (
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
                f"context length is {window} tokens and your request has {prompt} input tokens "
                f"({max_tokens} > {window} - {prompt})."
            )
        else:
            return None
        return openai_error(message, type="BadRequestError", code=400)
    if style == "llama.cpp":
        if prompt < window:
            return None
        return {
            "error": {
                "code": 400,
                "message": f"request ({prompt} tokens) exceeds the available context size ({window} tokens), "
                "try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": window,
            }
        }
    if prompt + max_tokens <= window:
        return None
    if style == "openrouter":
        parts = [f"{prompt - tool_tokens} of text input"]
        if tool_tokens:
            parts.append(f"{tool_tokens} of tool input")
        if max_tokens:
            parts.append(f"{max_tokens} in the output")
        message = (
            f"This endpoint's maximum context length is {window} tokens. However, you requested about "
            f"{prompt + max_tokens} tokens ({', '.join(parts)}). Please reduce the length of either one, or "
            'use the "middle-out" transform to compress your prompt automatically.'
        )
        return {"error": {"message": message, "code": 400}}
    message = _openai_message(window, prompt, max_tokens, asked)
    if style == "litellm":
        wrapped = (
            "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
            f"OpenAIException - {message}. Received Model Group={model}\nAvailable Model Group Fallbacks=None"
        )
        return openai_error(wrapped, type=None, code="400")
    if style != "openai":
        raise ValueError(f"unknown error style {style!r}: one of {', '.join(CHAT_ERROR_STYLES)}")
    return openai_error(message, param="messages", code="context_length_exceeded")


def responses_overflow(*, window: int, prompt: int, max_output_tokens: int) -> dict[str, Any] | None:
    """The Responses API's 400 body for an input over the window, or None when it fits."""
    if prompt + max_output_tokens <= window:
        return None
    return openai_error(RESPONSES_MESSAGE, param="input", code="context_length_exceeded")


def anthropic_overflow(*, window: int, prompt: int, max_tokens: int) -> dict[str, Any] | None:
    """The Messages API's 400 body for a prompt over the window, or None when it fits."""
    if prompt > window:
        message = f"prompt is too long: {prompt} tokens > {window} maximum"
    elif prompt + max_tokens > window:
        message = (
            f"input length and `max_tokens` exceed context limit: {prompt} + {max_tokens} > {window}, "
            "decrease input length or `max_tokens` and try again"
        )
    else:
        return None
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
