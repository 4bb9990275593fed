"""The prompt-cache key ctxproxy gives a conversation on APIs that route by one (OpenAI).

OpenAI routes a request to a cache machine by a hash of its prefix, and, when the request names
one, of its `prompt_cache_key` too. Requests of one conversation that carry the same key land
where their prefix is cached, also when many conversations share a prefix (an agent's long
system prompt) and would otherwise spread over machines beyond the cache's reach. So a request
whose client set no key gets one per conversation: stable across its turns, its branches and
its compactions (the conversation id does not change with them), different for every tenant.

The key is a hash of the tenant and the conversation id: it names neither, so the upstream
learns nothing it could not from the request itself. A client's own key (the field present, of
any value) is never replaced.

Example: tenant `t_3f2a...`, conversation `c_5e0d...` -> `ctxproxy-9b1c...` (32 hex digits).
"""

from __future__ import annotations

import hashlib

PREFIX = "ctxproxy-"


def conversation_key(tenant: str, conversation_id: str) -> str:
    """The conversation's prompt-cache key: 41 characters, within OpenAI's 64."""
    digest = hashlib.sha256(f"ctxproxy prompt_cache_key\x00{tenant}\x00{conversation_id}".encode()).hexdigest()
    return PREFIX + digest[:32]
