"""Replica groups (issue 30): the layout of ranks into groups, and the restart decision for
a failed group: that group alone, within the same budgets, with a failure at one position of
one group counted as a failure at that position of every group."""

from __future__ import annotations

import pytest

from core.classify import FailureInput, classify_failure
from core.flags import parse_flags
from core.policy import Action, InstanceFailure, JobHistory, PreviousFailure, Step, decide
from core.replicas import GroupLayout, kept_training, layout_error

NCCL_TAIL = (
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
)
GROUPS = parse_flags("--replica-groups=3 --fault-tolerant-policy=ExitCodeAndErrorMsg --max-num-of-same-error=2")


def test_six_ranks_in_three_groups_split_in_rank_order():
    layout = GroupLayout(3, 6)
    assert [layout.group_of(r) for r in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [layout.rank_in_group(r) for r in range(6)] == [0, 1, 0, 1, 0, 1]
    assert list(layout.members(1)) == [2, 3]
    assert layout.counterparts(3) == (1, 5)
    with pytest.raises(ValueError):
        GroupLayout(4, 6)


def test_a_layout_that_does_not_divide_or_a_job_that_is_not_pytorch_is_named():
    assert layout_error(0, 5, "TFJob") is None
    assert layout_error(2, 4, "PyTorchJob") is None
    assert "does not divide the job's 5 instances" in layout_error(2, 5, "PyTorchJob")
    assert "for a PyTorchJob only" in layout_error(2, 4, "TFJob")


def test_the_other_groups_are_named_as_kept_training():
    assert kept_training(3, 1) == "groups 0 and 2"
    assert kept_training(2, 0) == "group 1"
    assert kept_training(4, 3) == "groups 0, 1 and 2"


def failure(index: int, group: int, counterparts) -> InstanceFailure:
    c = classify_failure(FailureInput(1, None, NCCL_TAIL))
    return InstanceFailure(f"worker-{index}", "Worker", index, "node-a", c, group=group, counterparts=counterparts)


def test_a_failed_group_restarts_alone_even_in_a_sync_job_without_whole_job_restarts():
    d = decide(GROUPS, JobHistory(), failure(1, 1, (("Master", 0), ("Worker", 1))))
    assert d.action == Action.RESTART_GROUP and d.step == Step.GROUP_RESTART
    assert d.reason.startswith("Group 1 restarted alone; groups 0 and 2 kept training: worker-1 failed with")


def test_the_same_error_cap_counts_the_same_position_in_every_group():
    t = failure(3, 2, (("Master", 0), ("Worker", 1)))
    rule = t.classification.rule
    # Once in group 0 and once in group 1 at that position: the third, in group 2, is over the cap of 2.
    h = JobHistory(same_error_counts={(rule, "Master", 0): 1, (rule, "Worker", 1): 1})
    d = decide(GROUPS, h, t)
    assert d.action == Action.FAIL_JOB and d.step == Step.SAME_ERROR_LIMIT
    assert "3 times on worker-3 and its counterparts in the other replica groups" in d.reason
    # Per instance it would have been the first.
    alone = InstanceFailure(t.instance, t.role, t.index, t.node, t.classification, group=2)
    assert decide(GROUPS, h, alone).action == Action.RESTART_GROUP


def test_a_failure_that_another_group_had_at_the_same_step_is_a_bug_in_all():
    t = failure(3, 2, (("Master", 0), ("Worker", 1)))
    rule = t.classification.rule
    seen = PreviousFailure(rule, "Worker", 1, step=40, progress_since=True, step_now=40)
    d = decide(GROUPS, JobHistory(instance_failures=(seen,)), t)
    assert d.action == Action.FAIL_JOB and d.step == Step.REPEATED_FAILURE
    moved_on = PreviousFailure(rule, "Worker", 1, step=40, progress_since=True, step_now=55)
    assert decide(GROUPS, JobHistory(instance_failures=(moved_on,)), t).action == Action.RESTART_GROUP
