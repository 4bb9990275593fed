"""How a scripted upstream counts a request its own way, as real providers do.

The proxy estimates tokens with tiktoken o200k and OpenAI's framing. No provider counts exactly
like that: OpenAI's billed count differs from any client-side estimate by framing and by how
tools are rendered, Anthropic's tokenizer is not public (tiktoken is 10-20% off on Claude), and
vLLM or llama.cpp count with the model's own tokenizer and chat template. A scripted upstream
that counted like the proxy would only prove that the proxy agrees with itself.

A :class:`Counting` says how a server counts: the encoding, the framing per message, how roles
and tool definitions cost, a fixed bias on the whole count and a random per-request error. The
servers (:mod:`tests.support.upstream_server`, :mod:`tests.support.anthropic_upstream`,
:mod:`tests.support.responses_upstream`) take ``counting=`` (a :class:`Counting` or a preset
name) and use the count both to enforce the model's window and as the input they bill in
``usage``. ``exact`` (the default) is what they always did.

Presets (:data:`PRESETS`, or :func:`counting` for a name):

- ``exact``      o200k, 3 tokens per message, roles as text, tools as OpenAI renders them;
- ``cl100k``     the same with cl100k_base;
- ``framing``    7 tokens per message, every role 1 token (a chat template's role token), tools
                 as their raw JSON (OpenAI wires; Anthropic's tools are JSON anyway);
- ``bias+5`` / ``bias-5``   the whole count times 1.05 / 0.95;
- ``jitter8``    the whole count times 1 + e, e uniform in [-0.08, 0.08], drawn anew for every
                 request from a seeded RNG (the sequence is reproducible; which request gets
                 which draw follows the order requests arrive in);
- ``claude-like``  cl100k + framing + 15% more.

Any ``bias+N`` / ``bias-N`` / ``jitterN`` (N in percent) is understood too.

Example::

    meter = Meter(counting("jitter8"))
    factor = meter.factor()                       # one draw per request
    billed = meter.counting.scaled(base, factor)  # the window check and usage use this
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import random
import re
import threading
from collections.abc import Callable
from typing import Any

from tests.support.tool_billing import openai_tools_tokens

__all__ = ["EXACT", "PRESETS", "Counting", "Meter", "counting", "load_encoding"]

_CACHED_TEXT = 16_384  # longer texts (summarizer bodies) are rarely counted twice: not cached


def load_encoding(name: str = "o200k_base") -> Any:
    """A tiktoken encoding from litellm's bundled BPE files (there is no network in the sandbox)."""
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        # find_spec locates litellm without importing it (its import is slow and goes online)
        spec = importlib.util.find_spec("litellm")
        assert spec is not None and spec.submodule_search_locations, "litellm is not installed"
        os.environ["TIKTOKEN_CACHE_DIR"] = os.path.join(
            list(spec.submodule_search_locations)[0], "litellm_core_utils", "tokenizers"
        )
    import tiktoken

    return tiktoken.get_encoding(name)


@functools.lru_cache(maxsize=4)
def _tiktoken(name: str) -> Any:
    return load_encoding(name)


@functools.lru_cache(maxsize=32_768)
def _cached_count(encoding: str, text: str) -> int:
    return len(_tiktoken(encoding).encode(text, disallowed_special=()))


def _count(encoding: str, text: str) -> int:
    if not text:
        return 0
    if len(text) > _CACHED_TEXT:
        return len(_tiktoken(encoding).encode(text, disallowed_special=()))
    return _cached_count(encoding, text)


@functools.lru_cache(maxsize=256)
def _openai_tools(encoding: str, tools_json: str) -> int:
    """Tools as OpenAI's harmony renderer writes them: its own (o200k) token count, or with another
    encoding the same rendered text counted in that encoding (framing tokens as text)."""
    return openai_tools_tokens(json.loads(tools_json), lambda s: _count(encoding, s), recount=encoding != "o200k_base")


