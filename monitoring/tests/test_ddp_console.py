"""The DDP example submitted through the API on the local backend, watched by
the monitor: what a user sees for a clean run, a retryable fault and a bug."""

import time
from pathlib import Path

import pytest

from jobs.models import Attempt, Instance, JobEvent, JobStatus, RestartRecord
from monitoring import tick
from testsupport import factory

pytest.importorskip("torch", reason="torch is not installed (.ci/run installs torch==2.13.0)")
pytestmark = [pytest.mark.torch, pytest.mark.django_db(transaction=True)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"
SYNC = "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 --fault-tolerant-policy=ExitCodeAndErrorMsg"


def submit_ddp(api, ws, body, envs, args=SYNC):
    envs = {"VIGIL_EXAMPLE_STEPS": "15", "VIGIL_EXAMPLE_PG_TIMEOUT": "60", **envs}
    return factory.submit(
        api,
        ws,
        flags=args,
        display_name="ddp-example",
        user_command=factory.script_command(EXAMPLE),
        envs=envs,
        job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 3}],
    )


def run_to_end(job, seconds=120.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tick.run_job(job.pk)
        job.refresh_from_db()
        if job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return job
        time.sleep(0.2)
    events = "\n".join(f"  {e.type}: {e.message}" for e in JobEvent.objects.filter(job=job))
    raise AssertionError(f"job still {job.status} after {seconds} s:\n{events}")


def restarts_of(job, backend) -> list:
    """Each restart with its attempt, instance, message and log tail (for failure messages)."""
    return [
        (
            r.attempt,
            r.instance_name,
            r.error_message,
            backend.tail_log(Attempt.objects.get(job=job, number=r.attempt).backend_handle, r.instance_name, 1500),
        )
        for r in RestartRecord.objects.filter(job=job)
    ]


@pytest.fixture
def api(alice, alice_ws, api_as):
    return api_as(alice)


def test_the_ddp_example_trains_to_succeeded_with_four_processes(api, alice_ws, job_body, local_backend):
    job = run_to_end(submit_ddp(api, alice_ws, job_body, {}))
    assert job.status == JobStatus.SUCCEEDED, job.reason
    instances = Instance.objects.filter(attempt__job=job)
    restarts = restarts_of(job, local_backend)
    assert not restarts, restarts
    assert instances.count() == 4 and {i.exit_code for i in instances} == {0}
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    assert b"step=15" in local_backend.read_log(handle, "worker-2")


def test_a_retryable_fault_fails_once_and_succeeds_on_attempt_2_with_a_record(
    api, alice_ws, job_body, local_backend, tmp_path
):
    job = run_to_end(
        submit_ddp(
            api,
            alice_ws,
            job_body,
            {"FAULT": "nccl", "FAULT_RANK": "2", "FAULT_STEP": "3", "FAULT_ONCE": str(tmp_path / "fired")},
        )
    )
    assert job.status == JobStatus.SUCCEEDED, job.reason
    restarts = restarts_of(job, local_backend)
    assert job.current_attempt == 2, restarts
    record = RestartRecord.objects.get(job=job)
    assert record.instance_name == "worker-1"  # rank 2 is the second worker
    assert record.error_source == "Log"
    assert "NCCL" in record.error_message or "Connection reset" in record.error_message
    assert record.result == "Succeeded" and "Restarting the whole job" in record.reason


def test_a_user_bug_fails_fast_with_its_cause_and_exit_code(api, alice_ws, job_body, local_backend):
    job = run_to_end(submit_ddp(api, alice_ws, job_body, {"FAULT": "bug", "FAULT_RANK": "1", "FAULT_STEP": "2"}))
    assert job.status == JobStatus.FAILED
    assert job.current_attempt == 1
    assert "ValueError" in job.reason
    assert Instance.objects.get(attempt__job=job, name="worker-0").exit_code == 1


def test_without_fault_tolerance_a_sigkill_ends_failed_with_the_kill_recorded(api, alice_ws, job_body, local_backend):
    job = run_to_end(
        submit_ddp(api, alice_ws, job_body, {"FAULT": "sigkill", "FAULT_RANK": "3", "FAULT_STEP": "2"}, args="")
    )
    assert job.status == JobStatus.FAILED
    killed = Instance.objects.get(attempt__job=job, name="worker-2")
    # The instance's shell reports its child's SIGKILL as 128 + 9.
    assert killed.status == "Failed" and killed.exit_code == 137
    assert "SIGKILL" in job.reason and "fault tolerance is off" in job.reason
    assert "retried automatically" not in job.reason
