"""Which requests get a shadow pair, what kind of pair, and what the rewrite left out: pure.

Sampling is a hash, not a draw: a request is sampled when the SHA-256 of its policy, its
conversation and the chain hash of its newest message, read as a number in [0, 1), is below
the policy's `rate`. The same traffic samples the same requests (a replayed request, a test, a
second replica), and the same rate applies to every request, rewritten or not, so the A/A
floor and the rewrite pairs come from the same population.

A sampled request whose upstream call carried exactly what the client sent (nothing trimmed,
summarized, pruned or repaired, no tool or memory block added) becomes an **A/A pair**
(`control`): the same request went upstream twice, so its divergence is the model's own noise.
A rewritten one becomes a rewrite pair of its **kinds**, read from the call's projection record:
`trimmed`, `summarized`, `pruned`, `recall` (the recall tool was offered), `memory` (a memory
block or tool), `other` (repairs, cuts to fit).

`removed` names what the rewritten call lacked: the history events (by seq) it did not carry
at all (`missing`: pruned or behind the summary) and those it carried altered (`cut`: trimmed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ..identify import canonical
from ..types import Message

CONTROL = "aa"
"""The kind label of A/A pairs in reports and metrics."""


def sampled(rate: float, policy: str, conversation_id: str, newest_hash: str) -> bool:
    """Whether the request is in the sample (see the module docstring)."""
    if rate <= 0:
        return False
    digest = hashlib.sha256(f"{policy}\x00{conversation_id}\x00{newest_hash}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def kinds_of(projection: dict[str, Any] | None, recall: bool, memory: bool, rewritten: bool) -> list[str]:
    """The rewrite kinds of a call's request (empty: not rewritten, an A/A pair). `recall`,
    `memory`: those tools were offered (or the block injected); `rewritten`: the messages sent
    were not the client's."""
    projection = projection or {}
    kinds = []
    if projection.get("trimmed"):
        kinds.append("trimmed")
    if projection.get("checkpoint_generation") is not None:
        kinds.append("summarized")
    if projection.get("pruned_seqs"):
        kinds.append("pruned")
    if recall:
        kinds.append("recall")
    if memory:
        kinds.append("memory")
    if rewritten and not (set(kinds) & {"trimmed", "summarized", "pruned", "memory"}):
        kinds.append("other")
    return kinds


def removed(history: Sequence[Message], first_seq: int, sent: Sequence[Message]) -> dict[str, list[list[int]]]:
    """The events of `history` (seqs from `first_seq` on) the sent messages did not carry as
    they are: `missing` (no message of theirs went) and `cut` (a message with the same tool call
    id went, altered), each as [first, last] seq ranges."""
    exact = {_key(message) for message in sent}
    tool_ids = {m.get("tool_call_id") for m in sent if m.get("role") == "tool" and m.get("tool_call_id")}
    missing: list[int] = []
    cut: list[int] = []
    for offset, message in enumerate(history):
        if _key(message) in exact:
            continue
        seq = first_seq + offset
        if message.get("role") == "tool" and message.get("tool_call_id") in tool_ids:
            cut.append(seq)
        else:
            missing.append(seq)
    return {"missing": ranges(missing), "cut": ranges(cut)}


def ranges(seqs: Sequence[int]) -> list[list[int]]:
    """Sorted seqs as [first, last] runs: [1, 2, 3, 7] -> [[1, 3], [7, 7]]."""
    out: list[list[int]] = []
    for seq in sorted(seqs):
        if out and seq == out[-1][1] + 1:
            out[-1][1] = seq
        else:
            out.append([seq, seq])
    return out


def _key(message: Message) -> str:
    return repr(sorted(canonical(message).items()))
