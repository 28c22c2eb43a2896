"""The monitor tick over the in-memory backend: decisions, records, idempotency.
Real processes are in test_monitor_local.py."""

import time

import pytest
import time_machine
from django.utils import timezone

from jobs.models import Attempt, Instance, Job, JobEvent, JobStatus, RestartKind, RestartRecord
from core.classify import ErrorSource
from monitoring import restarts, tasks, tick
from testsupport import factory

pytestmark = pytest.mark.django_db(transaction=True)

SYNC = "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 --fault-tolerant-policy=ExitCodeAndErrorMsg"
ASYNC = "--job-execution-mode=Async --fault-tolerant-policy=OnFailure"
NCCL = b"RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, unhandled system error, NCCL version 2.18.1\n"
BUG = b'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    raise ValueError("bad shape")\nValueError: bad shape\n'


def submit(api, ws, body, args=SYNC, **over):
    return factory.submit(api, ws, flags=args or "", **over)


def settled(job_id):
    """A tick after the cascade settle window (a lone NCCL symptom waits for its cause)."""
    return tick.run_job(job_id, now=timezone.now() + timezone.timedelta(seconds=restarts.CASCADE_SETTLE_SECONDS + 0.5))


def handle_of(job, number=None):
    return Attempt.objects.get(job=job, number=number or Job.objects.get(pk=job.pk).current_attempt).backend_handle


@pytest.fixture
def owner_api(alice_ws, alice, api_as):
    return api_as(alice)


