"""The restart decisions' outcomes on the real-world corpus (issue 26), as bench/decision_outcomes.py prints them.

Each entry is replayed through the real decision path as an attempt sequence
(monitoring/corpus/outcomes.py). Issue 26's targets hold on the held-back part (the held-back
30 % and every batch >= 2, never read by whoever writes rules): recovered >= 98 % of retryable
faults, <= 0.25 futile restarts per not-retryable fault, never more than 1 on one fault. The
last is met and held; the first two are not met yet, so they are a strict xfail that fails the
day they are met, and floors at what the decisions last reached hold them meanwhile.
"""

from __future__ import annotations

import pytest

from monitoring.corpus import evaluate, outcomes

ENTRIES = evaluate.load_corpus()
REPLAYS = {s: outcomes.replay_all(ENTRIES, s) for s in outcomes.SCENARIOS}
TARGETS = {"recovered": 0.98, "futile_per_bug": 0.25, "worst": 1}
# Reached on 425 entries (batches 1-3) at issue 26's landing, every scenario: recovered 59.6 %
# held back (77.8 % whole), 0.28 futile restarts per not-retryable fault held back (0.21
# whole); then on 521 (batch 4 in) with the kinds keyed by evidence finer than the rule:
# 69.5 % and 0.27 held back (81.7 %, 0.24 whole). Raised with better rules, never lowered.
FLOORS = {"recovered": 0.69, "futile_per_bug": 0.28}


def _held(scenario: str) -> outcomes.Figures:
    return outcomes.figures([r for r in REPLAYS[scenario] if outcomes.held_back(r.entry)])


@pytest.mark.parametrize("scenario", outcomes.SCENARIOS)
def test_no_fault_wastes_more_than_one_restart(scenario):
    worst = [r.entry.id for r in REPLAYS[scenario] if r.futile > TARGETS["worst"]]
    assert worst == []


@pytest.mark.parametrize("scenario", outcomes.SCENARIOS)
def test_the_outcomes_stay_above_their_floors(scenario):
    f = _held(scenario)
    assert f.recovered_share >= FLOORS["recovered"], f"{f.recovered_share:.1%}"
    assert f.futile_per_bug <= FLOORS["futile_per_bug"], f"{f.futile_per_bug:.2f}"


@pytest.mark.xfail(
    strict=True, reason="issue 26's recovery and futile-restart targets are not met on the held-back part"
)
def test_issue_26_targets_on_the_held_back_part():
    for scenario in outcomes.SCENARIOS:
        f = _held(scenario)
        assert f.recovered_share >= TARGETS["recovered"], f"{scenario}: recovered {f.recovered_share:.1%}"
        assert f.futile_per_bug <= TARGETS["futile_per_bug"], f"{scenario}: {f.futile_per_bug:.2f} futile per bug"


def test_a_transient_fault_is_recovered_by_one_restart_and_a_repeating_bug_costs_one():
    # The replay's premise: the monitor's own functions decide each attempt.
    by_id = {r.entry.id: r for r in REPLAYS["rerun"]}
    transient = next(r for r in by_id.values() if r.entry.retryable and r.first.retryable)
    assert (transient.recovered, transient.restarts) == (True, 1)
    guarded = [r for r in by_id.values() if not r.entry.retryable and r.restarts == 1]
    assert guarded and all(
        "the same failure at the same point twice" in r.last_reason or "retried only" in r.last_reason for r in guarded
    )
