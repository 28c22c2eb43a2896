"""The classifier against the real-world failure corpus (issue 13).

Fails when agreement with the sources' verdicts falls below the targets, so a later
signature cannot silently break an old case, and when the corpus loses its shape.
`bench/classify_corpus.py` prints the same figures in full.
"""

from __future__ import annotations

from collections import Counter

import pytest

from monitoring.corpus import evaluate, split

ENTRIES = evaluate.load_corpus()
SCORE = evaluate.score(evaluate.run(ENTRIES))


def _misses(outcomes) -> str:
    return "; ".join(f"{o.entry.id} ({o.entry.verdict}, got {o.classification.rule})" for o in outcomes)


# ---- shape --------------------------------------------------------------------------


def test_the_corpus_holds_at_least_250_entries_with_unique_ids():
    assert len(ENTRIES) >= 250
    ids = Counter(e.id for e in ENTRIES)
    assert [i for i, n in ids.items() if n > 1] == []


def test_every_family_has_at_least_8_entries_and_every_entry_a_known_family():
    families = Counter(e.family for e in ENTRIES)
    assert set(families) <= set(evaluate.FAMILIES)
    assert {f: families[f] for f in evaluate.FAMILIES if families[f] < 8} == {}


def test_each_verdict_is_at_least_40_percent_of_the_corpus():
    verdicts = Counter(e.verdict for e in ENTRIES)
    for verdict in evaluate.VERDICTS:
        assert verdicts[verdict] / len(ENTRIES) >= 0.40, verdicts


def test_every_entry_names_its_source_url_a_log_and_why():
    for e in ENTRIES:
        assert e.source.startswith(("https://", "http://")), e.id
        assert e.log.strip() and e.why.strip(), e.id
        assert e.id.startswith(e.family + "-"), e.id


def test_the_held_back_marks_are_the_split_scripts():
    # `python monitoring/corpus/split.py` marks new entries; until it runs they are held
    # back by the same rule (evaluate.load_corpus), so a mark can be missing, never wrong.
    assert [e.id for e in ENTRIES if e.marked and e.holdout is not split.is_holdout(e.id)] == []
    assert sum(e.marked for e in ENTRIES) >= 250


# ---- agreement ----------------------------------------------------------------------

# Issue 13's targets. Not met yet (see the report of bench/classify_corpus.py): the
# strict xfail below turns into a failure the day they are met, so the floors are then
# raised to the targets.
ISSUE_TARGETS = {"overall": 0.97, "held_back": 0.93, "false_retryable": 0.01}
# What the classifier reached on the corpus as it was when each floor was set, less a small
# margin (raised with each round of signatures, never lowered): a later signature that breaks
# those cases fails here. A floor is scored on the entries it was set on, not on entries
# gathered since: new real reports that go against a line's verdict lower a figure without any
# signature breaking (issue 26's 13 training entries and batch 4 did: 14.4 % false-retryable
# on all 521, while the 425 below still score 14.29 %); they get floors of their own below.
# Set at 80.7 % overall, 68.3 % held back, 14.2 % false-retryable (414 entries, 93 of them
# batch 2, gathered after the signatures were written).
FLOORS = {"overall": 0.805, "held_back": 0.68, "false_retryable": 0.143}
# The same scored by the restart policy's decision over the attempts an entry describes (a
# retry-once verdict is retried once, then not: evaluate.py), set at 82.4 % overall, 69.8 %
# held back, 11.3 % false-retryable (425 entries, batch 3's 11 included).
DECISION_FLOORS = {"overall": 0.82, "held_back": 0.695, "false_retryable": 0.115}
# Those 425: batches 1 to 3 but for the entries gathered for issue 26 (commit a412e3d).
ISSUE_26_TRAINING = frozenset({f"external-services-{n:03d}" for n in range(63, 74)} | {"gpu-031", "gpu-032"})
# The second, third and fourth gatherings of issue 26's training material (batch 1, ids numbered
# 200 to 499 in their family), gathered after every floor here was set, so no floor counts them: SET_ON
# leaves them out with ISSUE_26_TRAINING, and the complete floors are scored on the 521 without
# them (evaluate.gathered_after_the_floors, which test_corpus_outcomes uses too).
ISSUE_26_LATER_TRAINING = frozenset(e.id for e in ENTRIES if evaluate.gathered_after_the_floors(e))
SET_ON = [e for e in ENTRIES if e.batch <= 3 and e.id not in ISSUE_26_TRAINING and e.id not in ISSUE_26_LATER_TRAINING]
SET_ON_SCORE = evaluate.score(evaluate.run(SET_ON))
# The complete corpus after issue 26's gathering (521 entries, batch 4's 83 included), set at
# 81.4 % overall, 70.4 % held back, 14.4 % false-retryable; by the decision 82.7 %, 71.6 %,
# 12.0 %. Raised as signatures improve; a new batch gets a line of its own. Scored on those
# 521 (batches 1 to 4) only, so that a batch gathered later (batch 5, held back whole) does not
# move them.
# Nor the later gatherings of issue 26's training material (ids 200 to 499, batch 1).
COMPLETE = [e for e in ENTRIES if e.batch <= 4 and e.id not in ISSUE_26_LATER_TRAINING]
COMPLETE_SCORE = evaluate.score(evaluate.run(COMPLETE))
COMPLETE_FLOORS = {"overall": 0.81, "held_back": 0.70, "false_retryable": 0.145}
COMPLETE_DECISION_FLOORS = {"overall": 0.825, "held_back": 0.713, "false_retryable": 0.121}


