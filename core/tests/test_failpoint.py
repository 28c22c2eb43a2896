"""Failure points (issue 26): where a failure happened, and when two are the same fault at the same point."""

from __future__ import annotations

import pytest

from core.classify import FailureInput, classify_failure
from core.failpoint import (
    FailurePoint,
    JobProgress,
    Phase,
    failure_point,
    job_progress,
    last_logged_position,
    last_logged_step,
    normalise,
    shows_progress,
)
from core.flags import FaultToleranceConfig
from core.policy import REPEATED_FAILURE_REASON, Action, InstanceFailure, JobHistory, PreviousFailure, Step, decide

TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/tmp/train.py", line 9, in <module>\n'
    "RuntimeError: rank 3 (pid 4412) saw a bad batch at 0x7f3a9c0012f0\n"
)


def test_the_last_step_comes_from_the_log_s_step_lines_without_the_sdk():
    tail = "step 1 loss=2.0\nStep 2/10 loss 1.9\niteration: 3\n" + TRACE
    assert last_logged_step(tail) == 3
    assert last_logged_step("no progress here\n") is None
    point = failure_point(tail, "RuntimeError: x")
    assert (point.step, point.phase) == (3, Phase.TRAINING)


def test_the_sdk_s_step_wins_and_a_silent_start_is_the_startup_phase():
    assert failure_point("step 3\n", "e", sdk_step=7).step == 7
    startup = failure_point("Loading model...\n" + TRACE, "e")
    assert (startup.step, startup.phase) == (None, Phase.STARTUP)
    assert failure_point("epoch 2\n", "e").phase == Phase.TRAINING  # progress that names no step
    assert failure_point("", "e", sdk_progress=True).phase == Phase.TRAINING


def test_evidence_is_compared_without_what_changes_between_runs():
    a = "2026-12-03T10:00:01Z RuntimeError: rank 3 (pid 4412) saw a bad batch at 0x7f3a9c0012f0"
    b = "2026-12-04T11:22:33Z RuntimeError: rank 3 (pid 981) saw a bad batch at 0x55aa00"
    assert normalise(a) == normalise(b)
    assert normalise(a) != normalise("RuntimeError: CUDA error: an illegal memory access")


@pytest.mark.parametrize(
    "before, now, repeated",
    [
        ((40, Phase.TRAINING), (40, Phase.TRAINING), True),  # the same step
        ((40, Phase.TRAINING), (12, Phase.TRAINING), True),  # earlier
        ((40, Phase.TRAINING), (41, Phase.TRAINING), False),  # past it: a new fault
        ((None, Phase.STARTUP), (None, Phase.STARTUP), True),
        ((40, Phase.TRAINING), (None, Phase.STARTUP), True),  # earlier: it did not even start
        ((None, Phase.STARTUP), (3, Phase.TRAINING), False),  # it trained this time
        ((None, Phase.TRAINING), (None, Phase.TRAINING), True),  # training both times, no step to tell
    ],
)
def test_the_same_evidence_at_the_same_or_an_earlier_point_repeats(before, now, repeated):
    p = FailurePoint(before[0], before[1], "RuntimeError: bad batch 3")
    q = FailurePoint(now[0], now[1], "RuntimeError: bad batch 4")
    assert q.repeats(p) is repeated
    assert not FailurePoint(now[0], now[1], "OSError: other").repeats(p)


def test_a_checkpoint_resumed_rerun_failing_at_the_old_step_is_the_same_point():
    first = failure_point("".join(f"step {n}\n" for n in range(1, 101)) + TRACE, "RuntimeError: boom")
    resumed = failure_point("".join(f"step {n}\n" for n in range(60, 101)) + TRACE, "RuntimeError: boom")
    assert (first.step, resumed.step) == (100, 100) and resumed.repeats(first)


def test_a_malformed_point_is_rejected_naming_the_field():
    with pytest.raises(ValueError, match="step"):
        FailurePoint(-1, Phase.TRAINING, "")
    with pytest.raises(ValueError):
        FailurePoint(1, "sleeping", "")
    with pytest.raises(ValueError, match="evidence"):
        FailurePoint(1, Phase.TRAINING, None)


