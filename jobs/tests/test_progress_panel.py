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


def test_the_job_page_shows_step_n_of_m_the_rate_and_a_restart_at_the_step_resumed_from(client, alice, alice_ws, bob):
    job = Job.objects.create(
        workspace=alice_ws,
        display_name="train",
        job_type="PyTorchJob",
        user_command="true",
        status=JobStatus.RUNNING,
        current_attempt=2,
    )
    t0 = NOW.timestamp() - 300
    Attempt.objects.create(
        job=job,
        number=1,
        status="Failed",
        queued_at=NOW - timedelta(seconds=400),
        progress_samples=[[t0 + i, i * 10, 3.0 - i * 0.1, 1000] for i in range(10)],
    )
    Attempt.objects.create(
        job=job,
        number=2,
        status="Running",
        queued_at=NOW - timedelta(seconds=200),
        progress_samples=[[NOW.timestamp() - 40 + i * 10, 50 + i * 20, 2.5 - i * 0.1, 1000] for i in range(4)],
    )
    RestartRecord.objects.create(
        job=job,
        number=1,
        kind="job",
        attempt=1,
        new_attempt=2,
        error_code="NCCL_ERROR",
        progress_step=90,
        result="Succeeded",
        idempotency_key=f"pp-{job.pk}",
    )
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
    job = Job.objects.create(
        workspace=alice_ws, display_name="quiet", job_type="PyTorchJob", user_command="true", status=JobStatus.RUNNING
    )
    client.force_login(alice)
    html = client.get(reverse("pages:job-part", args=[alice_ws.slug, job.pk, "progress"])).content.decode()
    assert "No progress yet" in html and "report_progress" in html


def _listed_jobs(alice, alice_ws, memory_backend, n):
    """n jobs that report progress through the SDK and n that only print step lines."""
    from testsupport.factory import submit

    for i in range(n):
        job = Job.objects.create(
            workspace=alice_ws,
            display_name=f"sdk-{i}",
            job_type="PyTorchJob",
            user_command="true",
            status=JobStatus.RUNNING,
            current_attempt=1,
        )
        Attempt.objects.create(
            job=job,
            number=1,
            status="Running",
            queued_at=NOW,
            progress_samples=[[NOW.timestamp() + s, s * 10, 3.0 - s * 0.1, 500] for s in range(20)],
        )
        printed = submit(alice, alice_ws, launch=True, display_name=f"log-{i}")
        attempt = printed.attempts.get(number=1)
        rank0 = attempt.instances.get(rank=0).name
        memory_backend.write_log(
            attempt.backend_handle,
            rank0,
            "".join(f"2026-11-30T12:00:{s:02d}Z Step {s}/40 loss {2.0 + s * 0.05:.2f}\n" for s in range(30)),
        )


def _list_queries(client, slug):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as seen:
        html = client.get(reverse("pages:job-list", args=[slug])).content.decode()
    return len(seen), html


def test_the_job_list_draws_each_jobs_loss_sparkline_in_queries_that_do_not_grow_with_the_jobs(
    client, alice, alice_ws, memory_backend
):
    client.force_login(alice)
    _listed_jobs(alice, alice_ws, memory_backend, 3)
    few, html = _list_queries(client, alice_ws.slug)
    labels = re.findall(r'<svg role="img" aria-label="([^"]+)"', html)
    # the SDK's samples (falling) and the printed step lines (rising), each said in words
    assert labels.count("Loss falling from 3 to 1.1, step 190 of 500") == 3
    assert labels.count("Loss rising from 2 to 3.45, step 29 of 40") == 3
    points = re.findall(r'<polyline points="([^"]+)"', html)
    assert len(points) == 6 and all(len(p.split()) == 20 or len(p.split()) == 30 for p in points)
    _listed_jobs(alice, alice_ws, memory_backend, 3)
    many, html = _list_queries(client, alice_ws.slug)
    assert len(re.findall(r'<svg role="img" aria-label="Loss', html)) == 12
    assert many == few  # one query for every job's samples, one for the silent jobs' rank 0: not one per row


def test_a_job_row_refreshed_alone_has_the_same_sparkline_as_the_list(client, alice, alice_ws, memory_backend):
    client.force_login(alice)
    _listed_jobs(alice, alice_ws, memory_backend, 1)
    html = client.get(reverse("pages:job-list", args=[alice_ws.slug])).content.decode()
    for job in Job.objects.filter(workspace=alice_ws):
        row = client.get(reverse("pages:job-row", args=[alice_ws.slug, job.pk])).content.decode()
        spark = re.search(r'<td class="spark">.*?</td>', row, re.S).group(0)
        assert spark in html and "<polyline" in spark
