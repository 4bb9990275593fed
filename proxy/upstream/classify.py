"""What an upstream's error answer says: the request overflowed the context window, the upstream
refused its tools, or something else.

The proxy keeps agents inside their window, yet an upstream may still refuse a request as too long
(its tokenizer counts more than ours, its window is smaller than configured), or refuse the tools it
was sent (a schema it cannot read, a server started without tool parsing). Each wants a different
answer: compact and retry, drop or repair the tools, or relay the error as it is. Every provider
says so in its own words, so this module reads the words: a table of wordings whose groups name the
provider's numbers, tried in order, first match wins; then bare phrases and codes.

Numbers, by the provider's own count: `window` the limit it names; `requested` the total it compared
with that limit (input + completion reserve); `input_tokens` and `output_tokens` the parts. When the
limit is on the input alone (Gemini, TGI's `inputs` limit, OpenAI's configured input limit) the
completion it counted is 0. Example: vLLM's "'max_tokens' or 'max_completion_tokens' is too large:
8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens"
is window 4096, input 2778, output 8000, requested 10778, an overshoot of 6682.

Status: overflow is mostly a 400, but TGI (Hugging Face, Together) answers 422 and gateways relay it
as 500 or 502; a tool refusal may be a 404 (OpenRouter) or a 500 (llama.cpp); Groq's 413 "reduce your
message size" is a per-minute rate limit, not the window. So the words decide and the status does
not, except that a 2xx is never a rejection: the upstream took the request. An error event inside
a 200 stream (the Responses API reports `context_length_exceeded` that way) is classified by passing
the event's data with the status it stands for (400).

Never raises: bodies over `MAX_BODY` are read from a prefix; bodies that are not JSON (or are too
deep, or not UTF-8) are read as text; a JSON string that is itself a document (OpenRouter's
`metadata.raw`, Gemini's relayed errors, litellm's wrappings) is read in its place.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any, Literal

from .. import codec

Kind = Literal["overflow", "tool", "other"]

MAX_BODY = 64 * 1024
MAX_MESSAGE = 500
_MAX_NESTED = 8  # JSON documents inside strings read per body
_MESSAGE_KEYS = frozenset({"message", "error", "detail", "msg", "errorMessage"})
_FIELDS = frozenset({"n_prompt_tokens", "n_ctx"})  # llama.cpp names its numbers beside the message
_NUM = r"(?:\d{1,3}(?:,\d{3}){1,6}|\d{1,18})(?!\d)"  # "208,923" too; never an int() of 5,000 digits


@dataclass(frozen=True)
class Rejection:
    """An upstream's refusal as the proxy acts on it; numbers are None when the provider names none."""

    kind: Kind
    window: int | None = None  # the context window (or input limit) the provider names
    requested: int | None = None  # the total it compared with `window`: input + completion
    input_tokens: int | None = None  # its count of the input (messages, prompt, tools)
    output_tokens: int | None = None  # the completion it counted (max_tokens); 0 for an input-only limit
    message: str = ""  # the provider's own words, at most MAX_MESSAGE characters


def _rule(template: str, input_limit: bool = False) -> tuple[re.Pattern[str], bool]:
    """{w} {r} {i} {o}: window, requested, input, output; a space is any run of white space."""
    groups = {name: f"(?P<{name}>{_NUM})" for name in "wrio"}
    return re.compile(template.replace(" ", r"\s+").format(**groups), re.IGNORECASE), input_limit