def test_a_launched_job_runs_and_succeeds_when_every_instance_exits_0(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    h = handle_of(job)
    for name in ("master-0", "worker-0"):
        memory_backend.finish(h, name, exit_code=0)
    assert tick.run_job(job.pk).action == "succeeded"
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert set(Instance.objects.filter(attempt__job=job).values_list("status", flat=True)) == {"Succeeded"}


def test_sync_job_restarts_on_a_retryable_error_with_a_full_record(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    memory_backend.write_log(h, "worker-0", b"step=1 loss=0.5\n" + NCCL)
    memory_backend.finish(h, "worker-0", exit_code=1)
    result = settled(job.pk)
    assert result.action == "restart_job", result
    job.refresh_from_db()
    assert job.current_attempt == 2 and job.restart_count == 1
    assert job.status == JobStatus.RUNNING  # attempt 2 launched at once
    record = RestartRecord.objects.get(job=job)
    assert record.kind == "job" and record.attempt == 1 and record.new_attempt == 2
    assert record.instance_name == "worker-0" and record.node_name == "mem-0"
    assert record.error_source == "Log" and record.error_code and "NCCL" in record.error_message
    assert "restart 1 of 3" in record.reason
    # where it failed and the verdict's kind, with its public-report count in the reason (issue 26)
    assert (record.failure_step, record.failure_phase) == (1, "training")
    # the count is the committed table's (core/verdict_counts.json), which grows with the corpus
    from core.kinds import reports_of

    retryable, reports = reports_of(record.rule)
    assert reports and retryable / reports < 0.8  # public reports against the catalog's retry: ambiguous
    assert record.verdict_kind == "ambiguous"
    assert f"ambiguous: transient in {retryable} of {reports} public reports; retrying once" in record.reason
    api = owner_api.get(f"/api/v1/jobs/{job.pk}/restarts/").json()
    row = api["results"][0] if isinstance(api, dict) else api[0]
    assert (row["verdict_kind"], row["failure_step"], row["failure_phase"]) == ("ambiguous", 1, "training")
    old = Attempt.objects.get(job=job, number=1)
    assert old.status == "Failed" and old.made_progress is True and old.ended_at is not None
    assert memory_backend.stopped and memory_backend.stopped[0][1] == 1
    assert JobEvent.objects.filter(job=job, type="restart").count() == 1
    # The new attempt's instances all run: the restart is recorded as succeeded with its duration.
    tick.run_job(job.pk)
    record.refresh_from_db()
    assert record.result == "Succeeded" and record.duration_seconds is not None


def test_sync_job_fails_fast_on_a_user_bug_with_the_cause(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    memory_backend.write_log(h, "master-0", BUG)
    memory_backend.finish(h, "master-0", exit_code=1)
    assert tick.run_job(job.pk).action == "fail_job"
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "ValueError" in job.reason and "cannot fix" in job.reason
    assert job.current_attempt == 1 and not RestartRecord.objects.filter(job=job).exists()
    failed = JobEvent.objects.get(job=job, type="job_failed")
    assert failed.payload["instance"] == "master-0"


def test_the_same_monitor_tick_twice_restarts_once(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    memory_backend.write_log(h, "worker-0", NCCL)
    memory_backend.finish(h, "worker-0", exit_code=1)
    settled(job.pk)
    settled(job.pk)
    from monitoring.tasks import run_job as task

    task.delay(job.pk)  # a re-delivered task
    job.refresh_from_db()
    assert job.current_attempt == 2
    assert Attempt.objects.filter(job=job).count() == 2
    assert RestartRecord.objects.filter(job=job).count() == 1


def test_restart_job_is_compare_and_set_on_the_attempt_number(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    attempt = Attempt.objects.get(job=job, number=1)
    instances = list(attempt.instances.all())
    assert restarts.restart_job(job, attempt, instances, memory_backend, "first", ErrorSource.HANG, message="m")
    stale = Job.objects.get(pk=job.pk)
    stale.current_attempt = 1  # a second worker that read the job before the restart
    assert not restarts.restart_job(stale, attempt, instances, memory_backend, "second", ErrorSource.HANG, message="m")
    assert Attempt.objects.filter(job=job).count() == 2


def test_an_instance_restart_and_a_job_restart_at_once_both_count(alice_ws, owner_api, job_body, memory_backend):
    """restart_count goes up with F() on both paths: a job restart decided from a copy of the job
    read before an instance restart completed does not overwrite that restart's count."""
    job = submit(owner_api, alice_ws, job_body)
    attempt = Attempt.objects.get(job=job, number=1)
    instances = list(attempt.instances.all())
    stale = Job.objects.get(pk=job.pk)  # the job restart's worker read the job here (restart_count 0)
    record = RestartRecord.objects.create(
        job=job,
        number=1,
        kind=RestartKind.INSTANCE,
        attempt=1,
        new_attempt=1,
        instance_name="worker-0",
        idempotency_key=f"instance:{job.pk}:1:worker-0:0",
    )
    restarts.complete_instance_restart(job, attempt, record)  # another worker completes an instance restart
    assert Job.objects.get(pk=job.pk).restart_count == 1
    assert restarts.restart_job(stale, attempt, instances, memory_backend, "hang", ErrorSource.HANG, message="m")
    assert Job.objects.get(pk=job.pk).restart_count == 2


def test_budget_exhausted_fails_the_job_and_says_why(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body, args="--enable-job-restart=True --max-num-of-job-restart=1")
    for attempt in (1, 2):
        h = handle_of(job, attempt)
        # past the last failure's step each time, so the repeated-failure guard lets it through
        memory_backend.write_log(h, "worker-0", b"step=%d\n" % (3 * attempt) + NCCL)
        memory_backend.finish(h, "worker-0", exit_code=1)
        settled(job.pk)
        job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "restarted 1 of 1 times" in job.reason
    assert Attempt.objects.filter(job=job).count() == 2


def test_restarts_off_means_a_retryable_failure_still_fails(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body, args="--fault-tolerant-policy=ExitCodeAndErrorMsg")
    h = handle_of(job)
    memory_backend.write_log(h, "worker-0", NCCL)
    memory_backend.finish(h, "worker-0", exit_code=1)
    settled(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "--enable-job-restart=False" in job.reason


def test_async_job_restarts_only_the_failed_worker(alice_ws, owner_api, job_body, memory_backend):
    job = submit(
        owner_api,
        alice_ws,
        job_body,
        args=ASYNC,
        job_type="TFJob",
        job_specs=[{"type": "PS", "pod_count": 1}, {"type": "Worker", "pod_count": 3}],
    )
    h = handle_of(job)
    memory_backend.write_log(h, "worker-1", BUG)
    memory_backend.finish(h, "worker-1", exit_code=1)
    assert tick.run_job(job.pk).action == "restart_instance"
    job.refresh_from_db()
    assert job.current_attempt == 1 and job.status == JobStatus.RUNNING
    assert memory_backend.restarted == [(str(job.pk), 1, "worker-1")]
    w1 = Instance.objects.get(attempt__job=job, name="worker-1")
    assert w1.status == "Running" and w1.restarts == 1
    record = RestartRecord.objects.get(job=job)
    assert record.kind == "instance" and record.instance_name == "worker-1" and record.result == "Succeeded"
    others = Instance.objects.filter(attempt__job=job).exclude(name="worker-1")
    assert all(i.restarts == 0 for i in others)


def test_async_ps_failure_needs_a_whole_job_restart(alice_ws, owner_api, job_body, memory_backend):
    job = submit(
        owner_api,
        alice_ws,
        job_body,
        args=ASYNC + " --enable-job-restart=True",
        job_type="TFJob",
        job_specs=[{"type": "PS", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
    )
    h = handle_of(job)
    memory_backend.finish(h, "ps-0", exit_code=None, signal=9)
    assert tick.run_job(job.pk).action == "restart_job"


def test_same_error_cap_counts_across_attempts(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body, args=SYNC.replace("=3", "=10") + " --max-num-of-same-error=2")
    for attempt in (1, 2, 3):
        h = handle_of(job, attempt)
        # further each time: not a repeat at the same point (the guard), the same error all the same
        memory_backend.write_log(h, "worker-0", b"step=%d\n" % (5 * attempt) + NCCL)
        memory_backend.finish(h, "worker-0", exit_code=1)
        settled(job.pk)
        job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "occurred 3 times on worker-0" in job.reason
    assert RestartRecord.objects.filter(job=job).count() == 2


def test_failure_rate_over_the_threshold_fails_an_async_job(alice_ws, owner_api, job_body, memory_backend):
    job = submit(
        owner_api,
        alice_ws,
        job_body,
        args=ASYNC + " --max-tolerated-failure-rate=0.3",
        job_type="ElasticBatchJob",
        job_specs=[{"type": "Worker", "pod_count": 4}],
    )
    h = handle_of(job)
    memory_backend.finish(h, "worker-0", exit_code=1)
    assert tick.run_job(job.pk).action == "restart_instance"  # 1 of 4 = 25 %
    h = handle_of(job)
    memory_backend.finish(h, "worker-1", exit_code=1)
    memory_backend.finish(h, "worker-2", exit_code=1)
    tick.run_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "--max-tolerated-failure-rate=0.3" in job.reason


def test_a_person_stop_wins_over_a_pending_failure(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    memory_backend.write_log(h, "worker-0", NCCL)
    memory_backend.finish(h, "worker-0", exit_code=1)
    owner_api.post(f"/api/v1/jobs/{job.pk}/stop/")
    settled(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    assert job.current_attempt == 1 and not RestartRecord.objects.exists()


def test_root_cause_first_a_crash_beats_the_peers_connection_resets(alice_ws, owner_api, job_body, memory_backend):
    job = submit(
        owner_api,
        alice_ws,
        job_body,
        job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 3}],
    )
    h = handle_of(job)
    t = time.time() - 5
    memory_backend.write_log(h, "worker-1", BUG)
    memory_backend.finish(h, "worker-1", exit_code=1, now=t)
    for i, name in enumerate(("master-0", "worker-0", "worker-2")):
        memory_backend.write_log(
            h,
            name,
            b"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5111\n",
        )
        memory_backend.finish(h, name, exit_code=1, now=t + 0.05 * (i + 1))
    tick.run_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED  # the root cause is the user bug, not the resets
    failed = JobEvent.objects.get(job=job, type="job_failed")
    assert failed.payload["instance"] == "worker-1"
    assert sorted(c["instance"] for c in failed.payload["cascades"]) == ["master-0", "worker-0", "worker-2"]


def test_a_lone_cascade_symptom_waits_briefly_for_the_real_cause(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    now = time.time()
    memory_backend.write_log(h, "master-0", b"RuntimeError: Connection reset by peer\n")
    memory_backend.finish(h, "master-0", exit_code=1, now=now)
    with time_machine.travel(now + 0.2, tick=False):
        assert tick.run_job(job.pk).action == "none"
    memory_backend.write_log(h, "worker-0", BUG)
    memory_backend.finish(h, "worker-0", exit_code=1, now=now + 0.3)
    with time_machine.travel(now + 0.5, tick=False):
        tick.run_job(job.pk)
    assert JobEvent.objects.get(job=job, type="job_failed").payload["instance"] == "worker-0"


def test_hang_of_all_instances_restarts_the_job(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body, args=SYNC + " --enable-job-hang-detection=True --job-hang-interval=2")
    h = handle_of(job)
    start = time.time()
    for name in ("master-0", "worker-0"):
        memory_backend.write_log(h, name, b"step=1\n", now=start)
    with time_machine.travel(start + 1.5, tick=False):
        assert tick.run_job(job.pk).action == "none"
    with time_machine.travel(start + 2.5, tick=False):
        assert tick.run_job(job.pk).action == "restart_job"
    record = RestartRecord.objects.get(job=job)
    assert record.error_source == "Hang"
    assert JobEvent.objects.filter(job=job, type="hang").count() == 1


def test_runtime_interval_override_and_suspension(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body, args=SYNC + " --enable-job-hang-detection=True --job-hang-interval=2")
    owner_api.patch(f"/api/v1/jobs/{job.pk}/runtime/", {"job_hang_interval": -1}, format="json")
    h = handle_of(job)
    start = time.time()
    memory_backend.write_log(h, "master-0", b"x\n", now=start)
    with time_machine.travel(start + 100, tick=False):
        assert tick.run_job(job.pk).action == "none"
    owner_api.patch(f"/api/v1/jobs/{job.pk}/runtime/", {"job_hang_interval": 50}, format="json")
    with time_machine.travel(start + 101, tick=False):
        assert tick.run_job(job.pk).action == "restart_job"


def test_exit_hang_restarts_when_one_instance_finished_long_ago(alice_ws, owner_api, job_body, memory_backend):
    job = submit(
        owner_api, alice_ws, job_body, args=SYNC + " --enable-job-exit-hang-detection=True --job-exit-hang-interval=5"
    )
    h = handle_of(job)
    t = time.time()
    memory_backend.finish(h, "worker-0", exit_code=0, now=t)
    with time_machine.travel(t + 3, tick=False):
        assert tick.run_job(job.pk).action == "none"
    with time_machine.travel(t + 6, tick=False):
        assert tick.run_job(job.pk).action == "restart_job"
    assert RestartRecord.objects.get(job=job).error_source == "ExitHang"


def test_restart_loop_breaker_stops_three_restarts_without_progress(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body, args=SYNC.replace("=3", "=10"))
    for attempt in (1, 2, 3, 4):
        h = handle_of(job, attempt)
        # A different error each time: the same one twice in a row at the same point (on
        # any rank) is the repeated-failure guard's case (tested below), which stops sooner.
        name = ("worker-0", "master-0")[attempt % 2]
        error = (NCCL, b"RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection reset by peer\n")[attempt % 2]
        memory_backend.write_log(h, name, b"initialising...\n" + error)
        memory_backend.finish(h, name, exit_code=1)
        settled(job.pk)
        job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "no training progress" in job.reason
    assert RestartRecord.objects.filter(job=job).count() == 3


def test_without_fault_tolerance_the_first_failure_fails_the_job_with_its_cause(
    alice_ws, owner_api, job_body, memory_backend
):
    job = submit(owner_api, alice_ws, job_body, args="")
    h = handle_of(job)
    memory_backend.write_log(h, "worker-0", NCCL)
    memory_backend.finish(h, "worker-0", exit_code=1)
    settled(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "fault tolerance is off" in job.reason
    assert "stopped" in {s.state for s in memory_backend.poll(h)}


def test_a_watchdog_timeout_in_a_log_suggests_a_hang_interval(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    memory_backend.write_log(
        h,
        "worker-0",
        b"[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600023 milliseconds before timing out.\n",
    )
    tick.run_job(job.pk)
    event = JobEvent.objects.get(job=job, type="suggestion")
    assert event.payload["suggested_hang_interval"] == 450
    tick.run_job(job.pk, now=timezone.now() + timezone.timedelta(minutes=5))
    assert JobEvent.objects.filter(job=job, type="suggestion").count() == 1


def test_sweep_relaunches_an_attempt_that_no_worker_took(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    attempt = Attempt.objects.get(job=job, number=1)
    # Pretend the worker died after deciding a restart but before launching attempt 2.
    Job.objects.filter(pk=job.pk).update(current_attempt=2, status=JobStatus.RESTARTING)
    Attempt.objects.create(job=job, number=2, queued_at=timezone.now() - timezone.timedelta(seconds=30))
    assert tasks.sweep() == 1
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    assert Attempt.objects.get(job=job, number=2).backend_handle
    assert Attempt.objects.get(pk=attempt.pk).status == "Failed"  # superseded attempt stopped
    tasks.sweep()
    assert Attempt.objects.filter(job=job).count() == 2


def test_the_goodput_endpoint_accounts_for_a_restart(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    memory_backend.write_log(h, "worker-0", b"step=1\n" + NCCL)
    memory_backend.finish(h, "worker-0", exit_code=1)
    settled(job.pk)
    body = owner_api.get(f"/api/v1/jobs/{job.pk}/goodput/").json()
    assert [a["number"] for a in body["attempts"]] == [1, 2]
    assert body["attempts"][1]["detection"] is not None and body["attempts"][1]["detection"] >= 0
    assert body["wall_clock"] >= 0 and "ettr" in body


def test_a_backend_briefly_unable_to_launch_keeps_the_job_queued_and_retries(
    alice_ws, owner_api, job_body, memory_backend
):
    from jobs.backends.base import BackendError

    memory_backend.launch_error = BackendError("slurmctld is not answering", retryable=True)
    job = submit(owner_api, alice_ws, job_body)
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUING and "slurmctld is not answering" in job.reason
    assert Attempt.objects.get(job=job, number=1).status == "Queuing"
    later = timezone.now() + restarts.RELAUNCH_AFTER + timezone.timedelta(seconds=1)
    tick.run_job(job.pk, now=later)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and Attempt.objects.filter(job=job).count() == 1


def test_a_permanent_launch_error_fails_the_job_with_the_backends_words(alice_ws, owner_api, job_body, memory_backend):
    from jobs.backends.base import BackendError

    memory_backend.launch_error = BackendError("partition 'gpu' does not exist")
    job = submit(owner_api, alice_ws, job_body)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "partition 'gpu' does not exist" in job.reason


# ---- the repeated-failure guard (issue 13) -----------------------------------------------


def test_the_same_failure_on_the_same_rank_without_progress_twice_is_not_restarted_again(
    alice_ws, owner_api, job_body, memory_backend
):
    job = submit(owner_api, alice_ws, job_body, args=SYNC.replace("=3", "=10"))
    for attempt in (1, 2):
        h = handle_of(job, attempt)
        memory_backend.write_log(h, "worker-0", b"initialising...\n" + NCCL)
        memory_backend.finish(h, "worker-0", exit_code=1)
        settled(job.pk)
        job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.current_attempt == 2
    assert "the same failure at the same point twice: likely deterministic" in job.reason
    assert "nccl-system-error" in job.reason and "no training progress" in job.reason
    assert RestartRecord.objects.filter(job=job).count() == 1
    failed = JobEvent.objects.get(job=job, type="job_failed")
    assert failed.payload["step"] == "repeated_failure"


def test_an_instance_restarted_alone_that_fails_the_same_way_without_progress_fails_the_job(
    alice_ws, owner_api, job_body, memory_backend
):
    # Async: worker-1 is restarted alone; its next run fails with the same error before any
    # step line, so the guard stops it. A run that trained in between is restarted again.
    job = submit(
        owner_api,
        alice_ws,
        job_body,
        args="--job-execution-mode=Async --fault-tolerant-policy=ExitCodeAndErrorMsg",
        job_type="TFJob",
        job_specs=[{"type": "PS", "pod_count": 1}, {"type": "Worker", "pod_count": 3}],
    )
    h = handle_of(job)
    for run, before in ((1, b"step=100\n"), (2, b"step=200\n"), (3, b"initialising...\n")):
        memory_backend.write_log(h, "worker-1", before + NCCL)
        memory_backend.finish(h, "worker-1", exit_code=1)
        result = settled(job.pk)
        if run < 3:
            assert result.action == "restart_instance", (run, result)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.current_attempt == 1
    assert "the same failure at the same point twice: likely deterministic" in job.reason
    assert "worker-1 failed with nccl-system-error" in job.reason
    assert RestartRecord.objects.filter(job=job, kind=RestartKind.INSTANCE).count() == 2
    assert JobEvent.objects.get(job=job, type="job_failed").payload["step"] == "repeated_failure"


def test_the_same_failure_after_progress_is_restarted_again(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body, args=SYNC.replace("=3", "=10"))
    for attempt in (1, 2):
        h = handle_of(job, attempt)
        memory_backend.write_log(h, "worker-0", f"step={attempt * 100}\n".encode() + NCCL)
        memory_backend.finish(h, "worker-0", exit_code=1)
        assert settled(job.pk).action == "restart_job"
    job.refresh_from_db()
    assert job.current_attempt == 3 and job.status == JobStatus.RUNNING


def _bar(n: int, total: int = 2724) -> bytes:
    """A line of tqdm's bar as Hugging Face's Trainer prints it (no description, no "step")."""
    return f" {100 * n // total:2d}%|█▍        | {n}/{total} [14:06:56<85:46:12, 131.84s/it]\n".encode()


def test_a_job_that_prints_only_a_progress_bar_trains_between_failures_and_is_restarted_each_time(
    alice_ws, owner_api, job_body, memory_backend
):
    # Neither "step N" nor the SDK: the bar is its only progress. Each attempt trains further
    # and then fails, the same error each time: never the same point, and never an attempt
    # without progress, so neither the guard nor the restart-loop breaker stops it.
    job = submit(owner_api, alice_ws, job_body, args=SYNC.replace("=3", "=10"))
    for attempt in (1, 2, 3, 4):
        h = handle_of(job, attempt)
        memory_backend.write_log(
            h, "worker-0", b"".join(_bar(n) for n in range(attempt * 100, attempt * 100 + 3)) + NCCL
        )
        memory_backend.finish(h, "worker-0", exit_code=1)
        assert settled(job.pk).action == "restart_job", Job.objects.get(pk=job.pk).reason
    job.refresh_from_db()
    assert job.current_attempt == 5 and job.status == JobStatus.RUNNING
    points = RestartRecord.objects.filter(job=job).order_by("attempt").values_list("failure_step", "failure_phase")
    assert list(points) == [(102, "training"), (202, "training"), (302, "training"), (402, "training")]
    assert all(Attempt.objects.filter(job=job, number__lt=5).values_list("made_progress", flat=True))


def test_a_progress_bar_ends_the_start_up_interval(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body, args=SYNC + " --enable-job-hang-detection=True --job-hang-interval=60")
    h = handle_of(job)
    memory_backend.write_log(h, "worker-0", b"Loading checkpoint shards: 100%|##########| 2/2 [00:03<00:00]\n")
    tick.run_job(job.pk)
    assert Attempt.objects.get(job=job, number=1).first_progress_at is None  # loading is start-up
    memory_backend.write_log(h, "worker-0", _bar(1))
    tick.run_job(job.pk)
    assert Attempt.objects.get(job=job, number=1).first_progress_at is not None


def test_the_same_failure_at_the_same_sdk_step_is_caught_even_after_progress(
    alice_ws, owner_api, job_body, memory_backend
):
    from rest_framework.test import APIClient

    job = submit(owner_api, alice_ws, job_body, args=SYNC.replace("=3", "=10"))
    sdk = APIClient()
    sdk.credentials(HTTP_AUTHORIZATION=f"Bearer {job.reset_token()}")
    for attempt in (1, 2):
        # Each attempt resumes from a checkpoint and trains (progress) up to step 40, where it fails.
        for step in (30, 40):
            r = sdk.post(f"/api/v1/sdk/jobs/{job.pk}/progress/", {"step": step}, format="json")
            assert r.status_code == 202, r.content
        h = handle_of(job, attempt)
        memory_backend.write_log(h, "worker-0", b"step=40\n" + NCCL)
        memory_backend.finish(h, "worker-0", exit_code=1)
        settled(job.pk)
        job.refresh_from_db()
    assert RestartRecord.objects.get(job=job).progress_step == 40
    assert job.status == JobStatus.FAILED and job.current_attempt == 2
    assert "likely deterministic" in job.reason and "at step 40" in job.reason


def test_a_restart_record_says_which_family_and_line_decided(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    memory_backend.write_log(h, "worker-0", b"step=1 loss=0.5\n" + NCCL)
    memory_backend.finish(h, "worker-0", exit_code=1)
    settled(job.pk)
    record = RestartRecord.objects.get(job=job)
    assert record.family == "network"
    assert record.evidence == NCCL.decode().strip()
    assert not record.decided_by_exit_status


def test_a_sigkill_without_evidence_is_restarted_once_and_then_fails(alice_ws, owner_api, job_body, memory_backend):
    job = submit(owner_api, alice_ws, job_body, args=SYNC.replace("=3", "=10"))
    for attempt in (1, 2):
        h = handle_of(job, attempt)
        memory_backend.write_log(h, "worker-0", f"step={attempt * 100} loss=0.5\n".encode())
        memory_backend.finish(h, "worker-0", exit_code=137)
        settled(job.pk)
        job.refresh_from_db()
    record = RestartRecord.objects.get(job=job)
    assert (record.rule, record.error_code, record.decided_by_exit_status) == ("killed-by-signal", "SIGKILL", True)
    assert record.exit_status_text == "signal SIGKILL" and record.evidence == ""
    assert job.status == JobStatus.FAILED and job.current_attempt == 2
    assert "retried only 1 time on one instance" in job.reason


def test_stopping_an_attempt_keeps_the_exit_of_a_rank_that_ended_while_no_worker_watched(
    alice, alice_ws, owner_api, job_body, memory_backend
):
    """Issue 20, 5: a rank's own exit seen by no tick is not overwritten as Stopped by the stop."""
    from jobs import actions

    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    exited = time.time() - 30
    memory_backend.finish(h, "worker-0", exit_code=3, now=exited)  # no tick sees it: the workers are down
    assert actions.stop_job(alice, job)
    actions.finish_stop(job.pk)
    rows = {i.name: i for i in Instance.objects.filter(attempt__job=job)}
    assert (rows["worker-0"].status, rows["worker-0"].exit_code) == ("Failed", 3)
    assert abs(rows["worker-0"].exited_at.timestamp() - exited) < 0.01
    assert rows["master-0"].status == "Stopped" and rows["master-0"].signal == 15  # the backend's own record


def test_a_launch_that_ends_after_its_attempt_was_stopped_stops_what_it_started(
    alice_ws, owner_api, job_body, memory_backend, monkeypatch
):
    """A stop that lands while a launch runs elsewhere: the launch must not leave ranks nobody knows."""
    from jobs.models import AttemptStatus

    launch = memory_backend.launch

    def launch_while_a_stop_lands(spec):
        handle = launch(spec)
        Attempt.objects.filter(job_id=int(spec.job_id), number=spec.attempt).update(status=AttemptStatus.STOPPED)
        return handle

    monkeypatch.setattr(memory_backend, "launch", launch_while_a_stop_lands)
    job = submit(owner_api, alice_ws, job_body)
    attempt = Attempt.objects.get(job=job, number=1)
    assert attempt.status == AttemptStatus.STOPPED and attempt.backend_handle == {}
    assert not Instance.objects.filter(attempt=attempt).exists()
    assert [(j, a) for j, a, *_ in memory_backend.stopped] == [(str(job.pk), 1)]


def test_a_restart_whose_new_instance_never_started_is_not_counted_as_succeeded(
    alice_ws, owner_api, job_body, memory_backend
):
    """Issue 20: "Restart 1 succeeded: all 2 instances started" was said with an instance Lost."""
    from jobs.backends.base import InstanceState
    from jobs.models import RestartResult

    job = submit(owner_api, alice_ws, job_body)
    h = handle_of(job)
    memory_backend.write_log(h, "worker-0", NCCL)
    memory_backend.finish(h, "worker-0", exit_code=1)
    memory_backend.initial_state = InstanceState.PENDING  # attempt 2's instances start later, or never
    assert settled(job.pk).action == "restart_job"
    h2 = handle_of(job, 2)
    memory_backend.set_instance(h2, "master-0", state="running", started_at=time.time())
    memory_backend.set_instance(h2, "worker-0", state="lost", reason="the shim never started")
    tick.run_job(job.pk)  # the lost instance is then handled as a failure of its own (restart 2)
    record = RestartRecord.objects.get(job=job, new_attempt=2)
    assert record.result == RestartResult.FAILED
    assert (
        JobEvent.objects.filter(
            job=job, message="Restart 1 failed: 1 of 2 instances of attempt 2 never started (worker-0)."
        ).count()
        == 1
    )
    assert not JobEvent.objects.filter(job=job, message__startswith="Restart 1 succeeded").exists()


def test_an_output_stamped_before_the_launch_gives_no_negative_stage_in_the_api(
    alice_ws, owner_api, job_body, memory_backend
):
    """Issue 15, defect 10: an instance's first output stamped before the console's starting_at
    (a node's clock behind, or a print before launch() returned) made "starting": -0.311."""
    job = submit(owner_api, alice_ws, job_body)
    attempt = Attempt.objects.get(job=job, number=1)
    early = attempt.starting_at.timestamp() - 0.311
    memory_backend.write_log(attempt.backend_handle, "worker-0", "step 1\n", now=early)
    tick.run_job(job.pk)
    attempt.refresh_from_db()
    assert attempt.running_at == attempt.starting_at  # stored in order, at the source
    body = owner_api.get(f"/api/v1/jobs/{job.pk}/attempts/").json()
    stages = body[0]["stages"]
    assert stages["starting"] == 0.0 and stages["queued"] >= 0 and stages["preparing"] >= 0, stages
    assert body[0]["running_at"] >= body[0]["starting_at"]
    # a row stored out of order before this fix reads as zero too
    Attempt.objects.filter(pk=attempt.pk).update(running_at=attempt.starting_at - timezone.timedelta(seconds=0.311))
    assert owner_api.get(f"/api/v1/jobs/{job.pk}/attempts/").json()[0]["stages"]["starting"] == 0.0


def test_a_bug_failing_on_a_node_where_another_job_just_failed_gets_one_probe(
    alice_ws, owner_api, job_body, memory_backend
):
    # issue 26: other jobs failing on the same node within the same minute are an
    # infrastructure event, so a deterministic verdict gets one probe, and the reason says why.
    first = submit(owner_api, alice_ws, job_body)
    h = handle_of(first)
    memory_backend.write_log(h, "master-0", BUG)
    memory_backend.finish(h, "master-0", exit_code=1)
    settled(first.pk)
    first.refresh_from_db()
    assert (
        first.status == JobStatus.FAILED
        and "(Context: attempt 1, failed before the first progress, on mem-0.)" in first.reason
    )
    second = submit(owner_api, alice_ws, job_body)
    h = handle_of(second)
    memory_backend.write_log(h, "master-0", BUG)
    memory_backend.finish(h, "master-0", exit_code=1)
    assert settled(second.pk).action == "restart_job"
    record = RestartRecord.objects.get(job=second)
    assert record.verdict_kind == "ambiguous"
    assert "1 other job failed on mem-0 within the same minute: an infrastructure event" in record.reason
