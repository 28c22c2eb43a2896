"""The restart decisions' outcomes on the real-world corpus (issue 26), as bench/decision_outcomes.py prints them.

Each entry is replayed through the real decision path as an attempt sequence
(monitoring/corpus/outcomes.py). Issue 26's targets hold on the held-back part (the held-back
30 % and every batch >= 2, never read by whoever writes rules): recovered >= 98 % of retryable
faults, <= 0.25 futile restarts per not-retryable fault, never more than 1 on one fault. The
last is met and held; the first two are not met yet, so they are a strict xfail that fails the
day they are met, and floors at what the decisions last reached hold them meanwhile.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import core.kinds
from core.classify import Classification, ErrorSource
from monitoring.corpus import evaluate, outcomes, verdict_table

ENTRIES = evaluate.load_corpus()
REPLAYS = {s: outcomes.replay_all(ENTRIES, s) for s in outcomes.SCENARIOS}
TARGETS = {"recovered": 0.98, "futile_per_bug": 0.25, "worst": 1}
# Reached on 425 entries (batches 1-3) at issue 26's landing, every scenario: recovered 59.6 %
# held back (77.8 % whole), 0.28 futile restarts per not-retryable fault held back (0.21
# whole); then on 521 (batch 4 in) with the kinds keyed by evidence finer than the rule:
# 69.5 % and 0.27 held back (81.7 %, 0.24 whole). Raised with better rules, never lowered.
# Scored on those 521 (batches 1 to 4), the entries they were set on, so that a batch gathered
# later (batch 5, held back whole) does not move them; the targets are scored on every batch.
# Moved once as a pair, by a correction rather than a rule: the fallbacks' counts had been
# taken on training entries the signature writers had left to them, bugs by construction
# (crashed-with-exit-code "transient in 1 of 23"), and now come from the calibration batch,
# reports no signature was written from (monitoring/corpus/verdict_table.py). On these 521,
# replayed as below (the counts of their own training entries, and the calibration batch's):
# recovered 69.5 -> 82.8 % (106 of 128), futile restarts per bug 0.27 -> 0.38 (60 of 156),
# never more than 1 on one fault; the unrecognised failures held back were transient in 41 of
# 64, and now get their one probe. The recovered floor rises with it; the futile one had to
# give: no floor is lowered to pass a rule.
FLOORS = {"recovered": 0.82, "futile_per_bug": 0.39}
FLOORS_SET_ON_BATCHES = 4
# Nor the second, third and fourth gatherings of issue 26's training material (batch 1, ids
# numbered 200 to 499 in their family), which came later: a new real report that goes against a line must not
# move an old floor (monitoring/tests/test_corpus.py leaves the same ids out of its complete
# floors, by the same evaluate.gathered_after_the_floors).
LATER_TRAINING = frozenset(e.id for e in ENTRIES if evaluate.gathered_after_the_floors(e))
SET_ON = [e for e in ENTRIES if e.batch <= FLOORS_SET_ON_BATCHES and e.id not in LATER_TRAINING]
# The kinds those 521 are decided with are counted over their own training entries too: a later
# gathering's real reports change the committed counts (core/verdict_counts.json), and with them
# the kinds of old held-back entries, without any signature changing (issue 26's third gathering:
# file servers' 403s that cleared, against service-denied's deterministic line, probe old
# held-back 401/403/404 bugs once). A signature's effect on the old entries' counts still counts.
# (verdict_table.table counts the calibration batch with them, as for the committed table.)
SET_ON_COUNTS = core.kinds.parse_counts(verdict_table.table(SET_ON))


def _held(scenario: str) -> outcomes.Figures:
    return outcomes.figures([r for r in REPLAYS[scenario] if outcomes.held_back(r.entry)])


@pytest.fixture(scope="module")
def set_on_replays():
    """The 521 replayed with the counts of their own training entries (SET_ON_COUNTS)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core.kinds, "_COUNTS", SET_ON_COUNTS[0])
        patch.setattr(core.kinds, "_KEYED", SET_ON_COUNTS[1])
        yield {s: outcomes.replay_all(SET_ON, s) for s in outcomes.SCENARIOS}


def test_the_floors_are_scored_on_the_521_entries_they_were_set_on():
    assert len(SET_ON) == 521


@pytest.mark.parametrize("scenario", outcomes.SCENARIOS)
def test_no_fault_wastes_more_than_one_restart(scenario):
    worst = [r.entry.id for r in REPLAYS[scenario] if r.futile > TARGETS["worst"]]
    assert worst == []


@pytest.mark.parametrize("scenario", outcomes.SCENARIOS)
def test_the_outcomes_stay_above_their_floors(scenario, set_on_replays):
    f = outcomes.figures([r for r in set_on_replays[scenario] if outcomes.held_back(r.entry)])
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


def _replay(rule: str, retryable: bool) -> outcomes.Replay:
    entry = evaluate.Entry(
        id=f"{rule}-{retryable}", family="startup", source="-", framework="-", log="", exit_code=1, signal=None,
        backend_reason=None, verdict="retryable" if retryable else "not_retryable", why="-", holdout=True,
    )  # fmt: skip
    first = Classification(retryable, rule, "", "", ErrorSource.EXIT_CODE, "", "", cascade_like=False)
    return outcomes.Replay(entry, "rerun", first, 0, False, "")


def test_the_ceiling_picks_the_best_verdict_per_key_knowing_the_answers():
    # a: 90 transient faults alone; b: 8 transient, 10 bugs; c: 2 transient, 30 bugs; d: 60 bugs
    replays = (
        [_replay("a", True)] * 90
        + [_replay("b", True)] * 8 + [_replay("b", False)] * 10
        + [_replay("c", True)] * 2 + [_replay("c", False)] * 30
        + [_replay("d", False)] * 60
    )  # fmt: skip
    c = outcomes.ceiling(replays, outcomes.CEILING_KEYS["rule"])
    assert c.groups == 4
    # 98 of 100 recovered: restart a and b (10 futile restarts of 100 bugs)
    assert c.futile_per_bug == pytest.approx(0.10)
    # within 25 futile restarts: a and b only (c's 30 bugs would overspend), 98 %
    assert c.recovered == pytest.approx(0.98)
    strict = outcomes.ceiling(replays, outcomes.CEILING_KEYS["rule"], recovered_target=1.0, futile_target=0.05)
    assert strict.futile_per_bug == pytest.approx(0.40)  # 100 % needs c too
    assert strict.recovered == pytest.approx(0.90)  # a alone
    # a key that tells every failure apart reaches both: the bound is the keys', not the replay's
    apart = outcomes.ceiling(
        [replace(r, first=replace(r.first, rule=str(i))) for i, r in enumerate(replays)], outcomes.CEILING_KEYS["rule"]
    )
    assert (apart.groups, apart.futile_per_bug, apart.recovered) == (200, 0.0, 1.0)
