"""The one job factory: every test that needs a submitted job builds it here, so a
change to the CreateJob body (a new required field, a renamed setting) is made once."""

from __future__ import annotations

import sys
from pathlib import Path

from jobs import actions
from jobs.models import Job


def pytorch_job(workspace, **overrides) -> dict:
    """A valid CreateJob body: one Master and one Worker running `echo hello`."""
    body = {
        "workspace": workspace.slug if hasattr(workspace, "slug") else workspace,
        "display_name": "resnet-ddp",
        "job_type": "PyTorchJob",
        "job_specs": [
            {"type": "Master", "pod_count": 1, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}},
            {"type": "Worker", "pod_count": 1, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}},
        ],
        "user_command": "echo hello",
        "envs": {},
        "backend": "local",
        "settings": {"enable_error_monitoring_in_aimaster": False, "error_monitoring_args": ""},
    }
    body.update(overrides)
    return body


def with_flags(flags: str | None) -> dict:
    """The body's `settings` for a flag string: monitoring on with those flags, off for
    None or an empty string (the form's "Error monitoring" switch)."""
    return {"enable_error_monitoring_in_aimaster": bool(flags), "error_monitoring_args": flags or ""}


def script_command(path: Path, code: str | None = None, *args: str) -> str:
    """`python path args...`, writing `code` to `path` first when given."""
    if code is not None:
        path.write_text(code)
    return " ".join([sys.executable, str(path), *args])


def submit(who, workspace, *, flags: str | None = None, launch: bool = False, **fields) -> Job:
    """Submit a job as a person would: `who` is an API client (POST /api/v1/jobs/, which
    must answer 201) or a user (the domain's submit_job, as the form does). `flags` set
    the monitoring settings; other keyword arguments override the body's fields.
    `launch=True` starts attempt 1 in-process (a test without Celery's on-commit send)."""
    if flags is not None:  # the flags decide the settings, over a body's own
        fields["settings"] = with_flags(flags)
    body = pytorch_job(workspace, **fields)
    if hasattr(who, "post"):
        r = who.post("/api/v1/jobs/", body, format="json")
        assert r.status_code == 201, r.content
        job = Job.objects.get(pk=r.json()["id"])
    else:
        job, _ = actions.submit_job(who, body)
    if launch:
        actions.launch_attempt(job.pk, 1)
        job.refresh_from_db()
    return job