def _decide(c, point, previous_point, node="node-a", previous_node="node-a"):
    previous = PreviousFailure(rule=c.rule, role="Worker", index=0, point=previous_point, node=previous_node)
    return decide(
        FaultToleranceConfig(enable_job_restart=True, max_num_of_job_restart=3),
        JobHistory(total_worker_instances=1, failed_worker_instances_now=1, previous_failure=previous),
        InstanceFailure("worker-0", "Worker", 0, node, c, point=point),
    )


def test_the_guard_stops_a_step_line_job_that_never_imports_the_sdk_at_its_second_identical_failure():
    # A bug the catalog reads as transient (a connection reset in the user's own code).
    log = "step 1\nstep 2\nConnectionResetError: [Errno 104] Connection reset by peer\n"
    c = classify_failure(FailureInput(1, None, log))
    assert c.retryable
    point = failure_point(log, c.evidence)
    d = _decide(c, point, point)
    assert (d.action, d.step) == (Action.FAIL_JOB, Step.REPEATED_FAILURE)
    assert REPEATED_FAILURE_REASON in d.reason and "at step 2" in d.reason
    further = failure_point(log.replace("step 2\n", "step 2\nstep 3\n"), c.evidence)
    assert _decide(c, further, point).action == Action.RESTART_JOB  # past the last point: decided afresh


def test_a_preemption_reported_by_the_backend_on_another_node_is_not_a_repeat():
    c = classify_failure(FailureInput(None, None, "", backend_reason="Evicted"))
    point = FailurePoint(None, Phase.STARTUP, c.evidence)
    assert _decide(c, point, point, node="node-b").action == Action.RESTART_JOB
    # the same node taken away at the same point again: the guard judges it
    assert _decide(c, point, point).step == Step.REPEATED_FAILURE


def test_a_whole_job_restart_s_root_cause_repeats_on_whichever_rank_fails_first():
    # every rank runs the same code: the same bug at the same step is the same fault on another rank
    c = classify_failure(FailureInput(1, None, "step 4\nConnectionResetError: [Errno 104] Connection reset by peer\n"))
    point = failure_point("step 4\n", c.evidence)
    previous = PreviousFailure(rule=c.rule, role="Master", index=0, point=point, node="node-a")
    config = FaultToleranceConfig(enable_job_restart=True)
    failing = InstanceFailure("worker-0", "Worker", 0, "node-a", c, point=point)
    history = JobHistory(total_worker_instances=1, failed_worker_instances_now=1, previous_failure=previous)
    assert decide(config, history, failing).step == Step.REPEATED_FAILURE
    # an instance restarted alone (Async) is compared with its own previous failure only
    own = PreviousFailure(rule=c.rule, role="Worker", index=1, point=point, node="node-a")
    alone = JobHistory(total_worker_instances=2, failed_worker_instances_now=1, instance_failures=(own,))
    assert decide(config, alone, failing).action == Action.RESTART_JOB
    assert (
        PreviousFailure(rule=c.rule, role="Worker", index=1, point=point).repeated_by(c.rule, "Worker", 0, point)
        is False
    )


def test_a_rank_that_prints_no_step_fails_at_the_jobs_step_from_its_peers_logs():
    # DDP as people write it: rank 0 prints the steps, the rank that fails prints only its traceback
    rank2 = TRACE
    peers = job_progress(["step=1 loss=0.5\nstep=2 loss=0.4\nstep=3 loss=0.3\n", "", rank2, "epoch 1\n"])
    assert peers == JobProgress(step=3, trained=True)
    first = failure_point(rank2, "RuntimeError: boom", job=peers)
    assert (first.step, first.phase) == (3, Phase.TRAINING)
    # the same error after the job trained further is a new fault, not the same one again
    later = failure_point(rank2, "RuntimeError: boom", job=job_progress(["step=9\n", rank2]))
    assert not later.repeats(first) and later.describe() == "at step 9"
    # at the same step again: the same fault
    assert failure_point(rank2, "RuntimeError: boom", job=peers).repeats(first)
    # its own step lines and the SDK's step come first
    assert failure_point("step 2\n" + rank2, "e", job=peers).step == 2
    assert failure_point(rank2, "e", sdk_step=5, job=peers).step == 5
    # no rank trained: before the first progress, whatever the peers' logs hold
    idle = failure_point(rank2, "e", job=job_progress(["Loading model...\n", rank2]))
    assert (idle.step, idle.phase) == (None, Phase.STARTUP)