_AGAINST = r"maximum context length is {w} tokens[.,]? however,?"
_OVERFLOW = (
    # OpenAI, Azure, DeepSeek, vLLM <= 0.10 (and OpenAI's older "in your prompt; ... for the completion")
    _rule(_AGAINST + r" you requested {r} tokens \({i} in (?:the|your) (?:messages|prompt)[,;] {o} (?:in|for) the"),
    # vLLM 0.11: max_tokens over what the input leaves
    _rule(r"is too large: {o}\. this model\S{{0,8}} maximum context length is {w} tokens and your request has {i}"),
    # vLLM renderers: "at least" when tokenizing stopped one past the limit (the counts are lower bounds)
    _rule(
        _AGAINST + r" you requested {o} output tokens and your prompt contains (?:at least )?{i} input tokens"
        r"(?:, for a total of (?:at least )?{r} tokens)?"
    ),
    _rule(_AGAINST + r" you requested {o} output tokens and your prompt contains \d+ characters"),
    _rule(
        r"you passed {i} input tokens and requested {o} output tokens\. however, the model\S{{0,8}} context"
        r" length is only {w} tokens"
    ),
    _rule(
        r"you passed \d+ input characters and requested {o} output tokens\. however, the model\S{{0,8}} context"
        r" length is only {w} tokens"
    ),
    # OpenRouter: "about R tokens (X of text input, Y of tool input, O in the output)"
    _rule(_AGAINST + r" you requested about {r} tokens(?: \([^)]{{0,200}}?{o} in the output\))?"),
    _rule(_AGAINST + r" you requested {i} tokens in the messages"),
    _rule(_AGAINST + r" you requested {r} tokens"),
    _rule(_AGAINST + r" your messages resulted in {i} tokens"),
    _rule(r"maximum (?:context|prompt) length is {w} tokens\. however, your request has {i} (?:input |prompt )?tokens"),
    # Anthropic (and Bedrock relaying it)
    _rule(r"prompt is too long: {i} tokens > {w} maximum"),
    _rule(r"input length and `?max_tokens`? exceed context limit: {i} \+ {o} > {w}"),
    _rule(r"input token count(?: \({i}\))? exceeds the maximum number of tokens allowed \({w}\)", True),  # Gemini
    _rule(r"input tokens exceed the configured limit of {w} tokens", True),  # OpenAI, GPT-5 family
    _rule(r"request \({i} tokens\) exceeds (?:the available )?context size \({w} tokens\)"),  # llama.cpp
    _rule(r"input \({i} tokens\) is larger than the max context size \({w} tokens\)"),
    _rule(r"prompt contains {i} tokens(?: and \d+ draft tokens)?,? too large for model with {w} maximum"),  # Mistral
    _rule(r"prompt is too long: {i}, model maximum context length: {w}"),  # Fireworks, Ollama Cloud
    _rule(r"`?inputs`? tokens \+ `?max_new_tokens`? must be <= {w}\. given: {i} `?inputs`? tokens and {o}"),  # TGI
    _rule(r"`?inputs`? must have less than {w} tokens\. given: {i}", True),
    _rule(r"prompt \(total length {i}\) is too long to fit into the model \(context length {w}\)"),  # vLLM engine
    _rule(r"maximum prompt length is {w} but the request contains {i} tokens"),  # xAI
    _rule(r"prompt tokens \({i}\) exceed model maximum \({w}\)"),  # Bedrock (mantle)
    _rule(
        r"keep the first {i} tokens when context the overflows\. however, the model is loaded with context"
        r" length of only {w} tokens"
    ),
    _rule(r"input length {i} exceeds context length {w}"),  # LM Studio
    _rule(r"maximum context length (?:is|of) {w}"),
)
_OVERFLOW_WORDS = re.compile(
    r"context_length_exceeded|exceed_context_size_error|model_context_window_exceeded|maximum context length"
    r"|exceeds? the (?:available )?context (?:window|size)|context window exceeds limit|context length exceeded"
    r"|prompt is too long|input is too long for requested model|too many input tokens"
    r"|reduce the length of the messages|greater than the context length|exceeds the maximum number of tokens",
    re.IGNORECASE,
)
# A tool definition (`tools[3]`, `tools.3.`, Gemini's function_declarations), tool_choice, or a server
# or model without tools. Not `messages[..].tool_calls` or `tool_result` blocks: those are history.
_TOOL_WORDS = re.compile(
    r"\btools\[\d+\]|\btools\.\d+[.:]|\bfunctions\[\d+\]|function_declarations|invalid schema for function"
    r"|\btool[_ ]choice\b|does not support tools|support tool use|tools param requires|unsupported param: tools"
    r"|enable-auto-tool-choice",
    re.IGNORECASE,
)


def classify(status: int, body: bytes) -> Rejection:
    """Classify an upstream's answer with HTTP `status` and `body`; never raises."""
    texts, fields = _read(body)
    joined = "\n".join(text for _, text in texts)
    starts = [0]
    for _, text in texts[:-1]:
        starts.append(starts[-1] + len(text) + 1)

    def said(at: int) -> str:  # the text holding offset `at`: the provider's own sentence
        return _clip(texts[bisect.bisect_right(starts, at) - 1][1])

    fallback = next((_clip(text) for key, text in texts if key in _MESSAGE_KEYS), _clip(texts[0][1]))
    if 200 <= status < 300:
        return Rejection("other", message=fallback)
    for pattern, input_limit in _OVERFLOW:
        if match := pattern.search(joined):
            return _overflow(match, input_limit, fields, said(match.start()))
    if match := _OVERFLOW_WORDS.search(joined):
        return _overflow(None, False, fields, said(match.start()))
    if match := _TOOL_WORDS.search(joined):
        return Rejection("tool", message=said(match.start()))
    return Rejection("other", message=fallback)


