"""Context a log tail lacks (issue 26): where it changes the verdict, and that the reason names it."""

from __future__ import annotations

import pytest

from core.classify import FailureInput, classify_failure
from core.failcontext import FailureContext, with_context
from core.failpoint import failure_point
from core.flags import FaultToleranceConfig
from core.kinds import Kind, verdict_of
from core.policy import Action, InstanceFailure, JobHistory, decide

BUG = "step 3\nTraceback (most recent call last):\nValueError: shapes (3,4) and (5,6) not aligned\n"
CONFIG = FaultToleranceConfig(enable_job_restart=True)


def _decide(c, context, log=BUG):
    t = InstanceFailure("worker-0", "Worker", 0, context.node, c, point=failure_point(log, c.evidence), context=context)
    return decide(CONFIG, JobHistory(total_worker_instances=1, failed_worker_instances_now=1), t)


def test_other_jobs_failing_on_the_node_in_the_same_minute_make_a_bug_one_probe():
    c = classify_failure(FailureInput(1, None, BUG))
    assert verdict_of(c).kind == Kind.DETERMINISTIC
    alone = _decide(c, FailureContext(attempt=1, node="n7"))
    assert alone.action == Action.FAIL_JOB
    assert "(Context: attempt 1, failed at step 3, on n7.)" in alone.reason
    event = _decide(c, FailureContext(attempt=1, node="n7", other_jobs_failing=2))
    assert (event.action, event.kind) == (Action.RESTART_JOB, "ambiguous")
    assert "2 other jobs failed on n7 within the same minute: an infrastructure event" in event.reason
    assert "retrying once to tell" in event.reason


def test_a_node_with_a_bad_record_makes_an_exit_status_only_crash_one_probe():
    # no signature: the exit status decided (a segfault; an unexplained exit code 1 is itself
    # ambiguous by the calibration batch's reports, so the node cannot change it)
    c = classify_failure(FailureInput(None, 11, "step 3\n"))
    assert c.evidence == "" and verdict_of(c).kind == Kind.DETERMINISTIC
    record = "3 retryable faults in the last 24 h across 2 jobs: CUDA_ECC x3"
    flagged = FailureContext(attempt=2, node="n7", previous_node="n3", node_flagged=True, node_record=record)
    d = _decide(c, flagged, "step 3\n")
    assert d.action == Action.RESTART_JOB
    assert "on n7 (n3 last time)" in d.reason and f"n7 has {record}" in d.reason
    # a bug with its own line is the code's, whatever the node's record
    assert _decide(classify_failure(FailureInput(1, None, BUG)), flagged).action == Action.FAIL_JOB


def test_a_backend_reason_is_never_overridden():
    c = classify_failure(FailureInput(None, None, "", backend_reason="ImagePullBackOff: manifest unknown"))
    v = verdict_of(c)
    assert with_context(v, c, FailureContext(node="n7", other_jobs_failing=5)) is v


@pytest.mark.parametrize("field, value", [("attempt", 0), ("attempt", True), ("other_jobs_failing", -1)])
def test_malformed_context_is_rejected_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        FailureContext(**{field: value})
