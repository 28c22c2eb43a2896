"""The workspace Reliability page through Django's test client: members only,
the period selector (a refused value is a 400 naming the field, with the page
for the default period), this workspace's restarts and faults only, the same
ETTR as the goodput endpoint. Logged-out and cross-workspace cases are also in
test_pages (every page)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse

from jobs.models import Job, JobStatus, NodeFault, RestartRecord

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def make_job(ws, name="train"):
    return Job.objects.create(
        workspace=ws,
        display_name=name,
        job_type="PyTorchJob",
        user_command="true",
        status=JobStatus.RUNNING,
        created_at=NOW - timedelta(days=2),
    )


def restart(job, n, ago, code="NCCL_ERROR", family="", node="node-a"):
    return RestartRecord.objects.create(
        job=job,
        number=n,
        kind="job",
        attempt=n,
        new_attempt=n + 1,
        node_name=node,
        instance_name="worker-0",
        error_code=code,
        family=family,
        result="Succeeded",
        idempotency_key=f"rel-{job.pk}-{n}",
        restart_time=NOW - ago,
    )


def table(html, table_id) -> list[tuple[str, ...]]:
    """The first two cells of each body row of a table, as text."""
    found = re.search(rf'<table class="dense" id="{table_id}">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert found, table_id
    return [
        tuple(re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S))[:2]
        for row in re.findall(r"<tr>(.*?)</tr>", found.group(1), re.S)
    ]


def url(ws, period=None):
    return reverse("pages:reliability", args=[ws.slug]) + (f"?period={period}" if period is not None else "")


def test_the_page_counts_this_workspaces_restarts_in_the_period_by_cause_node_and_code(client, alice, alice_ws, bob_ws):
    job = make_job(alice_ws)
    restart(job, 1, timedelta(hours=1), family="nccl", node="node-b")
    restart(job, 2, timedelta(hours=2), code="OOM", node="node-a")
    restart(job, 3, timedelta(hours=3), node="node-a")
    restart(job, 4, timedelta(days=3), node="node-c")  # in 7 d, not in 24 h
    theirs = make_job(bob_ws, "theirs")
    restart(theirs, 1, timedelta(hours=1), node="node-z")  # another workspace's: never shown
    NodeFault.objects.create(node="node-z", job=theirs, error_code="NCCL_ERROR", created_at=NOW - timedelta(hours=1))
    for _ in range(2):
        NodeFault.objects.create(node="node-a", job=job, error_code="NCCL_ERROR", created_at=NOW - timedelta(hours=2))
    client.force_login(alice)
    with time_machine.travel(NOW, tick=False):
        day = client.get(url(alice_ws, "24h")).content.decode()
        week = client.get(url(alice_ws)).content.decode()
    assert table(day, "by-node") == [("node-a", "2"), ("node-b", "1")]
    assert table(day, "by-code") == [("NCCL_ERROR", "2"), ("OOM", "1")]
    assert table(day, "by-cause") == [("NCCL_ERROR", "1"), ("OOM", "1"), ("nccl", "1")]
    assert day.count('<g class="bar"') == 24 and '<span id="restart-total">3</span>' in day
    assert table(week, "by-node") == [("node-a", "2"), ("node-b", "1"), ("node-c", "1")]
    assert week.count('<g class="bar"') == 7
    assert "node-z" not in day and "theirs" not in day
    # the faulty node links to its restart records
    assert table(day, "fault-nodes")[0] == ("node-a", "2")
    for rec in RestartRecord.objects.filter(job=job, node_name="node-a", number__in=[2, 3]):
        assert reverse("pages:restart", args=[alice_ws.slug, job.pk, rec.pk]) in day


def test_a_refused_period_is_a_400_naming_the_field_with_the_default_periods_page(client, alice, alice_ws):
    client.force_login(alice)
    response = client.get(url(alice_ws, "1y"))
    assert response.status_code == 400
    text = response.content.decode()
    assert "period &#x27;1y&#x27; is not one of 24h, 7d, 30d; showing 7d." in text
    assert '<a href="?period=7d" aria-current="page">' in text
    assert client.get(url(alice_ws, "30d")).status_code == 200


def test_goodput_per_job_is_the_goodput_endpoints_ettr(client, alice, alice_ws):
    job = make_job(alice_ws)
    attempt = job.attempts.create(
        number=1,
        queued_at=NOW - timedelta(seconds=100),
        starting_at=NOW - timedelta(seconds=90),
        running_at=NOW - timedelta(seconds=80),
        first_progress_at=NOW - timedelta(seconds=75),
        made_progress=True,
    )
    assert attempt.pk
    client.force_login(alice)
    with time_machine.travel(NOW, tick=False):
        api = client.get(f"/api/v1/jobs/{job.pk}/goodput/").json()
        page = client.get(url(alice_ws)).content.decode()
    assert api["ettr"] == 0.75
    cell = re.search(r'<td class="num ettr">([^<]*)</td>', page).group(1)
    assert cell == "75%"


def test_a_non_member_gets_404_and_a_logged_out_visitor_the_login_page(client, bob, alice_ws):
    assert client.get(url(alice_ws))["Location"].startswith(reverse("login"))
    client.force_login(bob)
    assert client.get(url(alice_ws)).status_code == 404