def overshoot(r: Rejection, max_output_tokens: int | None = None) -> int | None:
    """How many tokens the input must lose for the request to fit, by the provider's own numbers.

    `requested - window` when the provider counted the total (OpenAI/vLLM "you requested M", Anthropic
    "I + O > N", TGI, OpenRouter). Otherwise `input + reserve - window`, the reserve being the
    completion the provider counted (0 for an input-only limit: Gemini "input token count (M) exceeds
    ... (N)" is M - N) or else the caller's `max_output_tokens`, since the window holds the completion
    too: Anthropic "prompt is too long: M tokens > N maximum" is M - N, plus the reserve when given.
    At least 1: llama.cpp and vLLM refuse a prompt equal to the window. A lower bound when vLLM says
    "at least". None when the provider names no window, or neither a total nor an input count."""
    if r.kind != "overflow" or r.window is None:
        return None
    if r.requested is not None:
        total = r.requested
    elif r.input_tokens is not None:
        reserve = r.output_tokens if r.output_tokens is not None else max_output_tokens or 0
        total = r.input_tokens + reserve
    else:
        return None
    return max(total - r.window, 1)


MIN_WINDOW = 256
"""A window named smaller than this is no model's: a misread number, not something to learn."""


def window_of(r: Rejection, max_output_tokens: int | None = None) -> int | None:
    """The window the provider named, as ctxproxy budgets it (input and reply together): a limit
    on the input alone (Gemini, TGI: `output_tokens` 0) is that limit plus the reply reserve."""
    if r.kind != "overflow" or r.window is None or r.window < MIN_WINDOW:
        return None
    return r.window + (max_output_tokens or 0) if r.output_tokens == 0 else r.window


def _overflow(match: re.Match[str] | None, input_limit: bool, fields: dict[str, int], message: str) -> Rejection:
    n = {k: int(v.replace(",", "")) for k, v in match.groupdict().items() if v} if match else {}
    window, requested, tokens_in, tokens_out = n.get("w"), n.get("r"), n.get("i"), n.get("o")
    window = fields.get("n_ctx") if window is None else window
    tokens_in = fields.get("n_prompt_tokens") if tokens_in is None else tokens_in
    tokens_out = 0 if input_limit and tokens_out is None else tokens_out
    if requested is None and tokens_in is not None and tokens_out is not None:
        requested = tokens_in + tokens_out
    if tokens_in is None and requested is not None and tokens_out is not None:
        tokens_in = requested - tokens_out
    return Rejection("overflow", window, requested, tokens_in, tokens_out, message)


def _read(body: bytes) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The (key, text) of every string in the body, breadth first so an error's own message comes
    before what it wraps, and llama.cpp's numeric fields; the raw text when the body is no JSON."""
    head = body[:MAX_BODY]
    value = _json(head) if len(body) <= MAX_BODY else None
    texts: list[tuple[str, str]] = []
    fields: dict[str, int] = {}
    level: list[tuple[str, Any]] = [("", value)]
    nested = 0
    while level:
        deeper: list[tuple[str, Any]] = []
        for key, node in level:
            if isinstance(node, dict):
                deeper.extend((str(k), v) for k, v in node.items())
            elif isinstance(node, list):
                deeper.extend((key, v) for v in node)
            elif isinstance(node, str):
                inner = _json(node) if nested < _MAX_NESTED and node.lstrip().startswith(("{", "[")) else None
                if isinstance(inner, (dict, list)):
                    nested += 1
                    deeper.append((key, inner))
                else:
                    texts.append((key, node))
            elif key in _FIELDS and type(node) is int:
                fields[key] = node
        level = deeper
    return texts or [("", head.decode("utf-8", "replace"))], fields


def _json(data: bytes | str) -> Any:
    try:
        return codec.loads(data)
    except codec.JsonRejected:
        return None


def _clip(text: str) -> str:
    text = text.strip().encode("utf-8", "replace").decode("utf-8")  # a lone surrogate must not reach a log
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