def test_the_floors_are_scored_on_the_entries_they_were_set_on():
    assert len(SET_ON) == 425
    assert len(COMPLETE) == 521


@pytest.mark.parametrize(
    "score, floors", [(SET_ON_SCORE, FLOORS), (COMPLETE_SCORE, COMPLETE_FLOORS)], ids=["set-on", "complete"]
)
def test_overall_agreement_stays_above_its_floor(score, floors):
    assert score.agreement >= floors["overall"], f"{score.agreement:.1%}; misses: {_misses(score.misses)}"


@pytest.mark.parametrize(
    "score, floors", [(SET_ON_SCORE, FLOORS), (COMPLETE_SCORE, COMPLETE_FLOORS)], ids=["set-on", "complete"]
)
def test_held_back_agreement_stays_above_its_floor(score, floors):
    assert score.held_back, "no held-back entries"
    assert score.held_back_agreement >= floors["held_back"], f"{score.held_back_agreement:.1%}"


@pytest.mark.parametrize(
    "score, floors", [(SET_ON_SCORE, FLOORS), (COMPLETE_SCORE, COMPLETE_FLOORS)], ids=["set-on", "complete"]
)
def test_false_retryable_rate_stays_below_its_ceiling(score, floors):
    false_retryable = [o for o in score.outcomes if not o.entry.retryable and o.classification.retryable]
    assert score.false_retryable_rate <= floors["false_retryable"], _misses(false_retryable)


@pytest.mark.parametrize(
    "score, floors",
    [(SET_ON_SCORE, DECISION_FLOORS), (COMPLETE_SCORE, COMPLETE_DECISION_FLOORS)],
    ids=["set-on", "complete"],
)
def test_the_policys_decisions_stay_above_their_floors(score, floors):
    agreement, false_retryable = score.decision()
    held_back, _ = score.decision("held_back")
    assert agreement >= floors["overall"], f"{agreement:.1%}"
    assert held_back >= floors["held_back"], f"{held_back:.1%}"
    assert false_retryable <= floors["false_retryable"], f"{false_retryable:.1%}"


def _entry(verdict: str, exit_code: int = 137, log: str = "") -> evaluate.Entry:
    return evaluate.Entry(
        id="signals-999",
        family="signals",
        source="https://example.org/",
        framework="pytorch",
        log=log,
        exit_code=exit_code,
        signal=None,
        backend_reason=None,
        verdict=verdict,
        why="-",
        holdout=False,
    )


