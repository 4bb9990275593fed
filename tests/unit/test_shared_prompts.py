"""`SharedPrompts`: each branch's last answered request, for `summarizer.mode: shared` (and `auto`),
kept for the branches near a compaction, within a memory bound, the least recently answered
dropped first (a compaction of a branch it no longer holds falls back)."""

from __future__ import annotations

from proxy.last_sent import NEAR, PER_BYTE, SharedPrompt, SharedPrompts, near_trigger


def _prompt(seq: int, size: int = 1000) -> SharedPrompt:
    return SharedPrompt("anthropic", {"model": "m"}, [{"role": "user", "content": "hi"}], {}, 100 + seq, seq, size)


def test_the_newest_request_of_each_branch_is_kept_within_the_memory_bound() -> None:
    prompts = SharedPrompts(max_mb=2 * 1000 * PER_BYTE / 2**20)  # room for two requests of 1,000 bytes
    prompts.remember("b1", _prompt(1))
    prompts.remember("b2", _prompt(2))
    prompts.remember("b1", _prompt(3))  # b1's newer request replaces its older one, and b1 is newest
    prompts.remember("b3", _prompt(4))  # over the bound: b2, the least recently answered, goes
    assert prompts.get("b2") is None and len(prompts) == 2 and prompts.held == 2 * 1000 * PER_BYTE
    first, third = prompts.get("b1"), prompts.get("b3")
    assert first is not None and first.last_seq == 3
    assert third is not None and third.last_seq == 4
    prompts.remember("b4", _prompt(5, size=10_000))  # larger than the whole bound: never kept, nothing dropped
    assert prompts.get("b4") is None and len(prompts) == 2
    prompts.forget("b1")  # its newer request went unkept: the older one is not its last any more
    assert prompts.get("b1") is None and prompts.held == 1000 * PER_BYTE
    none = SharedPrompts(max_mb=0)
    none.remember("b1", _prompt(1))
    assert none.get("b1") is None and none.held == 0


def test_only_a_request_near_its_compaction_trigger_is_worth_keeping() -> None:
    def near(sent: int, client: int, generation: int | None = 1, trigger: int | None = 10_000) -> bool:
        record = {"sent_tokens": sent, "client_tokens": client, "trigger_tokens": trigger}
        return near_trigger({**record, "checkpoint_generation": generation})

    at = int(NEAR * 10_000)
    assert near(at, at) and near(12_000, 12_000)
    assert not near(at - 1, 50_000)  # after a checkpoint: what is sent, not the client's whole history
    assert near(3_000, at, generation=None)  # before it: the first rewrite compacts, however much the trim cut
    assert not near(3_000, at - 1, generation=None)
    assert not near(at, at, trigger=None) and not near(at, at, trigger=0)
