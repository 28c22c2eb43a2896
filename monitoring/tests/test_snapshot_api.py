"""The on-demand stack snapshot endpoint (POST /api/v1/jobs/{id}/diagnoses/stacks/)
refuses what it must without taking a snapshot: another workspace's job is not found,
an unknown id is not found, a finished job has nothing to take stacks of."""

from __future__ import annotations

import pytest

from jobs import actions
from jobs.models import Diagnosis, Job, JobStatus

pytestmark = pytest.mark.django_db


def url(job_id) -> str:
    return f"/api/v1/jobs/{job_id}/diagnoses/stacks/"


@pytest.fixture
def job(alice, alice_ws, job_body, memory_backend):
    job, _ = actions.submit_job(alice, job_body(alice_ws))
    actions.launch_attempt(job.pk, 1)
    job.refresh_from_db()
    return job


def test_another_workspaces_user_gets_404_and_no_snapshot(api_as, bob, job):
    assert api_as(bob).post(url(job.pk)).status_code == 404
    assert not Diagnosis.objects.filter(job=job).exists()


def test_an_unknown_job_is_404(api_as, alice, job):
    assert api_as(alice).post(url(job.pk + 1000)).status_code == 404


def test_a_stopped_job_is_a_400_naming_the_job_and_no_snapshot(api_as, alice, job):
    Job.objects.filter(pk=job.pk).update(status=JobStatus.STOPPED)
    r = api_as(alice).post(url(job.pk))
    assert r.status_code == 400 and "job" in r.json()
    assert not Diagnosis.objects.filter(job=job).exists()
