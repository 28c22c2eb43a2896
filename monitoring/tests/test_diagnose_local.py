"""Hang diagnoses on real processes: stack snapshots naming the hung function,
on-demand snapshots, C4D errors proposing a virtual node for isolation, stragglers from logs."""

import shutil
import textwrap
import time

import pytest
from django.utils import timezone

from testsupport.jobs import job_writable
from jobs.models import Attempt, C4DReport, Diagnosis, Job, JobEvent, JobStatus, RestartRecord
from monitoring import checks, diagnose
from testsupport.monitor import tick_until
from core.stacks import NOT_PYTHON
from testsupport import factory

pytestmark = pytest.mark.django_db(transaction=True)

HUNG = textwrap.dedent(
    """
    import os, time
    def stuck_in_data_loader():
        time.sleep(120)
    def wait_for_peers():
        time.sleep(120)
    print("step=1", flush=True)
    if os.environ["VIGIL_INSTANCE"] == "worker-1":
        stuck_in_data_loader()
    else:
        wait_for_peers()
    """
)

STEPS = textwrap.dedent(
    """
    import datetime, os, time
    slow = os.environ["VIGIL_INSTANCE"] == os.environ.get("SLOW", "")
    for step in range(1, 40):
        time.sleep(0.25 if slow else 0.03)
        now = datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        print(f"{now} step={step} loss=0.5", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def api(alice, alice_ws, api_as):
    return api_as(alice)


@pytest.fixture
def nodes_backend(settings, tmp_path, _test_wiring):
    """The local backend presenting this machine as three one-slot virtual nodes."""
    from jobs.backends import get_backend, reset_backends

    job_writable(tmp_path)  # the job's script is there
    data = tmp_path / "nodes-backend"
    settings.JOB_BACKENDS = {
        "local": {
            "BACKEND": "jobs.backends.local.LocalBackend",
            "OPTIONS": {
                "data_dir": str(data),
                "redis_url": None,
                "grace": 1.0,
                "nodes": [
                    {"name": "node-a", "slots": 1},
                    {"name": "node-b", "slots": 1},
                    {"name": "node-c", "slots": 1},
                ],
            },
        }
    }
    reset_backends()
    backend = get_backend("local")
    yield backend
    backend.stop_everything(grace=0.5)
    reset_backends()
    shutil.rmtree(data, ignore_errors=True)


def submit(api, ws, body, code, path, args, envs=None, specs=None):
    return factory.submit(
        api,
        ws,
        flags=args,
        user_command=factory.script_command(path, code),
        envs=envs or {},
        job_specs=specs or [{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
    )


def test_a_hang_takes_a_stack_snapshot_whose_suspect_names_the_hung_function(
    api, alice_ws, job_body, local_backend, tmp_path
):
    job = submit(
        api,
        alice_ws,
        job_body,
        HUNG,
        tmp_path / "hung.py",
        "--enable-job-restart=True --max-num-of-job-restart=1 --enable-job-hang-detection=True --job-hang-interval=2",
    )
    tick_until(job, lambda j: j.current_attempt == 2)
    diagnosis = Diagnosis.objects.get(job=job, kind="stacks", attempt=1)
    assert diagnosis.trigger == "hang"
    suspects = [s for s in diagnosis.data["stacks"] if s["suspect"]]
    assert len(suspects) == 1
    frames = suspects[0]["frames"]
    assert any(f["function"] == "stuck_in_data_loader" and f["line"] == 4 for f in frames), frames
    assert [t["instance"] for t in suspects[0]["threads"]] == ["worker-1"]
    others = [s for s in diagnosis.data["stacks"] if not s["suspect"]]
    assert others and others[0]["count"] == 2
    event = JobEvent.objects.get(job=job, type="stack_analysis")
    assert "stuck_in_data_loader" in event.message and event.payload["diagnosis"] == diagnosis.pk
    # The snapshot was taken before the restart, while the ranks still hung.
    assert event.id < JobEvent.objects.get(job=job, type="restart").id
    assert diagnosis.data["culprits"]["suspects"][0]["instance"] == "worker-1"
    assert diagnosis.data["culprits"]["why"].startswith("worker-1 (rank 2) is in stuck_in_data_loader")

    # The hang's restart record is as good as a crash's: who, why, what next, where to look.
    record = RestartRecord.objects.get(job=job)
    assert (record.error_source, record.rule, record.error_code) == ("Hang", "hang", "HANG")
    assert record.cause == (
        "worker-1 stopped making progress in `stuck_in_data_loader` while master-0 "
        "and worker-0 were in `wait_for_peers`."
    )
    assert "worker-1" in record.next_step and "stuck_in_data_loader" in record.next_step
    assert record.instance_name == "worker-1" and record.evidence == "step=1"
    assert record.stack_snapshot == diagnosis
    log = local_backend.read_log(Attempt.objects.get(job=job, number=1).backend_handle, "worker-1")
    assert log[record.log_offset :].rstrip() == b"step=1"


def test_the_hang_restart_record_page_shows_cause_next_step_snapshot_link_and_last_line(
    api, alice, alice_ws, job_body, local_backend, tmp_path, client
):
    job = submit(
        api,
        alice_ws,
        job_body,
        HUNG,
        tmp_path / "hung.py",
        "--enable-job-restart=True --max-num-of-job-restart=1 --enable-job-hang-detection=True --job-hang-interval=2",
    )
    tick_until(job, lambda j: j.current_attempt == 2)
    record = RestartRecord.objects.get(job=job)
    diagnosis = Diagnosis.objects.get(job=job, kind="stacks", attempt=1)
    client.force_login(alice)
    page = client.get(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/restarts/{record.pk}/").content.decode()
    assert "stopped making progress in `stuck_in_data_loader`" in page and "Next step" in page
    link = f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/diagnoses/{diagnosis.pk}/"
    assert f'href="{link}" data-snapshot-link' in page
    assert "last log line" in page and "data-last-line>step=1</pre>" in page, page[page.find("Stack snapshot") :][:600]
    snapshot = client.get(link).content.decode()
    assert "stuck_in_data_loader" in snapshot and "data-culprit>worker-1 (rank 2) is in" in snapshot


def test_a_stack_snapshot_can_be_taken_on_demand_through_the_api(
    api, alice_ws, job_body, local_backend, tmp_path, carol, api_as
):
    job = submit(api, alice_ws, job_body, HUNG, tmp_path / "hung.py", "")
    tick_until(job, lambda j: j.status == JobStatus.RUNNING)
    time.sleep(0.3)  # let the interpreters start their functions
    assert api_as(carol).post(f"/api/v1/jobs/{job.pk}/diagnoses/stacks/").status_code == 403
    r = api.post(f"/api/v1/jobs/{job.pk}/diagnoses/stacks/")
    assert r.status_code == 201, r.content
    data = r.json()
    assert data["trigger"] == "on_demand" and len(data["data"]["processes"]) == 3
    assert api.get(f"/api/v1/jobs/{job.pk}/diagnoses/").json()[0]["id"] == data["id"]


def test_a_stack_snapshot_says_why_when_there_is_no_python_process(api, alice_ws, job_body, local_backend):
    r = api.post("/api/v1/jobs/", job_body(alice_ws, user_command="sleep 30"), format="json")
    job = tick_until(Job.objects.get(pk=r.json()["id"]), lambda j: j.status == JobStatus.RUNNING)
    diagnosis = diagnose.snapshot_stacks(job, Attempt.objects.get(job=job, number=1), trigger="on_demand")
    processes = diagnosis.data["processes"]
    assert len(processes) == 2 and not any(p["ok"] for p in processes)
    assert all(p["error_code"] == NOT_PYTHON for p in processes), processes
    assert "0 dumped" in diagnosis.summary and "no Python process runs under master-0" in diagnosis.summary


def test_a_c4d_error_proposes_the_ranks_virtual_node_and_the_jobs_next_attempt_avoids_it(
    api, alice_ws, job_body, nodes_backend, tmp_path
):
    job = submit(
        api,
        alice_ws,
        job_body,
        HUNG,
        tmp_path / "hung.py",
        "--enable-job-restart=True --enable-job-hang-detection=True --job-hang-interval=600 "
        "--enable-c4d-hang-detection=True --c4d-log-level=Info "
        "--c4d-common-envs=C4D_HANG_TIMEOUT=1000000,C4D_HANG_TIMES=1,C4D_CONN_BW_CHECK_PERIOD=1",
        specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 1}],
    )
    tick_until(job, lambda j: j.status == JobStatus.RUNNING)
    attempt = Attempt.objects.get(job=job, number=1)
    nodes = dict(attempt.instances.values_list("rank", "node"))
    assert set(nodes.values()) == {"node-a", "node-b"}
    # Rank 0 waits in all_reduce #5 for 3 s; rank 1 finished #4 and never entered #5: hung in compute.
    t = time.time()
    C4DReport.objects.create(
        job=job,
        attempt=1,
        rank=0,
        records=[
            {"seq": 4, "op": "all_reduce", "enter": t - 4.0, "exit": t - 3.9},
            {"seq": 5, "op": "all_reduce", "enter": t - 3.0, "exit": None},
        ],
    )
    C4DReport.objects.create(
        job=job, attempt=1, rank=1, records=[{"seq": 4, "op": "all_reduce", "enter": t - 4.0, "exit": t - 3.9}]
    )
    tick_until(job, lambda j: j.current_attempt == 2)
    c4d = JobEvent.objects.filter(job=job, type="c4d", level="error")
    assert c4d.exists() and "RankNonCommHang" in c4d.first().message
    # One job's own reports do not take a shared node out of service (issue 31): the
    # node is proposed to staff and stays schedulable; this job's retry avoids it.
    bad = nodes[1]
    assert not JobEvent.objects.filter(job=job, type="node_isolated").exists()
    proposed = JobEvent.objects.get(job=job, type="decision", payload__proposed=True)
    assert proposed.payload["node"] == bad and "proposed for isolation" in proposed.message
    assert RestartRecord.objects.get(job=job).error_source == "C4D"
    assert {n.name: n.schedulable for n in nodes_backend.list_nodes()}[bad] is True
    tick_until(job, lambda j: j.status == JobStatus.RUNNING)
    new_nodes = set(Attempt.objects.get(job=job, number=2).instances.values_list("node", flat=True))
    assert bad not in new_nodes and new_nodes


def test_a_slow_rank_is_flagged_from_its_log_timestamps_without_the_sdk(
    api, alice_ws, job_body, local_backend, tmp_path
):
    job = submit(api, alice_ws, job_body, STEPS, tmp_path / "steps.py", "", envs={"SLOW": "worker-0"})
    tick_until(job, lambda j: j.status == JobStatus.RUNNING)
    attempt = Attempt.objects.get(job=job, number=1)
    deadline = time.monotonic() + 20
    while b"step=12" not in local_backend.read_log(attempt.backend_handle, "worker-0"):
        assert time.monotonic() < deadline, "the slow rank never logged 12 steps"
        time.sleep(0.2)
    job.refresh_from_db()
    verdicts = checks.check_stragglers(
        job, attempt, list(attempt.instances.all()), local_backend, timezone.now() + timezone.timedelta(hours=1)
    )
    assert [v.rank for v in verdicts] == ["worker-0"]
    event = JobEvent.objects.get(job=job, type="straggler")
    assert event.instance == "worker-0" and "straggler" in event.message
    assert Diagnosis.objects.filter(job=job, kind="straggler").exists()