def _corpus_log(entry_id: str) -> str:
    """A real failure log of the corpus (monitoring/corpus/*.jsonl; each entry names its source)."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "monitoring" / "corpus"
    for path in sorted(root.glob("**/*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry["id"] == entry_id:
                return entry["log"]
    raise LookupError(entry_id)


@pytest.mark.parametrize(
    ("entry_id", "step"),
    [
        # MAE's metric logger, "Epoch: [8]  [ 200/2293]" (github.com/LTH14/mar/issues/69): 8 x 2293 + 200
        ("nan-001", 18544),
        # Hugging Face Trainer's bar under DeepSpeed, no description, a log line run on after it
        # (github.com/ymcui/Chinese-LLaMA-Alpaca/issues/534)
        ("nan-018", 382),
        # Keras: "Epoch 2/30", then "1883/3455 [====>...]" (github.com/bricewalker/Hey-Jetson/issues/7)
        ("nan-023", 2 * 3455 + 1883),
        # Keras with no epoch line in the tail (github.com/matterport/Mask_RCNN/issues/1162)
        ("nan-020", 9),
        # bars that are not training: a test set prepared, labels loaded, a Ray Data map
        ("collective-timeout-007", None),
        ("signals-705", None),
        ("storage-602", None),
    ],
)
def test_where_training_was_is_read_from_the_progress_formats_of_real_logs(entry_id, step):
    assert last_logged_step(_corpus_log(entry_id)) == step


def test_lightnings_bar_is_read_and_its_validation_bar_is_not():
    # github.com/Lightning-AI/pytorch-lightning/issues/14094 (its first lines, as posted)
    tail = (
        "Validation DataLoader 0:  46%|██████████████████████████                              | 73/157 [00:02<00:02, 37.48it/s]\n"
        "Epoch 0:  92%|█████████████████████████████████▉   | 932/1016 [00:33<00:03, 27.70it/s, loss=0.223, v_num=77, acc=0.875]\n"
        "Validation DataLoader 0:  50%|███████████████████████████▊                            | 78/157 [00:02<00:02, 38.79it/s]\n"
    )
    assert last_logged_step(tail) == 932
    point = failure_point(tail, "e")
    assert (point.step, point.phase) == (932, Phase.TRAINING)


def test_a_bar_drawn_without_a_terminal_behind_mpiruns_prefix_and_syslogs_escapes_is_read():
    # github.com/aws-samples/sagemaker-distributed-training-workshop/issues/6 (SageMaker, mpirun)
    tail = (
        "[1,mpirank:0,algo-1]<stdout>:#015Validation DataLoader 0: 100% 1/1 [00:00<00:00, 1113.73it/s]#033[A\n"
        "[1,mpirank:0,algo-1]<stdout>:#015Epoch 0:   0% 0/2 [00:00<?, ?it/s, loss=2.29, v_num=0, val_acc=0.166]"
        "        #015Epoch 1:   0% 0/2 [00:00<?, ?it/s, loss=2.29, v_num=0, val_acc=0.166]\n"
        "[1,mpirank:0,algo-1]<stdout>:#015Epoch 1:  50% 1/2 [00:00<00:00, 35.14it/s, loss=2.29, v_nu\n"
    )
    assert last_logged_step(tail) == 1 * 2 + 1
    # a later epoch is further on, whatever its count within the epoch
    first = failure_point("Epoch 0:  92%|███▉ | 932/1016 [00:33<00:03]\n", "RuntimeError: boom")
    later = failure_point("Epoch 1:   5%|▌ | 51/1016 [00:02<00:33]\n", "RuntimeError: boom")
    assert later.step > first.step and not later.repeats(first)


def test_the_classic_epoch_and_step_of_total_line_is_a_global_step():
    # the line yunjey/pytorch-tutorial's loops print ('Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}',
    # tutorials/01-basics/feedforward_neural_network/main.py), a format copied into many public
    # training scripts; here with its numbers filled in
    assert last_logged_step("Epoch [2/5], Step [100/600], Loss: 0.2431\n") == 2 * 600 + 100
    assert last_logged_step("step 12/500 loss 0.3\n") == 12


# A training log saved whole in somethingpluto/security_front, src/utils/readFile.js (commit
# c062ee91): 50 steps an epoch, counted again from 0 in each, no total printed.
PER_EPOCH_STEPS = (
    "Epoch:  1 step: 48 loss: 9.84\n"
    "Epoch:  1 step: 49 loss: 9.80\n"
    "\n"
    "Epoch 1 finished !\n"
    "Start evaluating...\n"
    "Evaluation result: p: 0.37 r: 0.45 f1: 0.41\n"
    "********************************\n"
    "Epoch:  2 step:  0 loss: 9.82\n"
    "Epoch:  2 step:  1 loss: 9.80\n"
)


def test_a_step_counted_again_each_epoch_is_ordered_by_its_epoch():
    assert last_logged_position(PER_EPOCH_STEPS) == (2, 1)
    assert last_logged_step(PER_EPOCH_STEPS) == 1
    error = "RuntimeError: NCCL communicator was aborted on rank 1."
    before = failure_point(PER_EPOCH_STEPS.split("Epoch 1 finished")[0] + error, error)
    now = failure_point(PER_EPOCH_STEPS + error, error)
    assert (before.epoch, before.step, now.epoch, now.step) == (1, 49, 2, 1)
    # step 1 of epoch 2 is past step 49 of epoch 1: a new fault, decided afresh
    assert not now.repeats(before) and before.repeats(now)
    assert now.repeats(now) and now.describe() == "at epoch 2, step 1"
    # litgpt's finetuning scripts print the epoch beside a global count (Lightning-AI/litgpt#1110):
    # the same order either way
    global_count = "Epoch 4 | iter 964 step 964 | loss train: 0.902, val: 1.057 | iter time: 115.27 ms (step)\n"
    assert last_logged_position(global_count) == (4, 964)
    # the job's point from its ranks' logs is the furthest by (epoch, step)
    assert job_progress([PER_EPOCH_STEPS, "Epoch:  1 step: 49 loss: 9.80\n"]) == JobProgress(
        step=1, trained=True, epoch=2
    )
    # a point with no epoch (the SDK's step, an old record) is compared by the step alone
    assert FailurePoint(3, Phase.TRAINING, error).repeats(FailurePoint(5, Phase.TRAINING, error, epoch=1))
    with pytest.raises(ValueError, match="epoch"):
        FailurePoint(1, Phase.TRAINING, "", epoch=-1)


@pytest.mark.parametrize(
    ("entry_id", "trained"),
    [
        ("gpu-015", True),  # Hugging Face Trainer's dicts, "'epoch': 0.4", behind pdsh's host prefix
        ("nan-001", True),  # MAE's metric logger
        ("nan-018", True),  # Hugging Face Trainer's bar
        ("nan-020", True),  # a Keras bar
        ("signals-705", False),  # labels loaded, then it failed: start-up
        ("collective-timeout-007", False),  # a test set prepared
        ("storage-602", False),  # a Ray Data map
    ],
)
def test_progress_is_seen_in_the_formats_real_loops_print_and_not_in_loading_bars(entry_id, trained):
    # what ends an attempt's start-up interval and counts an attempt as having trained
    assert shows_progress(_corpus_log(entry_id)) is trained


def test_the_log_readers_patterns_never_backtrack_over_a_run_of_spaces():
    # A job's own log is their input, read on every tick: "step" followed by 60,000 spaces
    # took a minute with "\s*[=:#]?\s*" (each split of the run tried) and well over five with
    # three such runs. Every run of spaces is matched possessively ("\s*+"), which keeps each
    # search linear in the line.
    import re as _re

    from core import failpoint, progress, stragglers

    unbounded = _re.compile(r"\\s[*+](?!\+)")
    for module in (failpoint, progress, stragglers):
        for name, value in vars(module).items():
            if isinstance(value, _re.Pattern) and value.pattern != r"\s+":
                assert not unbounded.search(value.pattern), f"{module.__name__}.{name}: {value.pattern}"
    # and the readings are the same with any amount of space
    assert last_logged_step("step" + " " * 60_000 + "x\nstep  =  12\n") == 12
    assert shows_progress("Epoch" + " " * 60_000 + "\n") is False
