"""Slurm's words parsed without Slurm: job states from squeue, scontrol and sacct,
nodes from sinfo, refusals told transient or permanent."""

from __future__ import annotations

from core.slurm import (
    SlurmJob,
    is_transient,
    job_from_sacct,
    job_from_scontrol,
    job_from_squeue_json,
    nodes_from_sinfo_json,
    nodes_from_sinfo_text,
    srun_task_signal,
)


def test_squeue_json_of_both_generations_gives_state_and_pending_reason():
    old = {
        "jobs": [
            {"job_id": 3, "job_state": "RUNNING", "state_reason": "None"},
            {"job_id": 4, "job_state": "PENDING", "state_reason": "Resources", "nodes": ""},
        ]
    }
    new = {"jobs": [{"job_id": {"set": True, "number": 4}, "job_state": ["PENDING"], "state_reason": "Priority"}]}
    assert job_from_squeue_json(old, "4") == SlurmJob("4", "PENDING", "Resources", "")
    assert job_from_squeue_json(new, "4").reason == "Priority"
    assert job_from_squeue_json(old, "3").reason == ""
    assert job_from_squeue_json(old, "9") is None


def test_scontrol_and_sacct_lines_give_the_job_state():
    line = "JobId=12 JobName=x JobState=NODE_FAIL Reason=None NodeList=n3"
    assert job_from_scontrol(line, "12") == SlurmJob("12", "NODE_FAIL", "", "n3")
    assert job_from_sacct("12|CANCELLED by 0|None|n1,n2\n", "12") == SlurmJob("12", "CANCELLED", "", "n1,n2")


def test_a_node_flagged_not_responding_says_so_until_slurm_gives_its_own_reason():
    data = {
        "nodes": [
            {"name": "n3", "cpus": 8, "state": ["MIXED", "NOT_RESPONDING"], "reason": ""},
            {"name": "n4", "cpus": 8, "state": "down*", "reason": "Not responding"},
            {"name": "n5", "cpus": 8, "state": "down*", "reason": "Vigil: jobs 3"},
        ]
    }
    assert [(n.name, n.schedulable, n.reason) for n in nodes_from_sinfo_json(data)] == [
        ("n3", False, "Not responding"),
        ("n4", False, "Not responding"),
        ("n5", False, "Vigil: jobs 3"),
    ]


def test_drained_and_down_nodes_are_not_schedulable_in_json_and_text():
    data = {
        "nodes": [
            {"name": "a", "cpus": 8, "state": "idle", "state_flags": ["DRAIN"], "reason": "Vigil: job 4"},
            {"name": "b", "cpus": {"set": True, "number": 4}, "state": ["MIXED"], "reason": ""},
        ]
    }
    assert [(n.name, n.slots, n.schedulable) for n in nodes_from_sinfo_json(data)] == [("a", 8, False), ("b", 4, True)]
    text = "a|8|drained|Vigil: job 4\na|8|drained|Vigil: job 4\nb|4|mixed|none\nc|2|idle*|none\n"
    nodes = nodes_from_sinfo_text(text)
    assert [(n.name, n.schedulable, n.reason) for n in nodes] == [
        ("a", False, "Vigil: job 4"),
        ("b", True, ""),
        ("c", False, "Not responding"),  # the flag alone: slurmctld's word for it
    ]


def test_a_lost_node_is_down_and_one_taken_out_on_purpose_is_not():
    data = {
        "nodes": [
            {"name": "a", "cpus": 8, "state": "idle", "state_flags": ["DRAIN"], "reason": "Vigil: job 4"},
            {"name": "b", "cpus": 8, "state": ["MIXED", "NOT_RESPONDING"], "reason": ""},
            {"name": "c", "cpus": 8, "state": "down", "reason": "Not responding"},
            {"name": "d", "cpus": 8, "state": ["IDLE"], "state_flags": ["MAINT"], "reason": ""},
        ]
    }
    assert [(n.name, n.down) for n in nodes_from_sinfo_json(data)] == [
        ("a", False),
        ("b", True),
        ("c", True),
        ("d", False),
    ]
    text = "a|8|drained|Vigil: job 4\nb|8|mixed*|none\nc|8|down*|Not responding\nd|8|idle|none\ne|8|draining|x\n"
    assert [(n.name, n.down) for n in nodes_from_sinfo_text(text)] == [
        ("a", False),
        ("b", True),
        ("c", True),
        ("d", False),
        ("e", False),
    ]


def test_a_job_is_waiting_active_or_unknown_by_its_state():
    assert SlurmJob("1", "PENDING").waiting and SlurmJob("1", "PENDING").active
    assert SlurmJob("1", "RUNNING").active and not SlurmJob("1", "RUNNING").waiting
    assert not SlurmJob("1", "NODE_FAIL").active
    assert not SlurmJob("1", "").known and SlurmJob("1", "COMPLETED").known


def test_an_unreachable_controller_is_transient_and_a_bad_request_is_not():
    assert is_transient("sbatch: error: Batch job submission failed: Unable to contact slurm controller")
    assert is_transient("squeue: error: Socket timed out on send/recv operation")
    assert not is_transient("sbatch: error: Batch job submission failed: Invalid account or account/partition")


# The supervisor's record when the wrapper itself was killed; srun's words as Slurm 22.05 on
# this machine printed them for `kill -KILL $PPID` and `kill -SEGV $PPID` from the instance.
UNREPORTED = "step ended without a report from the instance (srun exit {}): {}"


def test_srun_names_the_signal_that_ended_a_task_when_its_exit_status_agrees():
    assert srun_task_signal(UNREPORTED.format(137, "srun: error: vm: task 0: Killed")) == 9
    assert srun_task_signal(UNREPORTED.format(139, "srun: error: vm: task 0: Segmentation fault")) == 11
    said = "srun: error: n2: task 1: Bus error (core dumped); srun: Terminating StepId=12.3"
    assert srun_task_signal(UNREPORTED.format(135, said)) == 7


def test_srun_words_without_a_matching_signal_status_name_no_signal():
    for code, said in (
        (137, "srun: error: Node failure on n3"),  # the node, not a signal
        (1, "srun: error: vm: task 0: Killed"),  # an exit status, not a signal's
        (135, "srun: error: vm: task 0: Killed"),  # status and words disagree
        (137, ""),  # words lost
        (300, "srun: error: vm: task 0: Killed"),  # no such signal
    ):
        assert srun_task_signal(UNREPORTED.format(code, said)) is None, (code, said)
    assert srun_task_signal("Slurm job 12 ended (FAILED) before this instance reported an exit") is None
