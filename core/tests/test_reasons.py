"""cause_first: the monitor's decisions, cause first, on the sentences core.policy writes."""

from __future__ import annotations

import pytest

from core import reasons
from core.reasons import cause_first


@pytest.mark.parametrize(
    "reason, shown",
    [
        (
            "Restarting the whole job (restart 1 of 3): worker-0 failed with a retryable error: ECONNRESET "
            "(connection reset by peer).",
            "ECONNRESET on worker-0 — restart 1 of 3",
        ),
        (
            "Restarting the whole job (restart 2 of 5): master-0 is a Master, whose failure needs a whole-job restart "
            "even in Async mode; master-0 failed with an error (every failure qualifies with OnFailure): EXIT_CODE_1 "
            "(exit code 1).",
            "EXIT_CODE_1 on master-0 — restart 2 of 5",
        ),
        (
            "Restarting worker-3 alone: the job runs in Async mode and worker-3 failed with a retryable error: "
            "NCCL_ERROR (NCCL error).",
            "NCCL_ERROR on worker-3 — restarting worker-3 alone",
        ),
        (
            "Not restarted: the job has already been restarted 3 of 3 times (--max-num-of-job-restart=3); worker-1 "
            "failed with NCCL_ERROR (NCCL error: unhandled system error).",
            "NCCL_ERROR on worker-1 — not restarted, restart 3 of 3 used",
        ),
        (
            "Not restarted: worker-0 failed with CUDA_OOM (CUDA out of memory), which a restart cannot fix "
            "(--fault-tolerant-policy=ExitCodeAndErrorMsg). Lower the batch size.",
            "CUDA_OOM on worker-0 — not restarted",
        ),
        (
            "Restarting the whole job (restart 1 of 2): the job hung: all 4 instances were silent for 600 s.",
            "Hang: all 4 instances were silent for 600 s — restart 1 of 2",
        ),
        (
            "The backend could not start attempt 1: no such partition",
            "The backend could not start attempt 1: no such partition",
        ),
        ("", ""),
    ],
)
def test_the_cause_comes_first_and_unknown_wording_is_kept(reason, shown):
    assert cause_first(reason) == shown


def test_it_reads_the_sentences_the_policy_writes():
    """Against core.policy's own wording, not a copy of it: a whole-job restart decided now."""
    from core.policy import FaultToleranceConfig, JobHistory, _whole_job_restart

    decision = _whole_job_restart(
        FaultToleranceConfig(enable_job_restart=True, max_num_of_job_restart=3),
        JobHistory(job_restarts_so_far=0),
        "worker-0 failed with a retryable error: ECONNRESET (connection reset by peer)",
    )
    assert cause_first(decision.reason) == "ECONNRESET on worker-0 — restart 1 of 3"


def test_a_long_evidence_line_is_cut_so_the_decision_stays_in_the_job_lists_cell():
    # issue 28 point 4: the cell shows the failure's own line, but what Vigil did is what the
    # row is for: the cut falls in the evidence, never in "— not restarted, restart 3 of 3 used".
    why = (
        "Not restarted: worker-1 failed with NCCL_ERROR (NCCL error: unhandled system error, NCCL version 2.21.5"
        " (ncclSystemError)). The job has already been restarted 3 of 3 times"
    )
    shown = reasons.cause_first(why, evidence=True)
    assert len(shown) <= reasons.CELL
    assert shown.startswith("NCCL error: ") and "…" in shown
    assert shown.endswith(" on worker-1 — not restarted, restart 3 of 3 used")
