"""The vocabulary of the policy layer's inputs: the stored events, the checkpoint, the budget,
and the one error a projection raises.

Problem: the proxy stores every event of a branch and must decide, per call, what is actually
sent upstream. Policies make that decision as pure functions over these values; the proxy turns
its rows into `Item`s once, at the edge. The settings are in `policies.config`, what a
projection produces in `policies.outcome`.

Invariant: every value here is immutable (frozen dataclasses, tuples) and validated on
construction, so a policy can never observe a half-valid input or mutate what it was given.

Example::

    budget = Budget(context_window=16_000, max_output_tokens=2_000, fixed_tokens=300)
    budget.input_budget                  # 14_000: what messages + tools + framing may use
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Message = Mapping[str, Any]
"""An OpenAI chat-completions message dict (role system/developer/user/assistant/tool)."""

KNOWN_ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool", "function")


@dataclass(frozen=True, slots=True)
class Item:
    """One stored event of the current branch. `seq` is 1-based, ascending and unique;
    `tokens` is what `message` costs, precomputed (and cached) by the caller."""

    seq: int
    message: Message
    tokens: int


@dataclass(frozen=True)
class Checkpoint:
    """The active summary of a branch: it stands for every item with seq <= covered_through_seq."""

    generation: int
    covered_through_seq: int
    summary: str
    tokens: int
    native: tuple[Message, ...] = ()
    """The provider's own compaction of the covered events (opaque messages the wire sends back
    verbatim), standing before the summary block; `summary` is then empty or what ctxproxy's own
    summarizer added after it."""


@dataclass(frozen=True)
class Budget:
    """Token limits of one upstream call. `fixed_tokens` = tool definitions + request framing
    (reply priming etc.); messages are counted separately."""

    context_window: int
    max_output_tokens: int
    fixed_tokens: int = 0
    summarizer: Budget | None = None
    """the summarizer model's own limits (its window, its reply reserve, its framing); None: the
    summarizer shares this budget"""
    summary_max_tokens: int | None = None
    """the longest summary a compaction may commit (None: not known); planning keeps room for a
    summary this large, so the projection after the commit lands near `target`"""
    nominal_input: int | None = None
    """the input the model's window holds in its own tokens (window less the reply reserve), when
    `input_budget` is in another unit (an estimate corrected for the upstream's count, which
    moves as it is learned); it sizes what follows the window's size rather than fitting it (how
    many recent groups keep their results whole), so learning never moves a trim boundary back"""

    def __post_init__(self) -> None:
        if self.context_window <= 0:
            raise ValueError(f"context_window must be > 0, got {self.context_window}")
        if not 0 <= self.max_output_tokens < self.context_window:
            raise ValueError(
                f"max_output_tokens must be >= 0 and below context_window "
                f"({self.context_window}), got {self.max_output_tokens}"
            )
        if self.fixed_tokens < 0:
            raise ValueError(f"fixed_tokens must be >= 0, got {self.fixed_tokens}")
        if self.summary_max_tokens is not None and self.summary_max_tokens < 0:
            raise ValueError(f"summary_max_tokens must be >= 0, got {self.summary_max_tokens}")

    @property
    def input_budget(self) -> int:
        """Tokens the request may use: the window minus the output reserved for the reply."""
        return self.context_window - self.max_output_tokens

    @property
    def sizing(self) -> int:
        """What sizes window-dependent settings: `nominal_input`, else `input_budget`."""
        return self.nominal_input or self.input_budget


class ContextOverflow(Exception):
    """Even the irreducible request (prefix, pins, summary, latest turn) exceeds the input budget.
    The proxy maps this to a 400 `context_length_exceeded` in the client API's error shape."""

    def __init__(
        self,
        needed_tokens: int,
        input_budget: int,
        context_window: int,
        max_output_tokens: int,
        detail: str = "",
    ) -> None:
        self.needed_tokens = needed_tokens
        self.input_budget = input_budget
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.detail = detail
        message = (
            f"context length exceeded: even after dropping all unpinned history the request needs "
            f"{needed_tokens:,} tokens; the model allows {input_budget:,} input tokens "
            f"(window {context_window:,} − max output {max_output_tokens:,}). "
            "Shorten the latest message or tool result, lower max_tokens, or start a new conversation."
        )
        if detail:
            message += f" ({detail})"
        super().__init__(message)
