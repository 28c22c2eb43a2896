"""The restart decision: one test per SPEC 3 rule and per flag that changes it, the
restart-loop breaker, hang triggers, and properties over random histories."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.classify import Classification, ErrorSource, FailureInput, classify_failure
from core.flags import ExecutionMode, FaultToleranceConfig, FaultTolerantPolicy, parse_flags
from core.policy import (
    RESTART_LOOP_LIMIT,
    Action,
    DetectedProblem,
    InstanceFailure,
    JobHistory,
    Step,
    decide,
)

SYNC_PYTORCH = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg"
)
ASYNC_TF = "--job-execution-mode=Async --fault-tolerant-policy=OnFailure"

NCCL_TAIL = (
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
)
BUG_TAIL = "[rank1]: ValueError: expected 3 dimensions, got 2\n"


def retryable() -> Classification:
    return classify_failure(FailureInput(1, None, NCCL_TAIL))


def non_retryable() -> Classification:
    return classify_failure(FailureInput(1, None, BUG_TAIL))


def failure(c: Classification | None = None, role="Worker", index=1) -> InstanceFailure:
    return InstanceFailure(f"{role.lower()}-{index}", role, index, "node-a", c or retryable())


def history(**kw) -> JobHistory:
    base: dict[str, Any] = dict(total_worker_instances=4, failed_worker_instances_now=1)
    base.update(kw)
    return JobHistory(**base)


def sync_restartable(**kw) -> FaultToleranceConfig:
    return FaultToleranceConfig(enable_job_restart=True, **kw)


HANG = DetectedProblem(ErrorSource.HANG, "All 4 running instances have been silent for 1810 s")


# ---- rule 1: stopped by a person ---------------------------------------------------


def test_job_stopped_by_a_person_is_never_restarted():
    d = decide(sync_restartable(), history(stopped_by_user=True), failure())
    assert (d.action, d.step) == (Action.NOTHING, Step.STOPPED_BY_USER)
    assert "stopped by a person" in d.reason


def test_hang_of_a_stopped_job_does_nothing():
    d = decide(sync_restartable(), history(stopped_by_user=True), HANG)
    assert (d.action, d.step) == (Action.NOTHING, Step.STOPPED_BY_USER)


# ---- rule 2: policy Never -----------------------------------------------------------


def test_policy_never_fails_the_job_even_for_a_retryable_error():
    cfg = sync_restartable(fault_tolerant_policy=FaultTolerantPolicy.NEVER)
    d = decide(cfg, history(), failure(retryable()))
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.POLICY_NEVER)
    assert "--fault-tolerant-policy=Never" in d.reason


# ---- rule 3: classification --------------------------------------------------------


def test_exit_code_and_error_msg_fails_a_non_retryable_failure_with_its_cause():
    d = decide(sync_restartable(), history(), failure(non_retryable()))
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.NOT_RETRYABLE)
    assert "ValueError: expected 3 dimensions, got 2" in d.reason
    assert non_retryable().cause in d.reason and non_retryable().next_step in d.reason


def test_exit_code_and_error_msg_restarts_a_retryable_failure():
    d = decide(sync_restartable(), history(), failure(retryable()))
    assert (d.action, d.step) == (Action.RESTART_JOB, Step.JOB_RESTART)
    assert "nccl-system-error" in d.reason


def test_on_failure_restarts_even_a_non_retryable_failure():
    cfg = sync_restartable(fault_tolerant_policy=FaultTolerantPolicy.ON_FAILURE)
    d = decide(cfg, history(), failure(non_retryable()))
    assert d.action is Action.RESTART_JOB
    assert "every failure qualifies with OnFailure" in d.reason


# ---- rule 4: --max-num-of-same-error -------------------------------------------------


def test_same_error_at_the_limit_is_still_restarted():
    c = retryable()
    d = decide(sync_restartable(), history(same_error_counts={(c.rule, "Worker", 1): 9}), failure(c))
    assert d.action is Action.RESTART_JOB


def test_same_error_past_the_limit_fails_the_job():
    c = retryable()
    d = decide(sync_restartable(), history(same_error_counts={(c.rule, "Worker", 1): 10}), failure(c))
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.SAME_ERROR_LIMIT)
    assert "occurred 11 times on worker-1, more than --max-num-of-same-error=10" in d.reason


def test_max_num_of_same_error_flag_sets_the_limit():
    c = retryable()
    cfg = sync_restartable(max_num_of_same_error=2)
    assert decide(cfg, history(same_error_counts={(c.rule, "Worker", 1): 1}), failure(c)).action is Action.RESTART_JOB
    assert decide(cfg, history(same_error_counts={(c.rule, "Worker", 1): 2}), failure(c)).step is Step.SAME_ERROR_LIMIT


def test_same_error_counts_per_instance_and_rule():
    c = retryable()
    counts = {(c.rule, "Worker", 0): 50, ("gloo-connection-closed", "Worker", 1): 50}
    assert decide(sync_restartable(), history(same_error_counts=counts), failure(c)).action is Action.RESTART_JOB


# ---- rule 5: --max-tolerated-failure-rate --------------------------------------------


def test_failure_rate_over_the_threshold_fails_the_job():
    cfg = sync_restartable(max_tolerated_failure_rate=0.3)
    d = decide(cfg, history(failed_worker_instances_now=2, total_worker_instances=4), failure())
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.FAILURE_RATE)
    assert "2 of 4 worker instances have failed (50%), more than --max-tolerated-failure-rate=0.3" in d.reason


def test_failure_rate_at_or_under_the_threshold_restarts():
    cfg = sync_restartable(max_tolerated_failure_rate=0.25)
    assert (
        decide(cfg, history(failed_worker_instances_now=1, total_worker_instances=4), failure()).action
        is Action.RESTART_JOB
    )


def test_failure_rate_minus_one_is_off():
    d = decide(sync_restartable(), history(failed_worker_instances_now=4, total_worker_instances=4), failure())
    assert d.action is Action.RESTART_JOB


# ---- rule 6: execution mode ---------------------------------------------------------


def test_async_job_restarts_only_the_failed_worker():
    d = decide(parse_flags(ASYNC_TF), history(), failure(non_retryable(), role="Worker", index=3))
    assert (d.action, d.step) == (Action.RESTART_INSTANCE, Step.INSTANCE_RESTART)
    assert d.reason.startswith("Restarting worker-3 alone")


@pytest.mark.parametrize("role", ["PS", "Chief"])
def test_async_ps_or_chief_failure_needs_a_whole_job_restart_which_is_off_by_default(role):
    d = decide(parse_flags(ASYNC_TF), history(), failure(role=role, index=0))
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.RESTART_DISABLED)
    assert f"is a {role}, whose failure needs a whole-job restart" in d.reason


def test_async_chief_failure_restarts_the_whole_job_when_restarts_are_on():
    cfg = parse_flags(ASYNC_TF + " --enable-job-restart=True")
    assert decide(cfg, history(), failure(role="Chief", index=0)).action is Action.RESTART_JOB


def test_sync_job_restarts_the_whole_job():
    d = decide(parse_flags(SYNC_PYTORCH), history(), failure())
    assert (d.action, d.step) == (Action.RESTART_JOB, Step.JOB_RESTART)
    assert d.reason.startswith("Restarting the whole job (restart 1 of 3): worker-1 failed with a retryable error")


# ---- rule 7: --enable-job-restart and --max-num-of-job-restart ----------------------


def test_whole_job_restart_needs_enable_job_restart():
    d = decide(FaultToleranceConfig(), history(), failure())
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.RESTART_DISABLED)
    assert "--enable-job-restart=False" in d.reason


def test_restart_budget_exhausted_fails_the_job():
    d = decide(parse_flags(SYNC_PYTORCH), history(job_restarts_so_far=3), failure())
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.RESTART_BUDGET)
    assert d.reason.startswith(
        "Not restarted: the job has already been restarted 3 of 3 times (--max-num-of-job-restart=3)"
    )


def test_last_restart_within_the_budget_is_allowed():
    d = decide(parse_flags(SYNC_PYTORCH), history(job_restarts_so_far=2), failure())
    assert d.action is Action.RESTART_JOB and "(restart 3 of 3)" in d.reason


def test_max_num_of_job_restart_zero_never_restarts_the_job():
    d = decide(sync_restartable(max_num_of_job_restart=0), history(), failure())
    assert d.step is Step.RESTART_BUDGET


# ---- the restart-loop breaker (SPEC 9) ----------------------------------------------


def test_three_restarts_in_a_row_without_progress_fail_the_job():
    cfg = sync_restartable(max_num_of_job_restart=10)
    d = decide(cfg, history(job_restarts_so_far=3, consecutive_restarts_without_progress=3), failure())
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.RESTART_LOOP)
    assert "3 whole-job restarts in a row made no training progress" in d.reason


def test_two_restarts_without_progress_still_restart():
    cfg = sync_restartable(max_num_of_job_restart=10)
    d = decide(cfg, history(job_restarts_so_far=2, consecutive_restarts_without_progress=2), failure())
    assert d.action is Action.RESTART_JOB


def test_breaker_does_not_stop_async_instance_restarts():
    d = decide(parse_flags(ASYNC_TF), history(consecutive_restarts_without_progress=5), failure())
    assert d.action is Action.RESTART_INSTANCE


# ---- hang, exit hang and C4D triggers: rules 1 and 7 only -------------------------


@pytest.mark.parametrize("source", [ErrorSource.HANG, ErrorSource.EXIT_HANG, ErrorSource.C4D])
def test_detected_problem_restarts_the_whole_job_when_allowed(source):
    d = decide(sync_restartable(), history(), DetectedProblem(source, "silent for 1810 s"))
    assert (d.action, d.step) == (Action.RESTART_JOB, Step.JOB_RESTART)
    assert "silent for 1810 s" in d.reason


def test_hang_with_restarts_off_fails_the_job():
    d = decide(FaultToleranceConfig(), history(), HANG)
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.RESTART_DISABLED)
    assert "the job hung: all 4 running instances have been silent for 1810 s." in d.reason


def test_hang_ignores_the_policy_the_same_error_limit_and_the_failure_rate():
    cfg = sync_restartable(fault_tolerant_policy=FaultTolerantPolicy.NEVER, max_tolerated_failure_rate=0.0)
    d = decide(cfg, history(failed_worker_instances_now=4), HANG)
    assert d.action is Action.RESTART_JOB


def test_hang_respects_the_budget_and_the_breaker():
    assert decide(parse_flags(SYNC_PYTORCH), history(job_restarts_so_far=3), HANG).step is Step.RESTART_BUDGET
    assert (
        decide(parse_flags(SYNC_PYTORCH), history(consecutive_restarts_without_progress=RESTART_LOOP_LIMIT), HANG).step
        is Step.RESTART_LOOP
    )


# ---- bad input ----------------------------------------------------------------------


def test_detected_problem_accepts_only_hang_exit_hang_and_c4d():
    with pytest.raises(ValueError, match="source"):
        DetectedProblem(ErrorSource.LOG, "x")


@pytest.mark.parametrize(
    "field, value",
    [
        ("job_restarts_so_far", -1),
        ("total_worker_instances", "4"),
        ("stopped_by_user", 1),
        ("failed_worker_instances_now", 9),
    ],
)
def test_malformed_history_is_rejected_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        history(**{field: value})


def test_unknown_trigger_is_rejected():
    with pytest.raises(ValueError, match="trigger"):
        decide(FaultToleranceConfig(), history(), "worker-1 died")


# ---- properties ---------------------------------------------------------------------

configs = st.builds(
    FaultToleranceConfig,
    job_execution_mode=st.sampled_from(list(ExecutionMode)),
    enable_job_restart=st.booleans(),
    max_num_of_job_restart=st.integers(0, 6),
    fault_tolerant_policy=st.sampled_from(list(FaultTolerantPolicy)),
    max_num_of_same_error=st.integers(1, 5),
    max_tolerated_failure_rate=st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0]),
)
classifications = st.sampled_from([retryable(), non_retryable()])
roles = st.sampled_from(["Worker", "Master", "PS", "Chief"])


@st.composite
def histories(draw, stopped=st.booleans()):
    total = draw(st.integers(0, 8))
    return JobHistory(
        stopped_by_user=draw(stopped),
        job_restarts_so_far=draw(st.integers(0, 8)),
        same_error_counts=draw(
            st.dictionaries(
                st.tuples(st.sampled_from([retryable().rule, non_retryable().rule]), roles, st.integers(0, 3)),
                st.integers(0, 8),
                max_size=4,
            )
        ),
        failed_worker_instances_now=draw(st.integers(0, total)),
        total_worker_instances=total,
        consecutive_restarts_without_progress=draw(st.integers(0, 5)),
    )


triggers = st.one_of(
    st.builds(
        InstanceFailure,
        instance=st.just("x-0"),
        role=roles,
        index=st.integers(0, 3),
        node=st.just("node-a"),
        classification=classifications,
    ),
    st.builds(
        DetectedProblem,
        source=st.sampled_from([ErrorSource.HANG, ErrorSource.EXIT_HANG, ErrorSource.C4D]),
        message=st.just("silent for 2000 s"),
    ),
)


@settings(max_examples=300, deadline=None)
@given(configs, histories(), triggers)
def test_a_whole_job_restart_never_exceeds_the_budget(config, hist, trigger):
    d = decide(config, hist, trigger)
    if d.action is Action.RESTART_JOB:
        assert config.enable_job_restart
        assert hist.job_restarts_so_far < config.max_num_of_job_restart
        assert hist.consecutive_restarts_without_progress < RESTART_LOOP_LIMIT
    assert d.reason.endswith(".") and d.reason[0].isupper()


@settings(max_examples=100, deadline=None)
@given(configs, st.lists(st.tuples(classifications, roles), min_size=1, max_size=20))
def test_repeated_failures_restart_the_job_at_most_max_times(config, failures):
    restarts = 0
    for c, role in failures:
        d = decide(config, JobHistory(job_restarts_so_far=restarts), failure(c, role=role, index=0))
        if d.action is Action.RESTART_JOB:
            restarts += 1
        if d.action is Action.FAIL_JOB:
            break
    assert restarts <= config.max_num_of_job_restart


@settings(max_examples=200, deadline=None)
@given(configs, histories(stopped=st.just(True)), triggers)
def test_a_stopped_job_is_never_acted_on(config, hist, trigger):
    assert decide(config, hist, trigger).action is Action.NOTHING


@settings(max_examples=200, deadline=None)
@given(configs, histories(stopped=st.just(False)), triggers.filter(lambda t: isinstance(t, InstanceFailure)))
def test_policy_never_never_restarts_after_an_instance_failure(config, hist, trigger):
    never = FaultToleranceConfig(**{**config.__dict__, "fault_tolerant_policy": FaultTolerantPolicy.NEVER})
    d = decide(never, hist, trigger)
    assert d.action is Action.FAIL_JOB and d.step is Step.POLICY_NEVER


# ---- issue 13: retry once, and the repeated-failure guard ---------------------------


def sigkill_without_evidence() -> Classification:
    return classify_failure(FailureInput(137, None, "step 3 loss 0.5\n"))


def test_a_sigkill_without_evidence_is_retried_once_per_instance():
    config = sync_restartable()
    c = sigkill_without_evidence()
    first = decide(config, history(), failure(c))
    assert (first.action, first.step) == (Action.RESTART_JOB, Step.JOB_RESTART)
    second = decide(config, history(same_error_counts={("killed-by-signal", "Worker", 1): 1}), failure(c))
    assert (second.action, second.step) == (Action.FAIL_JOB, Step.RETRIES_SPENT)
    assert "retried only 1 time" in second.reason
    # another instance has its own once
    other = decide(config, history(same_error_counts={("killed-by-signal", "Worker", 0): 1}), failure(c))
    assert other.action == Action.RESTART_JOB
    # with OnFailure every failure qualifies, as rule 3 says
    on_failure = decide(
        sync_restartable(fault_tolerant_policy=FaultTolerantPolicy.ON_FAILURE),
        history(same_error_counts={("killed-by-signal", "Worker", 1): 1}),
        failure(c),
    )
    assert on_failure.action == Action.RESTART_JOB


def _previous(**kw):
    from core.policy import PreviousFailure

    base = dict(rule="nccl-system-error", role="Worker", index=1)
    base.update(kw)
    return PreviousFailure(**base)


@pytest.mark.parametrize(
    "previous, repeated",
    [
        (dict(), True),  # no progress between
        (dict(progress_since=True), False),  # trained in between
        (dict(progress_since=True, step=40, step_now=40), True),  # trained back to the same step
        (dict(progress_since=True, step=40, step_now=55), False),
        (dict(index=0), False),  # another rank
        (dict(rule="connection-reset"), False),  # another signature
    ],
)
def test_the_repeated_failure_guard_needs_the_same_failure_at_the_same_point(previous, repeated):
    from core.policy import REPEATED_FAILURE_REASON

    d = decide(sync_restartable(), history(previous_failure=_previous(**previous)), failure())
    if repeated:
        assert (d.action, d.step) == (Action.FAIL_JOB, Step.REPEATED_FAILURE)
        assert REPEATED_FAILURE_REASON in d.reason
    else:
        assert d.action == Action.RESTART_JOB


def test_the_guard_leaves_preemptions_the_backend_reported_alone():
    preempted = classify_failure(
        FailureInput(None, 15, "*** JOB 7 ON n1 CANCELLED AT 2021-06-18T13:05:36 DUE TO PREEMPTION ***\n")
    )
    assert preempted.family == "preemption" and preempted.retryable
    evicted = classify_failure(FailureInput(None, None, "", backend_reason="Evicted"))
    d = decide(sync_restartable(), history(previous_failure=_previous(rule=evicted.rule)), failure(evicted))
    assert d.action == Action.RESTART_JOB
    # one read from the log alone is guarded like any line the code could print (issue 26):
    # restarted when it trained in between, stopped at the same point twice
    trained = _previous(rule=preempted.rule, progress_since=True)
    assert (
        decide(sync_restartable(), history(previous_failure=trained), failure(preempted)).action == Action.RESTART_JOB
    )
    d = decide(sync_restartable(), history(previous_failure=_previous(rule=preempted.rule)), failure(preempted))
    assert d.step == Step.REPEATED_FAILURE


def test_the_guard_reads_an_instance_restarted_alone_by_its_own_previous_failure():
    # Async: worker-1 was restarted alone within this attempt; its own failure, not the
    # root cause of the whole-job restart, is the one its next failure repeats.
    from core.flags import ExecutionMode

    config = sync_restartable(job_execution_mode=ExecutionMode.ASYNC)
    own = _previous()  # nccl-system-error on Worker 1, no progress since
    d = decide(config, history(instance_failures=(own,)), failure())
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.REPEATED_FAILURE)
    # its run since trained: restarted alone again
    d = decide(config, history(instance_failures=(_previous(progress_since=True),)), failure())
    assert d.action == Action.RESTART_INSTANCE
    # another instance's own failure says nothing about worker-1
    d = decide(config, history(instance_failures=(_previous(index=2),)), failure())
    assert d.action == Action.RESTART_INSTANCE
    # and its own failure is the later one: it wins over the whole-job restart's root cause
    d = decide(
        config, history(previous_failure=_previous(rule="connection-reset"), instance_failures=(own,)), failure()
    )
    assert d.step == Step.REPEATED_FAILURE


def test_malformed_instance_failures_are_rejected_naming_the_field():
    with pytest.raises(ValueError, match="instance_failures"):
        history(instance_failures=[_previous()])
    with pytest.raises(ValueError, match="instance_failures"):
        history(instance_failures=(("nccl-system-error", "Worker", 1),))


def test_a_malformed_previous_failure_is_rejected_naming_the_field():
    with pytest.raises(ValueError, match="previous_failure"):
        history(previous_failure=("nccl-system-error", "Worker", 1))


def test_a_job_failed_on_a_retryable_entry_is_not_told_it_will_be_retried():
    # A retryable entry's advice opens "The job is retried automatically ..."; once the guard
    # or the per-instance retry limit fails the job, that sentence is false, and the
    # rest of the advice (where to look) is what the person needs.
    nccl, sigkill = retryable(), sigkill_without_evidence()
    assert nccl.next_step.startswith("The job is retried automatically")
    assert sigkill.next_step.startswith("The job is retried once")
    guarded = decide(sync_restartable(), history(previous_failure=_previous()), failure(nccl))
    spent = decide(
        sync_restartable(), history(same_error_counts={("killed-by-signal", "Worker", 1): 1}), failure(sigkill)
    )
    assert guarded.step == Step.REPEATED_FAILURE and spent.step == Step.RETRIES_SPENT
    for d, c in ((guarded, nccl), (spent, sigkill)):
        assert d.action == Action.FAIL_JOB
        assert "retried automatically" not in d.reason and "retried once" not in d.reason, d.reason
        further = c.next_step.split(". ", 1)[1]  # "If it keeps happening, look for ..."
        assert d.reason.endswith(further), d.reason


def test_no_retryable_entrys_advice_promises_a_retry_to_a_job_that_fails():
    # Every entry of the catalog, not only the two above: a new one's advice in other words
    # ("The job is retried." or "...; if ...") must lose its promise too.
    import re

    from core.catalog import SIGNATURES
    from core.policy import _failing_advice

    promise = re.compile(r"\b(?:is|will be) (?:retried|restarted)\b(?! again)|automatically", re.I)
    for s in (s for s in SIGNATURES if s.retryable):
        c = Classification(True, s.rule, "E", "m", ErrorSource.LOG, s.cause, s.next_step, False)
        assert not promise.search(_failing_advice(c, cause=False)), (s.rule, s.next_step)