@dataclasses.dataclass(frozen=True)
class Counting:
    """How an upstream counts a request (see the module docstring).

    name            what reports and tests call it.
    encoding        tiktoken encoding of the text (``o200k_base``, ``cl100k_base``).
    message_tokens  framing per message (chat), item (Responses) or turn (Anthropic).
    role_tokens     what a role costs: None, the role's name as text; else this many tokens.
    tools_as_json   OpenAI wires: tool definitions cost their raw JSON, not harmony's TypeScript
                    rendering (Anthropic's tools are their JSON in every mode).
    scale           a fixed multiplier on the whole count (``bias+5``: 1.05).
    jitter          a per-request error, uniform within +-``jitter`` of the whole count.
    seed            the RNG seed of the jitter.
    """

    name: str = "exact"
    encoding: str = "o200k_base"
    message_tokens: int = 3
    role_tokens: int | None = None
    tools_as_json: bool = False
    scale: float = 1.0
    jitter: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.scale <= 0 or not 0 <= self.jitter < 1 or self.message_tokens < 0:
            raise ValueError(f"counting {self.name!r}: scale > 0, 0 <= jitter < 1, message_tokens >= 0")

    @property
    def is_exact(self) -> bool:
        """Counts exactly like the proxy's own estimator (what the servers always did)."""
        return dataclasses.replace(self, name="exact", seed=0) == EXACT

    def text(self, text: str) -> int:
        return _count(self.encoding, text)

    def role(self, role: str) -> int:
        return self.text(role) if self.role_tokens is None else self.role_tokens

    def json(self, value: Any) -> int:
        return self.text(json.dumps(value, sort_keys=True, ensure_ascii=False))

    def openai_tools(self, tools: Any) -> int:
        """An OpenAI (chat or Responses) request's ``tools``."""
        if not isinstance(tools, list) or not tools:
            return 0
        if self.tools_as_json:
            return sum(self.json(t) for t in tools)
        # the key keeps the tools' own order: harmony renders properties in the order given
        return _openai_tools(self.encoding, json.dumps(tools, ensure_ascii=False))

    @staticmethod
    def scaled(base: int, factor: float) -> int:
        """The whole count after bias and jitter (``factor`` from :meth:`Meter.factor`)."""
        return base if factor == 1.0 else max(0, round(base * factor))


EXACT = Counting()

PRESETS: dict[str, Counting] = {
    c.name: c
    for c in (
        EXACT,
        Counting("cl100k", encoding="cl100k_base"),
        Counting("framing", message_tokens=7, role_tokens=1, tools_as_json=True),
        Counting("bias+5", scale=1.05),
        Counting("bias-5", scale=0.95),
        Counting("jitter8", jitter=0.08, seed=8),
        Counting(
            "claude-like", encoding="cl100k_base", message_tokens=7, role_tokens=1, tools_as_json=True, scale=1.15
        ),
    )
}

_PATTERN = re.compile(r"^(?:bias(?P<bias>[+-]\d+(?:\.\d+)?)|jitter(?P<jitter>\d+(?:\.\d+)?))$")


def counting(spec: Counting | str | None) -> Counting:
    """A :class:`Counting` from itself, a preset name or ``bias+N`` / ``bias-N`` / ``jitterN``."""
    if spec is None:
        return EXACT
    if isinstance(spec, Counting):
        return spec
    if spec in PRESETS:
        return PRESETS[spec]
    match = _PATTERN.match(spec)
    if match is None:
        raise ValueError(f"unknown counting {spec!r}: one of {', '.join(PRESETS)}, bias+N, bias-N or jitterN")
    if match["bias"] is not None:
        return Counting(spec, scale=1 + float(match["bias"]) / 100)
    return Counting(spec, jitter=float(match["jitter"]) / 100, seed=int(float(match["jitter"])))


class Meter:
    """A server's counting with its own RNG: :meth:`factor` is drawn once per request, and that
    request's window check and usage both use it."""

    def __init__(self, spec: Counting | str | None = None) -> None:
        self.counting = counting(spec)
        self._rng = random.Random(self.counting.seed)
        self._lock = threading.Lock()

    def factor(self) -> float:
        c = self.counting
        if not c.jitter:
            return c.scale
        with self._lock:
            error = self._rng.uniform(-c.jitter, c.jitter)
        return c.scale * (1 + error)

    def measure(self, base: Callable[[Counting], int]) -> int:
        """One request's count: ``base`` counted in this mode, times a fresh factor."""
        return self.counting.scaled(base(self.counting), self.factor())
