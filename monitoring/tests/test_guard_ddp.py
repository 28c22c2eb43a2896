"""The repeated-failure guard on a four-rank DDP job as people write it (issue 26): no SDK,
rank 0 alone prints the steps, and the rank that fails prints only its traceback. Where it
failed is the job's step, read from rank 0's log: the same error after the job trained
further is a new fault, restarted again; the same error at the same step twice stops the
job after one futile restart."""

import json
import sys
import textwrap

import pytest

from jobs.models import Job, JobStatus, RestartRecord
from testsupport.jobs import let_jobs_reach
from testsupport.monitor import finished, tick_until

pytest.importorskip("torch", reason="torch is not installed (.ci/run installs torch==2.13.0)")
pytestmark = [pytest.mark.torch, pytest.mark.django_db(transaction=True)]

ARGS = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg"
)
# Rank 2 raises at the step FAIL_AT names for this attempt, before its forward pass: rank 0
# has printed the step before it, and the other ranks then fail in DDP's all-reduce.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    from torch import nn
    assert "vigil" not in sys.modules
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fail_at = json.loads(os.environ["FAIL_AT"]).get(os.environ["VIGIL_ATTEMPT"])
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 13):
        if step == fail_at and rank == 2:
            raise ConnectionResetError(f"[Errno 104] Connection reset by peer (pid {os.getpid()})")
        opt.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss={loss.item():.4f}", flush=True)
    """
)


def _submit(api, ws, job_body, tmp_path, fail_at: dict) -> Job:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    script.chmod(0o644)
    let_jobs_reach(tmp_path)  # the jobs run as the backend's run-as user
    r = api.post(
        "/api/v1/jobs/",
        job_body(
            ws,
            display_name="ddp-guard",
            user_command=f"{sys.executable} {script}",
            envs={"FAIL_AT": json.dumps(fail_at)},
            job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 3}],
            settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": ARGS},
        ),
        format="json",
    )
    assert r.status_code == 201, r.content
    return Job.objects.get(pk=r.json()["id"])


def test_the_same_error_further_on_is_restarted_and_at_the_same_step_again_stops_the_job(
    alice, alice_ws, api_as, job_body, local_backend, tmp_path
):
    # attempt 1 fails after step 3; attempt 2 after step 7, further on: a new fault, restarted;
    # attempt 3 after step 7 again: the same failure at the same point twice, and the job fails
    job = _submit(api_as(alice), alice_ws, job_body, tmp_path, {"1": 4, "2": 8, "3": 8, "4": 8})
    job = tick_until(job, finished, seconds=200, backend=local_backend, what="two restarts, then the guard")
    assert job.status == JobStatus.FAILED, job.reason
    assert job.current_attempt == 3, job.reason  # one restart per new point, none after the repeat
    assert "the same failure at the same point twice: likely deterministic" in job.reason
    assert "at step 7" in job.reason  # rank 0's last step line: rank 2 prints none
    records = RestartRecord.objects.filter(job=job, root_cause=True).order_by("attempt")
    # rank 2 is the root cause each time, not a peer that failed in the all-reduce after it
    assert [(r.attempt, r.instance_name, r.failure_step, r.failure_phase) for r in records] == [
        (1, "worker-1", 3, "training"),
        (2, "worker-1", 7, "training"),
    ]
    assert "likely deterministic" not in records[1].reason
