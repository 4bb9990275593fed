"""What a checkpoint stands for, as stored and as the projection applies it.

A checkpoint made by ctxproxy's own summarizer holds a summary text (`format_version` 1, the
text itself in `summary`). One made by the provider's compaction (`summarizer.mode: native`,
`proxy.native_compaction`) holds the provider's opaque messages -- sent back verbatim in every
later projection -- and the text of what ctxproxy's own summarizer added after them, if anything
(`format_version` 2, `summary` the JSON `{"wire", "messages", "text"}`). Such a checkpoint serves
requests of its wire only: another API could not send the items back, so there the branch is
projected as if it had none. `checkpoint_of` is the one place a stored checkpoint becomes the
policies' `Checkpoint`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from policies.base import Checkpoint

from .store.base import StoredCheckpoint
from .types import Message

TEXT_FORMAT = 1
NATIVE_FORMAT = 2


@dataclass(frozen=True)
class Covered:
    """What a checkpoint stands for: the provider's opaque compaction, then ctxproxy's summary."""

    native: tuple[Message, ...] = ()
    text: str = ""
    wire: str | None = None

    def encoded(self) -> tuple[str, int]:
        """The stored `summary` and its `format_version`."""
        if not self.native:
            return self.text, TEXT_FORMAT
        data = {"wire": self.wire, "messages": list(self.native), "text": self.text}
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")), NATIVE_FORMAT


def covered_of(stored: StoredCheckpoint) -> Covered:
    """The content of a stored checkpoint, whichever format it has."""
    if stored.format_version != NATIVE_FORMAT:
        return Covered(text=stored.summary)
    data = json.loads(stored.summary)
    return Covered(tuple(data["messages"]), data.get("text") or "", data.get("wire"))


def readable(stored: StoredCheckpoint) -> str:
    """What an operator is shown of a checkpoint: its summary, after a line naming the provider's
    compaction it holds (opaque: ctxproxy cannot read it)."""
    covered = covered_of(stored)
    if not covered.native:
        return covered.text
    count = len(covered.native)
    head = f"[provider compaction, opaque: {count} messages of {covered.wire}; checkpoint {stored.tokens:,} tokens]"
    return f"{head}\n\n{covered.text}" if covered.text else head


def checkpoint_of(stored: StoredCheckpoint | None, wire: str | None) -> Checkpoint | None:
    """The checkpoint a projection on `wire` applies (None: none, or the provider compaction of
    another API, whose items this one cannot send back); `wire` None: an operator's preview."""
    if stored is None:
        return None
    covered = covered_of(stored)
    if covered.wire is not None and wire is not None and covered.wire != wire:
        return None
    return Checkpoint(stored.generation, stored.covered_through_seq, covered.text, stored.tokens, covered.native)
