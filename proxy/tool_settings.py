"""The settings of the tools the proxy offers the model itself: recall and long-term memory.

Part of a policy (`proxy.policy_settings.Policy.recall`, `.memory`), validated with the rest of the
config at start-up into frozen models.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Frozen(BaseModel):
    """A config section: immutable once loaded, and an unknown key is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Recall(Frozen):
    """The recall tool the proxy offers the model (`proxy/recall/`): `auto` (the default) offers it
    when the client's own request carries tools (a tool-using agent, whose model takes tools);
    `true` always; `false` never. Only on rewriting routes (`rewrite: true`)."""

    enabled: Literal["auto"] | bool = "auto"
    tool_name: str = Field("ctxproxy_recall", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    max_result_tokens: int = Field(2000, ge=100, le=50_000)
    max_rounds: int = Field(3, ge=1, le=10)
    rejected_seconds: float = Field(3600.0, gt=0)
    """How long a route and model whose upstream rejected the tool go without it (`proxy/recall/memory.py`)."""


class ProjectKey(Frozen):
    """Where a request's `project:` memory scope comes from (`proxy/memory/scopes.py`), the first
    source in `sources` that yields one: `header` (the request header `header`), `workspace` (the
    working directory Claude Code, Codex and pi state in their first messages), `system` (the
    first group of `pattern`, a regex over the system prompt, or its whole match)."""

    sources: tuple[Literal["header", "workspace", "system"], ...] = ("header", "workspace", "system")
    header: str = Field("X-Ctxproxy-Project", pattern=r"^[A-Za-z0-9-]{1,64}$")
    pattern: str | None = None

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regex: {exc}") from None
        return value


class Memory(Frozen):
    """Long-term memory across conversations (`proxy/memory/`, docs/memory.md): off by default.
    `true` injects the scope's memories and offers the memory tool on every request; `auto`
    offers the tool only when the client's own request carries tools (injection either way).
    Only on rewriting routes."""

    enabled: Literal["auto"] | bool = False
    scopes: tuple[Literal["project", "user", "tenant"], ...] = ("project", "user")
    """The scopes the route reads and writes; the first one the request has is where `save` goes
    by default. `user` is the `clients:` name, so it needs client keys."""
    project: ProjectKey = ProjectKey()
    inject_tokens: int = Field(800, ge=0, le=20_000)
    """The injected block's size at most (0: no injection, the tool only)."""
    unconfirmed: Literal["heading", "omit"] = "heading"
    """Memories whose text was seen only in tool output: injected under their own heading, or not at all."""
    write: Literal["model", "confirm"] = "model"
    """`confirm`: the model's saves wait (`pending`) until an operator approves them."""
    tool_name: str = Field("ctxproxy_memory", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    max_result_tokens: int = Field(1500, ge=100, le=20_000)
    max_per_scope: int = Field(500, ge=1, le=2000)
    """Memories a scope may hold (current ones); a save beyond is refused with a tool error."""
    extraction: bool = False
    """At compaction the summarizer also lists durable facts; each becomes an `unconfirmed`
    candidate memory (writer `extraction`) with its event id."""

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or len(set(value)) != len(value):
            raise ValueError("must list at least one scope, each once")
        return value
