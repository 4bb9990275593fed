"""A policy's settings as the proxy reads them: `Policy` (the policies' own `PolicyConfig` plus
the settings only the proxy reads) and its `Summarizer`.

Part of the config (`proxy.config.Config.policies`), validated with the rest of it at start-up,
like the tool settings (`proxy/tool_settings.py`) and the shadow pairs' (`proxy/shadow/settings.py`)
it holds. The bounds of the policy settings live in `policies.config` only: `Policy` is that
dataclass, validated by pydantic from the YAML keys of the same names, so a setting out of bounds
is reported where it is (`policies.default.trigger: must be within (0, 1], got 1.5`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictBool, model_validator
from pydantic.dataclasses import dataclass as validated_dataclass

from policies.config import PolicyConfig
from policies.key_lines import SHARE as KEY_LINES_SHARE
from policies.projection import check_order

from .shadow.settings import Shadow
from .tool_settings import Frozen as _Frozen
from .tool_settings import Memory, Recall

SummaryMode = Literal["text", "native", "shared"]
"""How a compaction asks for its summary, once `auto` is resolved (`Summarizer.resolved`)."""


class Summarizer(_Frozen):
    mode: Literal["auto", "text", "native", "shared"] = "auto"
    """`text`: ctxproxy's own summarizer request (`proxy/rolling.py`: the history as tagged data
    under its own system prompt); `native`: the route's own provider compacts
    (`proxy/native_compaction.py`: the Responses API's `/responses/compact`, Anthropic's
    server-side compaction), ctxproxy's own summarizer only where it cannot; `shared`: the summary
    is asked of the branch's last request as it went upstream, read from the provider's prompt
    cache (`proxy/shared_summary.py`), ctxproxy's own summarizer where that fails. `native` and
    `shared` with the route's own upstream only (no `model`). `auto` (the default): `shared`
    where it can apply, else `text` (`resolved`)."""
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float = Field(120.0, gt=0)
    max_attempts: int = Field(2, ge=1, le=5)
    max_tokens: int = Field(2048, ge=256)
    """the summary reply's size asked for (capped by the summarizer's output reserve)"""
    context_window: int | None = Field(None, gt=0)
    """the summarizer model's window (default: litellm's model map for it; for a model it does not
    know, the smallest window of the routes using the policy: `proxy/windows.py`)"""
    summary_max_tokens: int | None = Field(None, ge=64)
    """the summary length asked for (default: a tenth of the route's window, within the reply
    reserve); a longer one is kept while it fits the room the plan left, else cut at a line"""
    max_output_tokens: int | None = Field(None, gt=0)
    """the summarizer's output reserve (default: `max_tokens`, capped at the model's max output
    and a quarter of its window)"""
    key_lines_share: float = Field(KEY_LINES_SHARE, ge=0, le=0.5)
    """the share of `summary_max_tokens` given to the key lines of the tool results a checkpoint
    covers, copied by ctxproxy after the summary (`policies/key_lines.py`; 0: none); the summary
    is asked for the rest"""

    @model_validator(mode="after")
    def _native_own_route(self) -> Summarizer:
        if self.mode == "native" and self.model:
            raise ValueError("mode 'native' asks the route's own provider to compact: it takes no summarizer model")
        if self.mode == "shared" and self.model:
            raise ValueError("mode 'shared' reads the conversation's own prompt cache: it takes no summarizer model")
        return self

    def resolved(self, *, litellm: bool = False, extraction: bool = False) -> SummaryMode:
        """The mode a compaction (and what it keeps for one) uses. `auto` is `shared` where the
        summary can be asked of the conversation's own cached request: the summarizer is the
        route's own model (no `model`), the route is no litellm route (`litellm`: it reads no
        cache of the client's provider) and long-term memory does not extract at compaction
        (`extraction`: that needs the event ids the conversation does not show); else `text`.
        An explicit mode is kept as it is: `shared` then falls back at run time, counted."""
        if self.mode != "auto":
            return self.mode
        return "text" if self.model or litellm or extraction else "shared"


@validated_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Policy(PolicyConfig):
    """How a route's requests are rewritten: the policies' own `PolicyConfig` (trigger, target,
    keep_recent_tokens, summary_chunk_tokens, order, tool_results, pins — validated by pydantic
    from their annotations, bounded by their own checks) plus the settings only the proxy reads.
    Windows default to litellm's model info. A `Policy` is what `policies.projection.project`
    takes as its config."""

    context_window: Annotated[int | None, Field(gt=0)] = None
    max_output_tokens: Annotated[int | None, Field(gt=0)] = None
    safety_margin: Annotated[float, Field(gt=0, lt=1)] = 0.02
    """The least share of what is still estimated (`proxy.estimate`) kept free of the window;
    above it the margin is what the estimate is measured to miss on this route and model."""
    on_overflow: Literal["wait", "prune"] = "wait"
    overflow_wait: Annotated[float, Field(ge=0)] = 30.0
    rewrite: bool = True
    store_failure: Literal["fail", "passthrough"] = "fail"
    """When the store fails while identifying, ingesting or projecting a request: answer 503
    (`fail`), or relay it unrewritten and unrecorded with `X-Ctxproxy-Degraded` (`passthrough`)."""
    provider_context: Literal["defer", "combine"] = "defer"
    """A request that asks the provider to compact its context (a `context_management` naming a
    compaction: Responses `{"type": "compaction"}`, an Anthropic `compact_*` edit): `defer`
    forwards it as sent (recorded and accounted, never trimmed or summarized: two compactors on
    one window would undo each other); `combine` projects it as any other request, below the
    provider's trigger (`Wire.provider_trigger`), so ctxproxy's trim and summary act first and the
    provider's compaction applies to what ctxproxy cannot bring under it. Context editing alone (clearing old
    thinking or tool uses) is always projected, the edits kept."""
    summarizer: Summarizer = Summarizer()
    recall: Recall = Recall()
    memory: Memory = Memory()
    shadow: Shadow = Shadow()
    """Shadow pairs (`proxy/shadow/`): the client's own request sent again, unrewritten, after
    its answer, to measure whether rewriting changed the agent's next step. Off by default."""
    modes: tuple[Literal["passthrough", "observe"], ...] = ("passthrough", "observe")
    """The values of the `X-Ctxproxy-Mode` request header a client may send on the routes using
    this policy (proxy/modes.py); another value is a 400. Empty: no mode is allowed."""
    prompt_cache_key: StrictBool = True
    """On APIs that take one (OpenAI chat and Responses): a request without the client's own
    `prompt_cache_key` gets one per conversation (`proxy/cache_key.py`), so its turns land on the
    same prompt-cache machines; false sends the body without one, as the client sent it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_order(self.order)
        if self.context_window and self.max_output_tokens and self.max_output_tokens >= self.context_window:
            raise ValueError("max_output_tokens must be smaller than context_window")
        if len(set(self.modes)) != len(self.modes):
            raise ValueError("modes lists a mode twice")
        if self.memory.enabled is not False and self.memory.tool_name == self.recall.tool_name:
            raise ValueError("memory.tool_name must differ from recall.tool_name")
