"""A hung DDP run through the whole console: the SDK reports collectives to a
live console, the monitor detects the hang, snapshots the stacks with the hung
rank as the suspect, runs C4D, and the job page shows both."""

import sys
from pathlib import Path

import pytest

from jobs.models import C4DReport, Diagnosis, Job, JobEvent, JobStatus
from testsupport.monitor import finished, tick_until

pytest.importorskip("torch", reason="torch is not installed (.ci/run installs torch==2.13.0)")
pytestmark = [pytest.mark.torch, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
# The ranks' start-up (importing torch, joining the rendezvous: up to ~14 s as nobody on a
# loaded 2-core machine) is silent; the start-up interval covers it, so the short hang
# interval applies only from the first progress (a step line, a C4D collective) on and
# the hang caught is the real one, not every rank still starting.
ARGS = (
    "--enable-job-hang-detection=True --job-hang-interval=6 --job-hang-startup-interval=120 "
    "--enable-c4d-hang-detection=True --c4d-log-level=Info "
    "--c4d-common-envs=C4D_HANG_TIMEOUT=2000000,C4D_HANG_TIMES=100,C4D_CONN_BW_CHECK_PERIOD=1"
)


def test_a_hung_ddp_rank_is_the_stack_suspect_and_the_c4d_verdict_on_the_job_page(
    alice,
    alice_ws,
    api_as,
    job_body,
    local_backend,
    live_server,
    settings,
    client,
):
    settings.VIGIL_CONSOLE_URL = live_server.url
    r = api_as(alice).post(
        "/api/v1/jobs/",
        job_body(
            alice_ws,
            display_name="ddp-hang",
            user_command=f"{sys.executable} {ROOT / 'examples' / 'ddp_train.py'}",
            envs={
                "PYTHONPATH": str(ROOT / "sdk" / "src"),
                "VIGIL_EXAMPLE_STEPS": "200",
                "VIGIL_EXAMPLE_PG_TIMEOUT": "300",
                "FAULT": "hang_compute",
                "FAULT_RANK": "1",
                "FAULT_STEP": "3",
            },
            job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
            settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": ARGS},
        ),
        format="json",
    )
    assert r.status_code == 201, r.content
    job = tick_until(Job.objects.get(pk=r.json()["id"]), finished, seconds=90, backend=local_backend, what="hang")
    assert job.status == JobStatus.FAILED and "hung" in job.reason

    stacks = Diagnosis.objects.get(job=job, kind="stacks")
    suspects = [s for s in stacks.data["stacks"] if s["suspect"] and not s.get("idle")]
    assert len(suspects) == 1, stacks.summary
    [suspect] = suspects
    assert any(f["function"] == "compute_forever" for f in suspect["frames"]), stacks.summary
    assert [t["instance"] for t in suspect["threads"]] == ["worker-0"]  # rank 1
    verdicts = [v for d in Diagnosis.objects.filter(job=job, kind="c4d") for v in d.data["verdicts"]]
    assert any(v["kind"] == "RankNonCommHang" and v["rank"] == 1 for v in verdicts), verdicts
    assert JobEvent.objects.filter(job=job, type="c4d", payload__rank=1).exists()

    client.force_login(alice)
    page = client.get(f"/jobs/{job.pk}/", follow=True).content.decode()
    assert "compute_forever" in page and "RankNonCommHang" in page


def unrelated_vigil(tmp_path: Path) -> Path:
    """A directory holding somebody else's package named vigil, for a job's PYTHONPATH: it
    shadows the venv's SDK, so the start-up hook injects the backend's copy of this tree's
    SDK, privately (the job's own `import vigil` would still find this one)."""
    other = tmp_path / "other"
    (other / "vigil").mkdir(parents=True)
    (other / "vigil" / "__init__.py").write_text('"""Somebody else\'s package named vigil."""\n')
    for path in (tmp_path, other, other / "vigil"):
        path.chmod(0o755)
    (other / "vigil" / "__init__.py").chmod(0o644)
    return other


# A DDP script that knows nothing of Vigil: no import, no SDK call, no switch of its own.
PLAIN_DDP = """
import os, sys, time
import torch, torch.distributed as dist
from torch import nn
assert "vigil" not in sys.modules
dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def compute_forever():
    while True:
        time.sleep(1)
for step in range(1, 500):
    if step == 4 and rank == 1:
        compute_forever()
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    print(f"step={step} rank={rank}", flush=True)
    time.sleep(0.05)
"""


def test_a_ddp_script_that_never_imports_vigil_gets_its_hung_rank_named_from_pytorchs_flight_recorder(
    alice,
    alice_ws,
    api_as,
    job_body,
    local_backend,
    live_server,
    settings,
    tmp_path,
):
    settings.VIGIL_CONSOLE_URL = live_server.url
    script = tmp_path / "plain_ddp.py"
    script.write_text(PLAIN_DDP)
    script.chmod(0o644)
    r = api_as(alice).post(
        "/api/v1/jobs/",
        job_body(
            alice_ws,
            display_name="plain-ddp-hang",
            user_command=f"{sys.executable} {script}",
            envs={"PYTHONPATH": str(unrelated_vigil(tmp_path))},
            job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
            settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": ARGS},
        ),
        format="json",
    )
    assert r.status_code == 201, r.content
    job = tick_until(Job.objects.get(pk=r.json()["id"]), finished, seconds=90, backend=local_backend, what="hang")
    assert job.status == JobStatus.FAILED and "hung" in job.reason

    # The hook injected the SDK too, but DDP's collectives run in C++ where its wrappers see
    # none: nothing was reported, and the hang is the recorder's.
    assert not C4DReport.objects.filter(job=job).exists()
    c4d = list(Diagnosis.objects.filter(job=job, kind="c4d"))
    assert c4d, (
        [(e.type, e.message) for e in JobEvent.objects.filter(job=job).order_by("pk")],
        {r: len(b) for r, b in local_backend.flight_recorder_dumps(job.attempts.get().backend_handle).items()},
    )
    assert all(d.data["source"] == "flight_recorder" for d in c4d)
    verdicts = {(v["rank"], v["kind"], v["instance"]) for d in c4d for v in d.data["verdicts"]}
    assert verdicts == {(1, "RankNonCommHang", "worker-0")}, verdicts
    # The stack snapshot knows from the recorder which ranks wait inside a collective.
    stacks = Diagnosis.objects.get(job=job, kind="stacks")
    suspects = [s for s in stacks.data["stacks"] if s["suspect"] and not s.get("idle")]
    assert [t["instance"] for s in suspects for t in s["threads"]] == ["worker-0"], stacks.summary


PLAIN_WORKER = ROOT / "examples" / "plain_ddp.py"


def test_a_rank_slow_in_compute_of_a_job_that_never_imports_vigil_is_non_comm_slow_from_the_injected_sdk(
    alice,
    alice_ws,
    api_as,
    job_body,
    local_backend,
    live_server,
    settings,
    tmp_path,
):
    # gloo's recorder has no completion times, so slowness comes from the SDK's own
    # instrumentation, which the backend's start-up hook injects (the backend's copy).
    settings.VIGIL_CONSOLE_URL = live_server.url
    r = api_as(alice).post(
        "/api/v1/jobs/",
        job_body(
            alice_ws,
            display_name="plain-slow",
            user_command=f"{sys.executable} {PLAIN_WORKER}",
            envs={
                "PYTHONPATH": str(unrelated_vigil(tmp_path)),
                "PLAIN_FAULT": "slow_compute",
                "PLAIN_FAULT_RANK": "1",
                "PLAIN_STEPS": "80",
                "PLAIN_SLOW_SECONDS": "0.15",
            },
            job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
            settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": ARGS},
        ),
        format="json",
    )
    assert r.status_code == 201, r.content
    job = tick_until(Job.objects.get(pk=r.json()["id"]), finished, seconds=150, backend=local_backend, what="end")
    assert job.status == JobStatus.SUCCEEDED, job.reason

    assert sorted(C4DReport.objects.filter(job=job).values_list("rank", flat=True)) == [0, 1, 2]
    c4d = list(Diagnosis.objects.filter(job=job, kind="c4d"))
    verdicts = {(v["rank"], v["kind"], v["instance"], v["evidence"]["source"]) for d in c4d for v in d.data["verdicts"]}
    assert verdicts == {(1, "RankNonCommSlow", "worker-0", "sdk")}, verdicts
    assert {d.data["source"] for d in c4d} == {"sdk"}
    assert {(d.data["sources"]["hangs"], d.data["sources"]["slowness"]) for d in c4d} == {("flight_recorder", "sdk")}
