"""The monitor on real processes (local backend): the seed's three example
configurations, the caps, hangs, exit hangs and root cause first."""

import textwrap

import pytest

from testsupport.jobs import job_writable
from jobs.models import Attempt, Instance, JobEvent, JobStatus, RestartRecord
from monitoring import tick
from testsupport.monitor import finished, tick_until
from testsupport import factory

pytestmark = pytest.mark.django_db(transaction=True)

SYNC = "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 --fault-tolerant-policy=ExitCodeAndErrorMsg"
ASYNC = "--job-execution-mode=Async --fault-tolerant-policy=OnFailure"

# One script for every instance: what it does is chosen by env and a marker
# directory, so that a fault fires once and the restarted attempt runs clean.
SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    me = os.environ["VIGIL_INSTANCE"]
    attempt = int(os.environ["VIGIL_ATTEMPT"])
    mode = os.environ.get("MODE", "ok")
    who = os.environ.get("FAULTY", "worker-0")
    marker = os.path.join(os.environ["MARKERS"], f"{mode}-{me}")
    print(f"{me} attempt={attempt} starting", flush=True)
    fire = me == who and not os.path.exists(marker)
    if mode == "nccl" and fire:
        open(marker, "w").close()
        print("step=1 loss=0.9", flush=True)
        print("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled system error, NCCL version 2.18.1", file=sys.stderr, flush=True)
        sys.exit(1)
    if mode == "bug" and me == who:
        print("step=1 loss=0.9", flush=True)
        raise ValueError("shapes (3,4) and (5,6) not aligned")
    if mode == "always_nccl" and me == who:
        print(f"step={attempt}", flush=True)  # further each time: not a repeat at the same point
        print("ncclSystemError: System call (e.g. socket, malloc) or external library call failed", file=sys.stderr, flush=True)
        sys.exit(1)
    if mode == "cascade":
        if me == who:
            time.sleep(0.3)
            raise ZeroDivisionError("division by zero in loss scaling")
        time.sleep(0.8)
        print("RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection reset by peer", file=sys.stderr, flush=True)
        sys.exit(1)
    if mode == "hang":
        print("step=1", flush=True)
        time.sleep(60)
    if mode == "slow_start":  # a silent start-up (imports, rendezvous), one step, then a stall
        time.sleep(float(os.environ["SLOW_START"]))
        print("step=1", flush=True)
        time.sleep(60)
    if mode == "exit_hang":
        if me == who:
            print("step=1 done early", flush=True)
            sys.exit(0)
        print("step=1", flush=True)
        time.sleep(60)
    if mode == "fail_some" and me in who.split(","):
        sys.exit(3)
    for step in range(1, 4):
        print(f"step={step}", flush=True)
        time.sleep(0.05)
    """
)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    job_writable(tmp_path / "markers")
    return path


def submit(api, ws, body, script, args, mode, faulty="worker-0", extra_envs=None, **over):
    envs = {"MODE": mode, "FAULTY": faulty, "MARKERS": str(script.parent / "markers"), **(extra_envs or {})}
    # monitoring is on even with no flags ("" = the defaults)
    return factory.submit(
        api,
        ws,
        user_command=factory.script_command(script),
        envs=envs,
        settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": args},
        **over,
    )


@pytest.fixture
def api(alice, alice_ws, api_as):
    return api_as(alice)


def test_sync_pytorch_restarts_on_a_retryable_error_and_succeeds_on_attempt_2(
    api, alice_ws, job_body, local_backend, script
):
    job = submit(
        api,
        alice_ws,
        job_body,
        script,
        SYNC,
        "nccl",
        job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
    )
    job = tick_until(job, finished)
    assert job.status == JobStatus.SUCCEEDED, job.reason
    assert job.current_attempt == 2
    record = RestartRecord.objects.get(job=job)
    assert record.instance_name == "worker-0" and record.error_source == "Log"
    assert record.error_code == "NCCL_SYSTEM_ERROR" and record.result == "Succeeded"
    assert record.node_name and record.duration_seconds is not None
    assert Attempt.objects.get(job=job, number=1).status == "Failed"
    log = local_backend.read_log(Attempt.objects.get(job=job, number=1).backend_handle, "worker-0")
    assert record.log_offset is not None and log[record.log_offset :].startswith(b"RuntimeError: NCCL error")


def test_sync_pytorch_fails_fast_on_a_user_bug_with_the_cause(api, alice_ws, job_body, local_backend, script):
    job = submit(api, alice_ws, job_body, script, SYNC, "bug")
    job = tick_until(job, finished)
    assert job.status == JobStatus.FAILED
    assert "ValueError" in job.reason and "worker-0" in job.reason
    assert job.current_attempt == 1 and not RestartRecord.objects.filter(job=job).exists()
    inst = Instance.objects.get(attempt__job=job, name="worker-0")
    assert inst.exit_code == 1


def test_async_tensorflow_restarts_only_the_failed_worker(api, alice_ws, job_body, local_backend, script):
    job = submit(
        api,
        alice_ws,
        job_body,
        script,
        ASYNC,
        "nccl",
        faulty="worker-1",
        job_type="TFJob",
        job_specs=[{"type": "PS", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
    )
    job = tick_until(job, finished)
    assert job.status == JobStatus.SUCCEEDED, job.reason
    assert job.current_attempt == 1
    restarts = {i.name: i.restarts for i in Instance.objects.filter(attempt__job=job)}
    assert restarts == {"ps-0": 0, "worker-0": 0, "worker-1": 1}
    record = RestartRecord.objects.get(job=job)
    assert record.kind == "instance" and record.instance_name == "worker-1"


def test_elasticbatch_restarts_only_the_failed_instance(api, alice_ws, job_body, local_backend, script):
    job = submit(
        api,
        alice_ws,
        job_body,
        script,
        ASYNC,
        "nccl",
        faulty="worker-2",
        job_type="ElasticBatchJob",
        job_specs=[{"type": "Worker", "pod_count": 3}],
    )
    job = tick_until(job, finished)
    assert job.status == JobStatus.SUCCEEDED, job.reason
    assert {i.name: i.restarts for i in Instance.objects.filter(attempt__job=job)} == {
        "worker-0": 0,
        "worker-1": 0,
        "worker-2": 1,
    }


def test_same_error_cap_fails_the_job_on_real_processes(api, alice_ws, job_body, local_backend, script):
    job = submit(api, alice_ws, job_body, script, SYNC + " --max-num-of-same-error=1", "always_nccl")
    job = tick_until(job, finished, seconds=30)
    assert job.status == JobStatus.FAILED
    assert "--max-num-of-same-error=1" in job.reason
    assert job.current_attempt == 2


def test_failure_rate_threshold_on_real_processes(api, alice_ws, job_body, local_backend, script):
    job = submit(
        api,
        alice_ws,
        job_body,
        script,
        ASYNC + " --max-tolerated-failure-rate=0.5",
        "fail_some",
        faulty="worker-0,worker-1,worker-2",
        job_type="ElasticBatchJob",
        job_specs=[{"type": "Worker", "pod_count": 4}],
    )
    job = tick_until(job, finished)
    assert job.status == JobStatus.FAILED
    assert "--max-tolerated-failure-rate=0.5" in job.reason


def test_a_hang_with_a_2_second_interval_is_detected_and_restarted(api, alice_ws, job_body, local_backend, script):
    job = submit(
        api,
        alice_ws,
        job_body,
        script,
        "--enable-job-restart=True --max-num-of-job-restart=1 --enable-job-hang-detection=True --job-hang-interval=2",
        "hang",
    )
    job = tick_until(job, lambda j: j.current_attempt == 2, seconds=15)
    hang = JobEvent.objects.get(job=job, type="hang")
    assert "2 s" in hang.message
    assert RestartRecord.objects.get(job=job).error_source == "Hang"


def test_a_silent_start_up_is_not_a_hang_but_a_stall_after_the_first_progress_is(
    api, alice_ws, job_body, local_backend, script
):
    # 4 s hang interval, start-up interval left out (so 600 s); every rank is silent for
    # 10 s after its first line, writes one step line, then stalls.
    job = submit(
        api,
        alice_ws,
        job_body,
        script,
        "--enable-job-restart=True --max-num-of-job-restart=1 --enable-job-hang-detection=True --job-hang-interval=4",
        "slow_start",
        extra_envs={"SLOW_START": "10"},
    )
    job = tick_until(
        job,
        lambda j: Attempt.objects.filter(job=j, number=1, first_progress_at__isnull=False).exists(),
        seconds=40,
        backend=local_backend,
        what="make its first progress",
    )
    attempt = Attempt.objects.get(job=job, number=1)
    # the silence was real: the script slept 10 s (starting_at is stamped just before the
    # processes start, the step line's time is its log's mtime: a few ms either way)
    assert (attempt.first_progress_at - attempt.starting_at).total_seconds() >= 9.5
    assert not JobEvent.objects.filter(job=job, type="hang").exists() and job.current_attempt == 1

    job = tick_until(
        job,
        lambda j: JobEvent.objects.filter(job=j, type="hang").exists(),
        seconds=15,
        backend=local_backend,
        what="hang after its first progress",
    )
    event = JobEvent.objects.get(job=job, type="hang")
    last_output = max(i.last_output_at for i in Instance.objects.filter(attempt=attempt))
    assert (event.created_at - last_output).total_seconds() <= 4 + 1
    assert "at least the hang interval of 4 s" in event.message
    assert RestartRecord.objects.get(job=job).error_source == "Hang"


def test_an_exit_hang_is_detected(api, alice_ws, job_body, local_backend, script):
    job = submit(
        api,
        alice_ws,
        job_body,
        script,
        "--enable-job-restart=False --enable-job-exit-hang-detection=True --job-exit-hang-interval=2",
        "exit_hang",
        faulty="worker-0",
    )
    job = tick_until(job, finished, seconds=15)
    assert job.status == JobStatus.FAILED
    assert JobEvent.objects.filter(job=job, type="exit_hang").exists()
    assert "worker-0 finished" in JobEvent.objects.get(job=job, type="exit_hang").message


def test_cascade_is_classified_by_the_rank_that_crashed_first(api, alice_ws, job_body, local_backend, script):
    job = submit(
        api,
        alice_ws,
        job_body,
        script,
        SYNC,
        "cascade",
        faulty="worker-1",
        job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 3}],
    )
    job = tick_until(job, finished)
    assert job.status == JobStatus.FAILED
    failed = JobEvent.objects.get(job=job, type="job_failed")
    assert failed.payload["instance"] == "worker-1"
    assert "ZeroDivisionError" in job.reason


def test_a_person_stop_ends_a_running_job_and_kills_its_processes(api, alice_ws, job_body, local_backend, script):
    job = submit(api, alice_ws, job_body, script, SYNC, "hang")
    tick_until(job, lambda j: j.status == JobStatus.RUNNING)
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    assert api.post(f"/api/v1/jobs/{job.pk}/stop/").status_code == 202
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    assert all(s.state.finished for s in local_backend.poll(handle))
    tick.run_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED and job.current_attempt == 1
