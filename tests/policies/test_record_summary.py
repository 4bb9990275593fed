"""The compact projection record kept with every call: sizes, not per-event lists."""

from __future__ import annotations

from policies.outcome import ProjectionRecord, TrimEntry


def test_summary_dict_counts_instead_of_listing() -> None:
    trimmed = tuple(TrimEntry(seq, f"call_{seq}", 5000, 400) for seq in range(2, 400, 2))
    record = ProjectionRecord(
        client_tokens=90_000,
        sent_tokens=20_000,
        checkpoint_generation=3,
        covered_through_seq=120,
        trimmed=trimmed,
        pruned_seqs=(5, 6, 7, 9),
        over_trigger=False,
        compaction=None,
        sent_seqs=tuple(range(1, 401)),
        pinned_seqs=(1,),
        orphan_seqs=(11,),
        repaired=((30, "call_x"),),
        input_budget=28_000,
        trigger_tokens=22_400,
    )
    summary = record.summary_dict()
    assert summary["trimmed"] == 199 and summary["trimmed_chars"] == [199 * 5000, 199 * 400]
    assert summary["pruned_seqs"] == [[5, 7], [9, 9]]
    assert summary["sent"] == 400 and summary["orphans"] == 1 and summary["repaired"] == 1
    assert {
        k: summary[k] for k in ("client_tokens", "sent_tokens", "checkpoint_generation", "covered_through_seq")
    } == {"client_tokens": 90_000, "sent_tokens": 20_000, "checkpoint_generation": 3, "covered_through_seq": 120}
    # the full record still has every entry
    assert len(record.to_dict()["trimmed"]) == 199
