"""What an upstream will count (`proxy.estimate`): the last bill carried, the rest estimated and
corrected by the route's own ratio, a margin learned from the error, windows learned from
overflow errors."""

from __future__ import annotations

import random

from proxy.estimate import MIN_SAMPLES, PRIOR_SPREAD, Estimator

KEY = ("route", "model")
FLOOR = 0.02


def history(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"message {i}"} for i in range(n)]


def test_before_any_bill_the_estimate_is_taken_with_the_prior_spread() -> None:
    estimator = Estimator()
    prediction = estimator.predict(KEY, "b", history(3), 10_000, 50, FLOOR)
    assert prediction.predicted == 10_000 and prediction.carried == 0
    assert prediction.margin == int(PRIOR_SPREAD * 10_000)
    assert estimator.limit(KEY, "b", 50, 11_000, FLOOR) == int(11_000 / (1 + PRIOR_SPREAD))


def test_a_request_that_extends_the_last_billed_one_carries_its_bill() -> None:
    estimator = Estimator()
    sent = history(10)
    first = estimator.predict(KEY, "b", sent, 10_000, 50, FLOOR)
    estimator.observe(first, 10_800)  # the upstream counts 8% more than we do
    grown = [*sent, {"role": "user", "content": "more"}]
    second = estimator.predict(KEY, "b", grown, 10_600, 50, FLOOR)
    assert second.carried == 10_800
    # one bill gives the ratio, not yet its spread: the prior spread on the 600 estimated tokens
    assert second.predicted == 10_800 + 648 and second.margin == round(PRIOR_SPREAD * 648)
    # equal messages that are other objects (a request parsed anew) carry it too
    copied = [dict(m) for m in grown]
    assert estimator.predict(KEY, "b", copied, 10_600, 50, FLOOR).carried == 10_800
    # other tools, another branch, or messages that changed before the end: estimated whole
    assert estimator.predict(KEY, "b", grown, 10_600, 51, FLOOR).carried == 0
    assert estimator.predict(KEY, "other", grown, 10_600, 50, FLOOR).carried == 0
    edited = [{"role": "user", "content": "rewritten"}, *grown[1:]]
    assert estimator.predict(KEY, "b", edited, 10_600, 50, FLOOR).carried == 0


def test_the_ratio_is_learned_in_both_directions_across_branches() -> None:
    for factor in (1.13, 0.92):
        estimator = Estimator()
        for i in range(3 * MIN_SAMPLES):
            prediction = estimator.predict(KEY, f"b{i}", history(2), 5_000, 0, FLOOR)
            estimator.observe(prediction, round(5_000 * factor))
        correction = estimator.correction(KEY, FLOOR)
        assert abs(correction.ratio - factor) < 1e-3 and correction.spread == FLOOR
        fresh = estimator.predict(KEY, "new", history(2), 10_000, 0, FLOOR)
        assert abs(fresh.predicted - 10_000 * factor) <= 1 and fresh.margin == round(FLOOR * factor * 10_000)
        # the budget in our estimate's units: larger where the upstream counts less
        limit = estimator.limit(KEY, None, 0, 16_000, FLOOR)
        assert abs(limit - 16_000 / (factor * (1 + FLOOR))) <= 1


def test_the_margin_covers_what_the_estimate_missed_by() -> None:
    rng = random.Random(7)
    estimator = Estimator()
    for i in range(200):  # a content-dependent ratio: 1.00 to 1.10 of our count
        prediction = estimator.predict(KEY, f"b{i}", history(2), 8_000, 0, FLOOR)
        estimator.observe(prediction, round(8_000 * rng.uniform(1.0, 1.1)))
    correction = estimator.correction(KEY, FLOOR)
    assert 1.04 < correction.ratio < 1.06 and 0.035 < correction.spread < 0.06
    limit = estimator.limit(KEY, None, 0, 16_000, FLOOR)
    for _ in range(200):  # a request packed to the limit, counted the upstream's way, fits
        assert limit * rng.uniform(1.0, 1.1) <= 16_000 * 1.001


def test_jitter_of_the_upstreams_own_count_is_learned_from_carried_predictions() -> None:
    rng = random.Random(3)
    estimator = Estimator()
    sent = history(4)
    billed = 10_000
    prediction = estimator.predict(KEY, "b", sent, 10_000, 0, FLOOR)
    estimator.observe(prediction, billed)
    for i in range(100):  # each request adds 100 tokens; the upstream counts the whole +-8%
        sent = [*sent, {"role": "user", "content": f"turn {i}"}]
        estimated = 10_000 + 100 * (i + 1)
        prediction = estimator.predict(KEY, "b", sent, estimated, 0, FLOOR)
        assert prediction.carried
        estimator.observe(prediction, round(estimated * rng.uniform(0.92, 1.08)))
    correction = estimator.correction(KEY, FLOOR)
    assert 0.08 < correction.jitter < 0.17
    last = estimator.predict(KEY, "b", [*sent, {"role": "user", "content": "next"}], 20_200, 0, FLOOR)
    assert last.margin >= 0.08 * last.predicted


def test_an_overflow_teaches_the_window_and_the_count() -> None:
    estimator = Estimator()
    prediction = estimator.predict(KEY, "b", history(2), 15_000, 0, FLOOR)
    estimator.overflowed(prediction, 16_200, 16_000)
    estimator.overflowed(prediction, None, 32_000)  # a larger window named later does not widen it
    assert estimator.window(KEY) == 16_000 and estimator.window(("other", "model")) is None
    (row,) = estimator.describe()
    assert row["learned_window"] == 16_000 and row["samples"] == 1
    estimator.overflowed(prediction, 10**9, None)  # a count no tokenizer gives: not a sample
    assert estimator.describe()[0]["samples"] == 1


def test_a_branch_baseline_is_bounded() -> None:
    estimator = Estimator(branches=2)
    for branch in ("a", "b", "c"):
        estimator.observe(estimator.predict(KEY, branch, history(1), 100, 0, FLOOR), 100)
    assert estimator.sizes() == {"calibrations": 2}
    # all three in use (`proxy.eviction`): the newest that was not billed again went for "c"
    assert estimator.predict(KEY, "b", history(1), 100, 0, FLOOR).carried == 0
    assert estimator.predict(KEY, "a", history(1), 100, 0, FLOOR).carried == 100
    assert estimator.predict(KEY, "c", history(1), 100, 0, FLOOR).carried == 100


def test_branches_billed_in_turn_keep_their_baselines_past_the_bound() -> None:
    """8 branches billed in turn with room for 4: 3 keep their last bill (carried) every turn,
    where an LRU of 4 would keep none (each forgotten just before its next turn)."""
    estimator = Estimator(branches=4)
    carried = []
    for turn in range(3):
        for branch in "abcdefgh":
            prediction = estimator.predict(KEY, branch, history(1), 100, 0, FLOOR)
            if turn:
                carried.append(prediction.carried > 0)
            estimator.observe(prediction, 100)
    assert sum(carried) == 3 * 2
