"""A monitor worker dies where it hurts most, with real parts: a real Celery worker
process (solo pool) on the real Redis, the test database, and the real local
backend running real instance processes.

The window: a whole-job restart is decided (RestartRecord, Attempt n+1 and the
events are committed), the worker then tears the old attempt down and launches
the new one. The old attempt's processes here ignore SIGTERM, so the teardown
takes VIGIL_RESTART_GRACE_SECONDS; the test SIGKILLs the worker inside it, brings
a worker back with the beat sweep, and checks that exactly one new attempt exists
and runs. It also delivers the same monitor task twice to two workers.

The workers use a Redis database of their own (claimed with SET NX, flushed at
teardown) so their queue never mixes with another run's. Every process started
here is killed by PID at teardown.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from jobs.backends.base import InstanceState
from jobs.models import Attempt, AttemptStatus, Job, JobStatus, RestartRecord

from .cluster import submit_script_job, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


# Rank 1 fails once with an NCCL error (a retryable failure); every other run trains
# "forever", one step line every 0.2 s. With IGNORE_SIGTERM=1 the ranks ignore SIGTERM.
TRAIN = textwrap.dedent("""
    import os, signal, sys, time
    if os.environ.get("IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rank = int(os.environ["RANK"])
    marker = os.environ["FAULT_ONCE"]
    if rank == 1:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            time.sleep(0.3)
            sys.stderr.write("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, "
                             "unhandled system error, NCCL version 2.18.1\\n")
            sys.exit(1)
        except FileExistsError:
            pass
    step = 0
    while True:
        step += 1
        print(f"step={step} rank={rank} attempt={os.environ.get('VIGIL_ATTEMPT')}", flush=True)
        time.sleep(0.2)
""")


def submit_training_job(cluster, user, workspace, *, ignore_sigterm: bool) -> Job:
    return submit_script_job(
        cluster, user, workspace, TRAIN, {"IGNORE_SIGTERM": "1" if ignore_sigterm else "0"}, "crash-window"
    )


def wait_for_first_failure(cluster, job):
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    assert handle, (
        f"attempt 1 was not launched: {Job.objects.get(pk=job.pk).status} {Job.objects.get(pk=job.pk).reason} {Attempt.objects.get(job=job, number=1).reason}"
    )
    wait_until(
        lambda: any(s.state == InstanceState.FAILED for s in cluster.backend.poll(handle)),
        20,
        "rank 1 of attempt 1 to fail",
    )
    return handle


def assert_exactly_one_new_attempt_runs(cluster, job, timeout: float):
    def attempt_2_runs():
        a = Attempt.objects.filter(job=job, number=2).first()
        if a is None or a.status != AttemptStatus.RUNNING or not a.backend_handle:
            return None
        if Job.objects.get(pk=job.pk).status != JobStatus.RUNNING:  # set just after the attempt's status
            return None
        states = [s.state for s in cluster.backend.poll(a.backend_handle)]
        return a if states and all(s == InstanceState.RUNNING for s in states) else None

    new = wait_until(attempt_2_runs, timeout, "attempt 2 to run with every instance", every=0.25)
    job.refresh_from_db()
    assert job.current_attempt == 2 and job.status == JobStatus.RUNNING
    assert Attempt.objects.filter(job=job).count() == 2
    assert RestartRecord.objects.filter(job=job).count() == 1
    old = Attempt.objects.get(job=job, number=1)
    wait_until(
        lambda: all(s.state.finished for s in cluster.backend.poll(old.backend_handle)),
        15,
        "every rank of attempt 1 to be gone",
    )
    attempt_dirs = sorted(p.name for p in Path(new.backend_handle["dir"]).parent.iterdir() if p.name != "work")
    assert attempt_dirs == ["attempt-1", "attempt-2"], attempt_dirs  # launched once, never half-launched aside
    # The new attempt trains: both ranks print steps of attempt 2.
    wait_until(
        lambda: all(
            b"attempt=2" in cluster.backend.tail_log(new.backend_handle, n, 4096) for n in ("master-0", "worker-0")
        ),
        15,
        "both ranks of attempt 2 to log a step",
    )


# Needs about 30 s: two Celery worker start-ups, the teardown grace the kill lands in, the
# dead worker's Redis lock on the job (monitoring.tasks.LOCK_SECONDS), which makes every
# sweep skip the job until it expires, and RELAUNCH_AFTER before recover() re-launches.
@pytest.mark.timeout(180)
def test_worker_killed_between_restart_decision_and_launch_leaves_exactly_one_running_attempt(cluster, alice, alice_ws):
    job = submit_training_job(cluster, alice, alice_ws, ignore_sigterm=True)
    wait_for_first_failure(cluster, job)
    first = cluster.start_worker("first")
    cluster.send("monitoring.tasks.run_job", job.pk)  # what the exit listener sends
    t0 = time.monotonic()

    record = wait_until(lambda: RestartRecord.objects.filter(job=job).first(), 60, "the restart decision")
    print(f"decision {time.monotonic() - t0:.1f} s after the task was sent")
    # The decision is committed; the worker is now inside the old attempt's teardown.
    time.sleep(0.5)
    assert first.poll() is None, first.log_path.read_text()[-3000:]
    second_attempt = Attempt.objects.get(job=job, number=2)
    assert not second_attempt.backend_handle, "the worker launched attempt 2 before it could be killed"
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    killed_at = time.monotonic()

    assert record.new_attempt == 2
    assert Attempt.objects.get(job=job, number=1).status == AttemptStatus.STOPPING  # teardown interrupted
    assert Attempt.objects.get(job=job, number=2).status == AttemptStatus.QUEUING

    cluster.start_worker("second", beat=True)  # the sweep finishes the dead worker's work
    assert_exactly_one_new_attempt_runs(cluster, job, timeout=110)
    print(f"attempt 2 ran {time.monotonic() - killed_at:.1f} s after the worker was killed")
    assert list(Attempt.objects.filter(job=job).values_list("number", "status")) == [
        (1, AttemptStatus.FAILED),
        (2, AttemptStatus.RUNNING),
    ]


@pytest.mark.timeout(120)
def test_the_same_monitor_task_delivered_twice_to_two_workers_restarts_once(cluster, alice, alice_ws):
    job = submit_training_job(cluster, alice, alice_ws, ignore_sigterm=False)
    wait_for_first_failure(cluster, job)
    cluster.start_worker("left")
    cluster.start_worker("right")
    cluster.send("monitoring.tasks.run_job", job.pk)
    cluster.send("monitoring.tasks.run_job", job.pk)
    assert_exactly_one_new_attempt_runs(cluster, job, timeout=60)
    # A late third delivery of the same exit changes nothing.
    cluster.send("monitoring.tasks.run_job", job.pk)
    wait_until(lambda: cluster.tasks_done("monitoring.tasks.run_job") >= 3, 20, "the third delivery to be processed")
    assert Attempt.objects.filter(job=job).count() == 2
    assert RestartRecord.objects.filter(job=job).count() == 1


def sweeps_done(worker) -> int:
    return sum(
        1
        for line in worker.log_path.read_text(errors="replace").splitlines()
        if "Task monitoring.tasks.sweep[" in line and " succeeded in " in line
    )


# Two workers sweep every shard (one beat, both take shard tasks); whichever decides the
# restart dies right after the decision commits, mid-tick, holding its shard's lease.
# The survivor takes the shard once the lease (2 s here) runs out and finishes the work.
@pytest.mark.timeout(180)
def test_two_workers_sweeping_the_same_shards_one_killed_mid_tick_restart_once(cluster, alice, alice_ws):
    crash = {
        "VIGIL_FAULT_POINT": "restart.after_decision",
        "VIGIL_FAULT_ONCE": str(cluster.tmp_path / "died"),
        "VIGIL_MONITOR_LEASE_SECONDS": "2",
        "VIGIL_RELAUNCH_AFTER_SECONDS": "2",
    }
    cluster.start_worker("beat", command="beat", extra_env=crash)  # a worker's death must not stop the beat
    workers = [cluster.start_worker(name, extra_env=crash) for name in ("left", "right")]
    wait_until(lambda: all(sweeps_done(w) for w in workers), 90, "both workers to sweep shards", every=0.25)

    job = submit_training_job(cluster, alice, alice_ws, ignore_sigterm=False)
    dead = wait_until(
        lambda: [w for w in workers if w.poll() is not None],
        60,
        "the deciding worker to die at its fault point",
        every=0.1,
    )
    assert (cluster.tmp_path / "died").exists() and len(dead) == 1, [w.log_path.read_text()[-2000:] for w in dead]
    survivor = next(w for w in workers if w not in dead)
    assert RestartRecord.objects.filter(job=job).count() == 1  # the decision committed before the death
    before = sweeps_done(survivor)
    assert_exactly_one_new_attempt_runs(cluster, job, timeout=90)
    assert survivor.poll() is None and sweeps_done(survivor) > before
    assert list(Attempt.objects.filter(job=job).values_list("number", "status")) == [
        (1, AttemptStatus.FAILED),
        (2, AttemptStatus.RUNNING),
    ]
