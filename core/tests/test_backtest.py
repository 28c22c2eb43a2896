"""A retryable keyword back-tested on past failures (issue 26), over the real
classifier and the real restart decision, with real logs from the failure corpus
(monitoring/corpus, each entry with its public source)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from core.failpoint import FailurePoint, Phase
from core.backtest import (
    Change,
    Did,
    NextAttempt,
    PastFailure,
    Proved,
    backtest_keywords,
    outcome_of,
    summarize,
)
from core.classify import FailureInput, classify_failure
from core.flags import parse_flags

CORPUS = Path(__file__).resolve().parents[2] / "monitoring" / "corpus"
SYNC = parse_flags("--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3")


@cache
def corpus(entry_id: str) -> dict:
    family = entry_id.rsplit("-", 1)[0]
    for line in (CORPUS / f"{family}.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["id"] == entry_id:
            return entry
    raise LookupError(entry_id)


def crash(entry_id: str) -> FailureInput:
    """The corpus log as an instance that exited 1 (what a Python exception gives)."""
    return FailureInput(exit_code=1, signal=None, log_tail=corpus(entry_id)["log"])


def past(job=1, attempt=1, did=Did.FAILED, failure=None, config=SYNC, **kw) -> PastFailure:
    f = failure if failure is not None else crash("collective-timeout-001")
    c = classify_failure(f)
    values = dict(
        ref=f"{job}:{attempt}",
        job=job,
        attempt=attempt,
        instance="worker-0",
        role="Worker",
        index=0,
        failure=f,
        keywords=(),
        config=config,
        did=did,
        rule=c.rule,
        evidence=c.evidence,
        job_restarts_before=attempt - 1,
        total_workers=2,
        failed_workers=1,
    )
    values.update(kw)
    return PastFailure(**values)


WATCHDOG = "Watchdog caught collective operation timeout"  # in collective-timeout-001's log
BAD_GATEWAY = "502 Server Error: Bad Gateway"  # in external-services-001's log


def test_a_keyword_on_a_failure_that_failed_the_job_would_have_restarted_it_with_no_outcome_to_prove_it():
    f = past(did=Did.FAILED)
    assert not classify_failure(f.failure).retryable  # the catalog's verdict then
    (r,) = backtest_keywords([f], [WATCHDOG])
    assert r.verdict_then is not None and not r.verdict_then.retryable
    assert r.verdict_with is not None and r.verdict_with.rule == "user-keyword" and r.matched
    assert WATCHDOG in r.verdict_with.evidence
    assert (r.would_do, r.change, r.proved, r.right) == (
        Did.RESTARTED,
        Change.RESTART_INSTEAD_OF_FAIL,
        Proved.UNKNOWN,
        None,
    )
    s = summarize([r])
    assert (s.restart_instead_of_fail_jobs, s.restart_instead_of_fail_proved_transient) == (1, 0)
    assert s.sentence.startswith("Would have restarted 1 job, no outcome proves either way")


def test_a_keyword_that_matches_nothing_changes_nothing():
    (r,) = backtest_keywords([past()], ["no such line anywhere"])
    assert (r.matched, r.change, r.would_do) == (False, Change.NONE, Did.FAILED)
    assert r.verdict_then == r.verdict_with
    assert summarize([r]).sentence == "Would have changed no decision on the 1 past failure."


def test_a_keyword_on_a_fault_that_repeated_at_the_same_point_still_meets_the_guard_and_the_outcome_says_deterministic():
    # Attempt 1 failed on a 502 (retryable, read from the log: the guard watches it) and was
    # restarted; attempt 2 failed on the same line with no training in between, and the
    # repeated-failure guard failed the job.
    gateway = crash("external-services-001")
    line = classify_failure(gateway).evidence
    first = past(
        attempt=1,
        did=Did.RESTARTED,
        failure=gateway,
        next_attempt=NextAttempt(
            FailurePoint(None, Phase.STARTUP, ""), failed=True, rule=classify_failure(gateway).rule, evidence=line
        ),
    )
    second = past(attempt=2, did=Did.FAILED, failure=gateway)
    assert outcome_of(first) is Proved.DETERMINISTIC and outcome_of(second, first) is Proved.DETERMINISTIC
    r1, r2 = backtest_keywords([first, second], [BAD_GATEWAY])
    # without the keyword the replay decides as Vigil did: restart, then the guard's fail
    assert r1.change is Change.NONE and r1.would_do is Did.RESTARTED
    assert r1.proved is Proved.DETERMINISTIC and r1.right is False  # the keyword calls it retryable
    # the guard judges a keyword's verdict too (issue 26: no verdict wastes more than one
    # restart on a repeat), so the keyword changes nothing here, and the outcome says it is wrong
    assert (r2.change, r2.would_do, r2.proved, r2.right) == (Change.NONE, Did.FAILED, Proved.DETERMINISTIC, False)
    assert (
        summarize([r1, r2]).sentence
        == "Would have changed no decision on the 2 past failures; it matches 2 of 2 past failures."
    )


def test_a_restart_whose_next_attempt_trained_past_the_point_proves_retryable():
    f = past(
        did=Did.RESTARTED,
        failure=crash("external-services-001"),
        point=FailurePoint(120, Phase.TRAINING, ""),
        next_attempt=NextAttempt(FailurePoint(400, Phase.TRAINING, "")),
    )
    assert outcome_of(f) is Proved.RETRYABLE
    (r,) = backtest_keywords([f], [BAD_GATEWAY])
    assert (r.change, r.proved, r.right) == (Change.NONE, Proved.RETRYABLE, True)
    # the same step again, failing the same way: deterministic; an earlier step too
    line = classify_failure(f.failure).evidence
    for step in (120, 80):
        again = NextAttempt(FailurePoint(step, Phase.TRAINING, ""), failed=True, evidence=line)
        assert outcome_of(
            past(did=Did.RESTARTED, failure=f.failure, evidence=line, point=f.point, next_attempt=again)
        ) is (Proved.DETERMINISTIC)
    # a success proves it whatever the steps say
    done = NextAttempt(FailurePoint(None, Phase.STARTUP, ""), succeeded=True)
    assert outcome_of(past(did=Did.RESTARTED, point=f.point, next_attempt=done)) is Proved.RETRYABLE
    # failing in another way before the point proves nothing
    other = NextAttempt(FailurePoint(10, Phase.TRAINING, ""), failed=True, evidence="something else")
    assert outcome_of(past(did=Did.RESTARTED, point=f.point, next_attempt=other)) is Proved.UNKNOWN


def test_a_keyword_that_gathers_two_rules_into_one_can_fail_a_job_that_later_trained():
    # Two different retryable faults on worker-0, each restarted; with at most one
    # occurrence of the same error, the keyword that matches both makes the second one
    # the same error twice, so Vigil would have failed a job whose next attempt trained.
    once = parse_flags(
        "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 --max-num-of-same-error=1"
    )
    pip, gateway = crash("external-services-019"), crash("external-services-001")
    assert classify_failure(pip).rule != classify_failure(gateway).rule
    first = past(attempt=1, did=Did.RESTARTED, failure=gateway, config=once, point=FailurePoint(10, Phase.TRAINING, ""))
    second = past(
        attempt=2,
        did=Did.RESTARTED,
        failure=pip,
        config=once,
        point=FailurePoint(50, Phase.TRAINING, ""),
        next_attempt=NextAttempt(FailurePoint(900, Phase.TRAINING, "")),
    )
    r1, r2 = backtest_keywords([first, second], ["Server Error", "Read timed out"])
    assert r1.change is Change.NONE
    assert (r2.change, r2.would_do, r2.proved) == (Change.FAIL_INSTEAD_OF_RESTART, Did.FAILED, Proved.RETRYABLE)
    s = summarize([r1, r2])
    assert (s.fail_instead_of_restart_jobs, s.fail_instead_of_restart_later_trained) == (1, 1)
    assert s.sentence.startswith("Would have failed 1 job that later trained")


def test_a_failure_whose_log_is_gone_is_said_and_not_guessed():
    gone = past(job=2, failure=None)
    gone = PastFailure(**{**gone.__dict__, "failure": None})
    r_gone, r = backtest_keywords([gone, past(job=3)], [WATCHDOG])
    assert (r_gone.change, r_gone.verdict_with, r_gone.would_do) == (Change.LOG_GONE, None, None)
    assert r.change is Change.RESTART_INSTEAD_OF_FAIL
    s = summarize([r_gone, r])
    assert s.logs_gone == 1 and "1 past failure could not be tried (the log is gone)" in s.sentence


def test_without_fault_tolerance_a_keyword_changes_the_verdict_but_not_what_vigil_does():
    (r,) = backtest_keywords([past(config=None)], [WATCHDOG])
    assert r.matched and r.verdict_with is not None and r.verdict_with.retryable
    assert (r.change, r.would_do) == (Change.NONE, Did.FAILED)


def test_the_keywords_in_force_count_on_both_sides():
    # A job that already lists the watchdog line: the proposal adds nothing there.
    (r,) = backtest_keywords([past(keywords=(WATCHDOG,))], ["collective operation timeout"])
    assert r.verdict_then is not None and r.verdict_then.rule == "user-keyword"
    assert r.change is Change.NONE
