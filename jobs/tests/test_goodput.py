"""jobs.goodput, the one ledger behind the goodput endpoint and the Reliability
page: attempts that overlap in time count their shared time once on both."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse

from jobs.models import Job, JobStatus

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def ago(seconds):
    return NOW - timedelta(seconds=seconds)


def test_overlapping_attempts_show_one_ettr_under_100_percent_on_the_endpoint_and_the_page(client, alice, alice_ws):
    job = Job.objects.create(
        workspace=alice_ws,
        display_name="train",
        job_type="PyTorchJob",
        user_command="true",
        status=JobStatus.RUNNING,
        created_at=ago(200),
    )
    # attempt 1's end was stamped only now, while attempt 2 has been training for 85 s:
    # the page showed 183 %
    job.attempts.create(
        number=1,
        status="Failed",
        queued_at=ago(100),
        starting_at=ago(99),
        running_at=ago(98),
        first_progress_at=ago(98),
        ended_at=NOW,
        made_progress=True,
    )
    job.attempts.create(
        number=2,
        status="Running",
        queued_at=ago(90),
        starting_at=ago(89),
        running_at=ago(86),
        first_progress_at=ago(85),
        made_progress=True,
    )
    client.force_login(alice)
    with time_machine.travel(NOW, tick=False):
        api = client.get(f"/api/v1/jobs/{job.pk}/goodput/").json()
        page = client.get(reverse("pages:reliability", args=[alice_ws.slug])).content.decode()
    assert [a["productive"] for a in api["attempts"]] == [13, 85]
    assert (api["productive"], api["wall_clock"], api["ettr"]) == (98, 100, 0.98)
    assert re.findall(r'<td class="num ettr">([^<]*)</td>', page) == ["98%"]