def test_a_retry_once_verdict_is_scored_by_what_the_policy_does_on_the_repeat():
    from core.classify import classify_failure
    from core.flags import FaultToleranceConfig
    from core.policy import Action, InstanceFailure, JobHistory, Step, decide

    # The scoring's premise is the policy's: retried once, then the job fails on the repeat.
    bare_kill = classify_failure(evaluate.failure_input(_entry("not-retryable")))
    assert (bare_kill.rule, bare_kill.retryable, bare_kill.retry_limit) == ("killed-by-signal", True, 1)
    config, failed = (
        FaultToleranceConfig(enable_job_restart=True),
        InstanceFailure("worker-1", "Worker", 1, "n", bare_kill),
    )
    assert decide(config, JobHistory(), failed).action is Action.RESTART_JOB
    again = decide(config, JobHistory(same_error_counts={("killed-by-signal", "Worker", 1): 1}), failed)
    assert (again.action, again.step) == (Action.FAIL_JOB, Step.RETRIES_SPENT)

    deterministic, transient = (evaluate.Outcome(_entry(v), bare_kill) for v in evaluate.VERDICTS[::-1])
    assert not deterministic.agrees and deterministic.decision_agrees and deterministic.restarts_spent == 1
    assert transient.agrees and transient.decision_agrees and transient.restarts_spent == 0
    # a verdict retryable without a limit is decided on the first attempt, as before
    reset = classify_failure(
        evaluate.failure_input(_entry("not-retryable", exit_code=1, log="RuntimeError: Connection reset by peer\n"))
    )
    unbounded = evaluate.Outcome(_entry("not-retryable"), reset)
    assert reset.retry_limit is None and not unbounded.decision_agrees and unbounded.restarts_spent == 0
    s = evaluate.score([deterministic, transient, unbounded])
    assert s.decision() == (2 / 3, 1 / 2) and s.restarts_spent == 1 and len(s.bounded) == 2


@pytest.mark.xfail(strict=True, reason="issue 13's targets are not met yet; raise FLOORS to them when they are")
def test_issue_13_targets():
    assert SCORE.agreement >= ISSUE_TARGETS["overall"]
    assert SCORE.held_back_agreement >= ISSUE_TARGETS["held_back"]
    assert SCORE.false_retryable_rate <= ISSUE_TARGETS["false_retryable"]


@pytest.mark.xfail(strict=True, reason="issue 13's targets are not met yet by the policy's decisions either")
def test_issue_13_targets_by_the_policys_decisions():
    (agreement, false_retryable), (held_back, _) = SCORE.decision(), SCORE.decision("held_back")
    assert agreement >= ISSUE_TARGETS["overall"] and held_back >= ISSUE_TARGETS["held_back"]
    assert false_retryable <= ISSUE_TARGETS["false_retryable"]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_the_prefilter_never_changes_a_corpus_classification(monkeypatch, entry):
    from core import classify
    from core.catalog import LOG_SIGNATURES

    with_prefilter = classify.classify_failure(evaluate.failure_input(entry))
    monkeypatch.setattr(classify, "_candidates", lambda folded: dict.fromkeys(range(len(LOG_SIGNATURES))))
    assert classify.classify_failure(evaluate.failure_input(entry)) == with_prefilter


def test_a_signature_grown_from_the_corpus_decides_some_corpus_entry():
    # Its real example is in the corpus rather than in test_classify's SAMPLES. (Not the
    # entries its `documented` cites by id: the corpus's ids may be renumbered.)
    from core.catalog import LOG_SIGNATURES
    from core.tests.test_classify import SAMPLES

    sampled = {rule for rule, _, _ in SAMPLES}
    decided = {o.classification.rule for o in SCORE.outcomes}
    assert [s.rule for s in LOG_SIGNATURES if s.rule not in sampled and s.rule not in decided] == []
