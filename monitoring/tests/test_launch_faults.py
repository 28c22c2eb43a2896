"""A monitor killed at every step of a whole-job restart, with real parts.

A 2-rank PyTorch job on the real local backend fails once (rank 1, an NCCL
error). Its restart tick runs in a process of its own (the Celery task as a
worker runs it, job lock included) with VIGIL_FAULT_POINT naming one step of the
restart and launch sequence (jobs.faults); the process SIGKILLs its group there.
Then this process does what the sweep does (monitor ticks, with a 1 s launch
lease and relaunch delay instead of 30 s and 10 s) and checks, at every step:

- one restart record, restart_count 1: the budget is used once;
- exactly two attempts: 1 Failed, 2 Running with both ranks running;
- no orphaned rank: the only processes of the job on this machine are attempt
  2's two ranks and their shims (PIDs from /proc, not from our own records);
- the restart is recorded as succeeded with both instances started;
- the job ends Succeeded once its ranks finish.

F1 (killed after the claim, before attempt.json) and F2 (after attempt.json,
while shims start) of issue 20 are `launch.after_claim` and
`launch.after_attempt_json` / `launch.after_shim_start`. Runs on SQLite and on
PostgreSQL (DATABASE_URL).
"""

from __future__ import annotations

import textwrap
import time

import psutil
import pytest

from jobs import faults
from jobs.backends.base import InstanceState
from jobs.models import Attempt, AttemptStatus, Instance, InstanceStatus, Job, JobEvent, JobStatus, RestartRecord
from jobs.models import RestartResult
from monitoring import restarts, tick

from .cluster import submit_script_job, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

FAULTS = [
    "restart.after_decision",
    "restart.after_stop",
    "launch.after_db_claim",
    "launch.after_claim",  # F1
    "launch.after_spec",
    "launch.after_attempt_json",  # F2: no shim started yet
    "launch.after_shim_start",  # F2: the first shim started, the second not
    "launch.after_shim_ready",
    "launch.after_launched",
    "launch.after_handle_stored",
]
# Rank 1 fails once with an NCCL error (retryable); otherwise every rank prints a step
# every 0.1 s until the DONE file exists, then exits 0.
TRAIN = textwrap.dedent("""
    import os, sys, time
    rank = int(os.environ["RANK"])
    if rank == 1:
        try:
            os.close(os.open(os.environ["FAULT_ONCE"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            time.sleep(0.3)
            sys.stderr.write("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, "
                             "unhandled system error, NCCL version 2.18.1\\n")
            sys.exit(1)
        except FileExistsError:
            pass
    step = 0
    while not os.path.exists(os.environ["DONE"]):
        step += 1
        print(f"step={step} rank={rank} attempt={os.environ.get('VIGIL_ATTEMPT')}", flush=True)
        time.sleep(0.1)
""")


def submit(cluster, user, workspace) -> Job:
    return submit_script_job(
        cluster,
        user,
        workspace,
        TRAIN,
        {"DONE": str(cluster.tmp_path / "done"), "CRASH_TEST": str(cluster.tmp_path)},
        "fault-point",
    )


def job_processes(cluster) -> set[int]:
    """Every live process on this machine that belongs to the test's job: ranks by their
    environment, shims by their command line."""
    found = set()
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(str(cluster.data_dir) in a for a in p.info["cmdline"] or ()) or p.environ().get("CRASH_TEST") == str(
                cluster.tmp_path
            ):
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


def attempt_processes(cluster, handle) -> set[int]:
    import json
    from pathlib import Path

    pids = set()
    for inst in handle["instances"]:
        state = json.loads((Path(handle["dir"]) / inst["name"] / "state.json").read_text())
        pids |= {state["shim_pid"], state["child_pid"]}
    return pids


def run_tick(job):
    tick.run_job(job.pk)


