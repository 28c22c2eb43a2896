"""The job page's progress panel through Django's test client: step N of M,
steps/s, the last progress, and the loss chart with a restart marked at the
step it resumed from, from report_progress samples (loss and total_steps kept
by the SDK's progress view); the panel is a part of the page (members only)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse

from jobs.models import Attempt, Job, JobStatus, RestartRecord

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_the_job_page_shows_step_n_of_m_the_rate_and_a_restart_at_the_step_resumed_from(client, alice, alice_ws,
                                                                                             bob):
    job = Job.objects.create(workspace=alice_ws, display_name="train", job_type="PyTorchJob", user_command="true",
                             status=JobStatus.RUNNING, current_attempt=2)
    t0 = NOW.timestamp() - 300
    Attempt.objects.create(job=job, number=1, status="Failed", queued_at=NOW - timedelta(seconds=400),
                           progress_samples=[[t0 + i, i * 10, 3.0 - i * 0.1, 1000] for i in range(10)])
    Attempt.objects.create(job=job, number=2, status="Running", queued_at=NOW - timedelta(seconds=200),
                           progress_samples=[[NOW.timestamp() - 40 + i * 10, 50 + i * 20, 2.5 - i * 0.1, 1000]
                                             for i in range(4)])
    RestartRecord.objects.create(job=job, number=1, kind="job", attempt=1, new_attempt=2, error_code="NCCL_ERROR",
                                 progress_step=90, result="Succeeded", idempotency_key=f"pp-{job.pk}")
    client.force_login(alice)
    part = reverse("pages:job-part", args=[alice_ws.slug, job.pk, "progress"])
    with time_machine.travel(NOW, tick=False):
        html = client.get(part).content.decode()
        page = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "Step 110 of 1000" in text
    assert "2.00 steps/s" in text  # 20 steps every 10 s in the newest attempt
    assert "10s ago" in text
    assert html.count("<polyline") == 2  # one line per attempt
    assert re.findall(r'class="restart-mark"[^>]*data-step="(\d+)"', html) == ["50"]
    assert "NCCL_ERROR: resumed from step 50 (40 steps done again)" in text
    assert 'id="part-progress"' in page
    client.force_login(bob)
    assert client.get(part).status_code == 404


def test_no_progress_says_how_to_report_it(client, alice, alice_ws):
    job = Job.objects.create(workspace=alice_ws, display_name="quiet", job_type="PyTorchJob", user_command="true",
                             status=JobStatus.RUNNING)
    client.force_login(alice)
    html = client.get(reverse("pages:job-part", args=[alice_ws.slug, job.pk, "progress"])).content.decode()
    assert "No progress yet" in html and "report_progress" in html
