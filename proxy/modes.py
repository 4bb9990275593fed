"""Per-request control and visibility: the `X-Ctxproxy-Mode` request header and the
`X-Ctxproxy-*` headers every model call's answer carries.

A mode bypasses rewriting for one call while it is still recorded like any other (its events,
its response turn, its call record, the ledger):

- `passthrough`: the client's request goes upstream as the client sent it: no projection, no
  recall tool. The only bytes that may differ are the ones every route adds so that the call is
  billed: a chat-completions stream that did not ask for usage gets
  `stream_options.include_usage` (its usage chunk is kept from the client, as always). A header
  must not be a way around the ledger.
- `observe`: sent exactly as `passthrough`, and the projection ctxproxy would have sent is
  computed too (against the branch's active checkpoint and the same budget) and kept in the call
  record, so an operator sees, for the very request whose answer looked wrong, what ctxproxy
  would have trimmed, pruned or summarized, and how many tokens that would have saved. It starts
  no compaction (no summarizer spend on a call the client asked to leave alone) and a projection
  that could not fit is noted, not answered with a 400.

A mode the route's policy does not list (`modes`), or an unknown one, is a 400 before anything is
stored or sent. The header itself never goes upstream (no `X-Ctxproxy-*` header does:
`proxy.upstream.base.upstream_request_headers`).

The answer's headers say what happened to the request (`call_headers`): the conversation and
branch it was recorded in, ctxproxy's count of the client's request against the count of what
went upstream, the checkpoint generation applied (`none` when none was), and the mode when one
was asked. Example: `X-Ctxproxy-Client-Tokens: 48210`, `X-Ctxproxy-Sent-Tokens: 9120`,
`X-Ctxproxy-Checkpoint: 3`. They name nothing but the caller's own conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import Route
from .errors import BadRequest
from .policy_settings import Policy

MODE = "X-Ctxproxy-Mode"
CONVERSATION = "X-Ctxproxy-Conversation"
BRANCH = "X-Ctxproxy-Branch"
CLIENT_TOKENS = "X-Ctxproxy-Client-Tokens"
SENT_TOKENS = "X-Ctxproxy-Sent-Tokens"
CHECKPOINT = "X-Ctxproxy-Checkpoint"

MODES = ("passthrough", "observe")


def mode_of(headers: Mapping[str, str], route: Route, policy: Policy) -> str | None:
    """The mode the request asks for (None: ctxproxy's usual rewriting); a 400 for a value that
    is no mode or that the route's policy does not allow."""
    asked = headers.get(MODE)
    if asked is None:
        return None
    mode = asked.strip().lower()
    if mode not in MODES:
        raise BadRequest(
            f"{MODE} must be one of {', '.join(MODES)}; got {asked[:64]!r}. Leave the header out to have "
            "the request rewritten as usual.",
            param=MODE,
            code="invalid_mode",
        )
    if mode not in policy.modes:
        allowed = ", ".join(policy.modes) if policy.modes else "none"
        raise BadRequest(
            f"{MODE}: {mode} is not allowed on route {route.name} (policy {route.policy} allows: {allowed}). "
            "Leave the header out, or ask the operator to list the mode in the policy's modes.",
            param=MODE,
            code="mode_not_allowed",
        )
    return mode


def call_headers(
    conversation_id: str, branch_id: str, projection: Mapping[str, Any] | None, mode: str | None
) -> list[tuple[str, str]]:
    """The answer's `X-Ctxproxy-*` headers for a call recorded in this conversation and branch;
    the token counts and checkpoint only once the request was counted (`projection`, the call
    record's)."""
    out = [(CONVERSATION, conversation_id), (BRANCH, branch_id)]
    if projection is not None:
        client, sent = projection.get("client_tokens"), projection.get("sent_tokens")
        if isinstance(client, int) and isinstance(sent, int):
            generation = projection.get("checkpoint_generation")
            out += [(CLIENT_TOKENS, str(client)), (SENT_TOKENS, str(sent))]
            out.append((CHECKPOINT, str(generation) if isinstance(generation, int) else "none"))
    if mode is not None:
        out.append((MODE, mode))
    return out
