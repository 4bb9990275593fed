"""The OpenAI Responses compaction endpoint (`POST /v1/responses/compact`) as a `Wire`.

A client compacting its own history (the OpenAI Agents SDK's `OpenAIResponsesCompactionSession`,
Codex) sends the conversation as a Responses input and gets back `{"object":
"response.compaction", "output": [its user messages..., one opaque compaction item], "usage"}`,
which becomes the input of its next request. Everything but the paths and the answer is the
Responses wire's: the call is routed like `/v1/responses` (`path`), the conversation is identified
by its input like any request's, and it is recorded and billed with purpose `client_compaction`.
It is never projected: the client asked the provider to compact exactly this input. Its answer is
no turn of the conversation (no assistant message is stored); the compaction item it holds comes
back in later requests, where the wire marks it as the client's checkpoint (`convert`).
"""

from __future__ import annotations

from typing import Any

from ...types import Json, Message
from .wire import ResponsesWire


class CompactWire(ResponsesWire):
    paths: tuple[str, ...] = ("/v1/responses/compact", "/responses/compact")
    upstream_path = "/responses/compact"
    purpose = "client_compaction"
    count_paths: tuple[str, ...] = ()  # the Responses wire serves `/v1/responses/input_tokens`

    def rewrite_allowed(self, body: Json) -> bool:
        """Never: the provider compacts the input the client chose."""
        return False

    def response(self, parsed: Json) -> tuple[Message | None, str | None, Any]:
        """No message: the compacted input is the client's next request, not an answer."""
        return None, "compacted" if parsed.get("object") == "response.compaction" else None, parsed.get("usage")


WIRE = CompactWire()
