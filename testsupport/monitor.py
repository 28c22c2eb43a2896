"""Helpers for tests that drive the monitor over real or in-memory backends."""

from __future__ import annotations

import time
from collections.abc import Callable

from jobs.models import Attempt, Job, JobEvent, JobStatus
from monitoring import tick
from testsupport.factory import script_command, submit
from testsupport.jobs import job_writable


def finished(job: Job) -> bool:
    return job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)


def tick_until(
    job: Job, done: Callable[[Job], bool], seconds: float = 20.0, *, backend=None, what: str = "", every: float = 0.1
) -> Job:
    """Tick the monitor as the sweep would until done(job) holds; at the deadline,
    fail with the job's status, its events and (given the backend) its log tail."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tick.run_job(job.pk)
        job.refresh_from_db()
        if done(job):
            return job
        time.sleep(every)
    events = "\n".join(f"  {e.type}: {e.message}" for e in JobEvent.objects.filter(job=job).order_by("id"))
    log = ""
    if backend is not None:
        try:
            attempt = Attempt.objects.get(job=job, number=job.current_attempt)
            name = attempt.instances.order_by("rank").values_list("name", flat=True).first()
            log = backend.read_log(attempt.backend_handle, name).decode("utf-8", "replace")[-2000:]
        except Exception as exc:  # noqa: BLE001 - the failure message must not fail
            log = f"(no log: {exc!r})"
    raise AssertionError(
        f"job {job.pk} did not {what or 'get there'} within {seconds} s: it is {job.status} "
        f"on attempt {job.current_attempt} ({job.reason}).\nevents:\n{events}\nlog:\n{log}"
    )


def subprocess_database_url() -> str:
    """DATABASE_URL for a process a test starts (a worker, a daphne): the test's own database."""
    from django.db import connection

    d = connection.settings_dict
    if d["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{d['NAME']}"
    auth = (d.get("USER") or "") + (f":{d['PASSWORD']}" if d.get("PASSWORD") else "")
    return f"postgres://{auth}@{d.get('HOST') or '127.0.0.1'}:{d.get('PORT') or 5432}/{d['NAME']}"


# worker-0 fails once with a retryable NCCL error (a marker file remembers it); the
# restarted attempt runs clean. Used by tests that need one real restart.
FAULT_ONCE_SCRIPT = """
import os, sys, time
me = os.environ["VIGIL_INSTANCE"]
marker = os.path.join(os.environ["MARKERS"], me)
if me == "worker-0" and not os.path.exists(marker):
    open(marker, "w").close()
    print("step=1 loss=0.9", flush=True)
    print("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled system error, NCCL version 2.18.1",
          file=sys.stderr, flush=True)
    sys.exit(1)
for step in range(1, 4):
    print(f"step={step}", flush=True)
    time.sleep(0.05)
"""
SYNC_RESTART_ARGS = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg"
)


def submit_fault_once(api, body: dict, tmp_path) -> Job:
    """Submit `body` (a CreateJob body) running FAULT_ONCE_SCRIPT through the API."""
    job_writable(tmp_path / "markers")  # run as root, the job is nobody and leaves its marker there
    body = {
        **body,
        "user_command": script_command(tmp_path / "fault_once.py", FAULT_ONCE_SCRIPT),
        "envs": {"MARKERS": str(tmp_path / "markers")},
    }
    return submit(api, body.pop("workspace"), flags=SYNC_RESTART_ARGS, **body)
