"""`SharedPrompts`: each branch's last answered request, for `summarizer.mode: shared`, kept for the
newest branches only (a compaction of a branch it no longer holds falls back)."""

from __future__ import annotations

from proxy.last_sent import SharedPrompt, SharedPrompts


def _prompt(seq: int) -> SharedPrompt:
    return SharedPrompt("anthropic", {"model": "m"}, [{"role": "user", "content": "hi"}], {}, 100 + seq, seq)


def test_the_newest_request_of_each_branch_is_kept_for_the_newest_branches() -> None:
    prompts = SharedPrompts(capacity=2)
    prompts.remember("b1", _prompt(1))
    prompts.remember("b2", _prompt(2))
    prompts.remember("b1", _prompt(3))  # b1's newer request replaces its older one, and b1 is newest
    prompts.remember("b3", _prompt(4))  # over capacity: b2, the least recently answered, goes
    assert prompts.get("b2") is None
    first, third = prompts.get("b1"), prompts.get("b3")
    assert first is not None and first.last_seq == 3
    assert third is not None and third.last_seq == 4