def second_attempt_runs(cluster, job):
    run_tick(job)
    a = Attempt.objects.filter(job=job, number=2).first()
    if a is None or a.status != AttemptStatus.RUNNING or not a.backend_handle:
        return None
    states = [s.state for s in cluster.backend.poll(a.backend_handle)]
    return a if states and all(s == InstanceState.RUNNING for s in states) else None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_monitor_killed_at_any_step_of_a_restart_leaves_one_running_attempt_and_one_restart(
    cluster, alice, alice_ws, settings, fault
):
    settings.VIGIL_LAUNCH_LEASE_SECONDS = 1.0
    settings.VIGIL_RELAUNCH_AFTER_SECONDS = 1.0
    cluster.env["VIGIL_RESTART_GRACE_SECONDS"] = "2"
    job = submit(cluster, alice, alice_ws)
    first = Attempt.objects.get(job=job, number=1)
    assert first.backend_handle, f"attempt 1 was not launched: {first.reason}"
    failed = wait_until(
        lambda: next((s for s in cluster.backend.poll(first.backend_handle) if s.state == InstanceState.FAILED), None),
        20,
        "rank 1 of attempt 1 to fail",
    )
    # Past the window in which a lone NCCL error waits for its real cause (the tick would decide nothing).
    time.sleep(max(0.0, failed.exited_at + restarts.CASCADE_SETTLE_SECONDS + 0.2 - time.time()))

    cluster.tick_killed_at(job.pk, fault)
    assert RestartRecord.objects.filter(job=job).count() == 1  # the decision committed before any fault point

    second = wait_until(lambda: second_attempt_runs(cluster, job), 40, "attempt 2 to run with both ranks", every=0.2)
    job.refresh_from_db()
    assert (job.status, job.current_attempt, job.restart_count) == (JobStatus.RUNNING, 2, 1)
    assert list(Attempt.objects.filter(job=job).values_list("number", "status")) == [
        (1, AttemptStatus.FAILED),
        (2, AttemptStatus.RUNNING),
    ]
    assert RestartRecord.objects.filter(job=job).count() == 1
    # No orphan: attempt 1's ranks are gone, and so is anything a half-launch started.
    live = attempt_processes(cluster, second.backend_handle)
    wait_until(lambda: job_processes(cluster) == live, 10, "only attempt 2's ranks and shims to be left", every=0.2)
    # Attempt 1's ranks kept what they really did.
    old = {i.name: i for i in Instance.objects.filter(attempt=first)}
    assert (old["worker-0"].status, old["worker-0"].exit_code) == (InstanceStatus.FAILED, 1)
    assert old["master-0"].status == InstanceStatus.STOPPED

    run_tick(job)
    record = RestartRecord.objects.get(job=job)
    assert record.result == RestartResult.SUCCEEDED
    assert (
        JobEvent.objects.filter(
            job=job, message__startswith="Restart 1 succeeded: all 2 instances of attempt 2 started"
        ).count()
        == 1
    )
    wait_until(
        lambda: all(
            b"attempt=2" in cluster.backend.tail_log(second.backend_handle, n, 4096) for n in ("master-0", "worker-0")
        ),
        15,
        "both ranks of attempt 2 to log a step",
    )

    (cluster.tmp_path / "done").touch()
    wait_until(
        lambda: run_tick(job) or Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED,
        20,
        "the job to succeed",
        every=0.2,
    )
    assert Attempt.objects.get(job=job, number=2).status == AttemptStatus.SUCCEEDED
    assert RestartRecord.objects.filter(job=job).count() == 1 and Attempt.objects.filter(job=job).count() == 2
    wait_until(lambda: not job_processes(cluster), 10, "every process of the job to end")


# Async: worker-1 fails once; every instance prints steps until DONE exists.
TRAIN_ASYNC = textwrap.dedent("""
    import os, sys, time
    name = os.environ["VIGIL_INSTANCE"]
    if name == "worker-1":
        try:
            os.close(os.open(os.environ["FAULT_ONCE"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            time.sleep(0.3)
            sys.exit(3)
        except FileExistsError:
            pass
    while not os.path.exists(os.environ["DONE"]):
        print(f"step instance={name}", flush=True)
        time.sleep(0.1)
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", faults.INSTANCE_RESTART_POINTS)
def test_a_monitor_killed_while_restarting_one_instance_restarts_it_exactly_once(
    cluster, alice, alice_ws, settings, fault
):
    settings.VIGIL_LAUNCH_LEASE_SECONDS = 1.0
    job = submit_script_job(
        cluster,
        alice,
        alice_ws,
        TRAIN_ASYNC,
        {"DONE": str(cluster.tmp_path / "done"), "CRASH_TEST": str(cluster.tmp_path)},
        "instance-fault",
        job_type="ElasticBatchJob",
        roles=(("Worker", 2),),
        flags="--job-execution-mode=Async --fault-tolerant-policy=OnFailure",
    )
    attempt = Attempt.objects.get(job=job, number=1)
    assert attempt.backend_handle, f"attempt 1 was not launched: {attempt.reason}"
    wait_until(
        lambda: any(
            s.name == "worker-1" and s.state == InstanceState.FAILED
            for s in cluster.backend.poll(attempt.backend_handle)
        ),
        20,
        "worker-1 to fail",
    )

    cluster.tick_killed_at(job.pk, fault)
    record = RestartRecord.objects.get(job=job)
    assert (record.kind, record.instance_name, record.result) == ("instance", "worker-1", RestartResult.PENDING)

    def restarted():
        run_tick(job)
        a = Attempt.objects.get(pk=attempt.pk)
        states = {s.name: s.state for s in cluster.backend.poll(a.backend_handle)}
        return (
            RestartRecord.objects.get(pk=record.pk).result == RestartResult.SUCCEEDED
            and set(states.values()) == {InstanceState.RUNNING}
            and a
        )

    current = wait_until(restarted, 30, "worker-1 to run again with its restart recorded", every=0.2)
    job.refresh_from_db()
    assert (job.status, job.current_attempt, job.restart_count) == (JobStatus.RUNNING, 1, 1)
    assert RestartRecord.objects.filter(job=job).count() == 1
    worker = Instance.objects.get(attempt=attempt, name="worker-1")
    assert (worker.status, worker.restarts, worker.handled_exit_key) == (InstanceStatus.RUNNING, 1, "")
    live = attempt_processes(cluster, current.backend_handle)
    wait_until(lambda: job_processes(cluster) == live, 10, "one run of each instance and nothing else", every=0.2)

    (cluster.tmp_path / "done").touch()
    wait_until(
        lambda: run_tick(job) or Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED,
        20,
        "the job to succeed",
        every=0.2,
    )
    assert RestartRecord.objects.filter(job=job).count() == 1 and Job.objects.get(pk=job.pk).restart_count == 1
    wait_until(lambda: not job_processes(cluster), 10, "every process of the job to end")
