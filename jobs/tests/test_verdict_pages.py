"""How sure a verdict is, on restart records and the job page, and the owner/admin offer
to make a failure's line a retryable keyword (issue 13)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs import actions
from jobs.models import EventType, Job, JobEvent, JobStatus, RestartRecord, Workspace
from jobs.verdicts import describe
from monitoring.failures import keywords_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice, alice_ws, job_body):
    job, _ = actions.submit_job(alice, job_body(alice_ws))
    return job


def offer(client, ws, job, **data):
    return client.post(reverse("pages:retryable-keyword", args=[ws.slug, job.pk]), data)


def record(job, **fields):
    values = dict(
        job=job,
        number=1,
        kind="job",
        attempt=1,
        new_attempt=2,
        instance_name="worker-0",
        error_code="NCCL_SYSTEM_ERROR",
        error_message="NCCL reported an unhandled system error",
        error_source="Log",
        family="network",
        rule="nccl-system-error",
        evidence="RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled system error",
        reason="Restarting the whole job",
        idempotency_key=f"rr-{job.pk}",
    )
    values.update(fields)
    return RestartRecord.objects.create(**values)


# ---- the words ---------------------------------------------------------------------


def test_describe_says_plainly_when_only_the_exit_status_decided():
    v = describe("ExitCode", "", "", "EXIT_CODE_1")
    assert v.basis == "No known signature; decided by exit code 1." and v.by_exit_status and v.evidence == ""
    assert describe("ExitCode", "signals", "", "SIGKILL").basis == "No known signature; decided by signal SIGKILL."
    v = describe("Log", "network", "Connection reset by peer", "ECONNRESET")
    assert "network signature" in v.basis and v.evidence == "Connection reset by peer" and not v.by_exit_status
    assert "scheduler's reason Evicted" in describe("Backend", "preemption", "Evicted", "PREEMPTED").basis


def test_a_restart_record_page_shows_family_and_evidence_and_offers_the_line_to_an_owner(client, alice, alice_ws, job):
    r = record(job)
    client.force_login(alice)
    body = client.get(reverse("pages:restart", args=[alice_ws.slug, job.pk, r.pk])).content.decode()
    assert "data-family>network<" in body
    assert "unhandled system error</pre>" in body
    assert (
        'name="keyword" value="RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled system error"' in body
    )


def test_an_exit_status_decision_is_said_plainly_and_a_member_gets_no_offer(client, dave, alice_ws, job):
    r = record(
        job, error_source="ExitCode", error_code="EXIT_CODE_1", family="", evidence="", rule="crashed-with-exit-code"
    )
    client.force_login(dave)  # a member: may write, not administer
    body = client.get(reverse("pages:restart", args=[alice_ws.slug, job.pk, r.pk])).content.decode()
    assert "No known signature; decided by exit code 1." in body
    assert "data-keyword-offer" not in body


def test_a_failed_jobs_page_says_how_sure_the_verdict_was(client, alice, alice_ws, job):
    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, reason="Not restarted: worker-0 crashed.")
    actions.record_event(
        job,
        EventType.JOB_FAILED,
        "Not restarted",
        payload={
            "rule": "crashed-with-exit-code",
            "error_code": "EXIT_CODE_1",
            "error_source": "ExitCode",
            "family": "",
            "evidence": "",
            "instance": "worker-0",
        },
    )
    client.force_login(alice)
    body = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    assert "No known signature; decided by exit code 1." in body
    assert "data-keyword-offer" in body and 'placeholder="a line from the log"' in body


# ---- the endpoint ---------------------------------------------------------------------


def test_an_owner_adds_a_line_for_the_job_and_the_classifier_then_uses_it(client, alice, alice_ws, job):
    client.force_login(alice)
    r = offer(client, alice_ws, job, keyword="  CUDA error: misaligned address  ", scope="job")
    assert r.status_code == 302
    job.refresh_from_db()
    assert job.retryable_keywords == ["CUDA error: misaligned address"]
    assert "CUDA error: misaligned address" in keywords_of(job)
    event = JobEvent.objects.get(job=job, type=EventType.DECISION, payload__scope="job")
    assert "alice made" in event.message
    # twice is once
    assert offer(client, alice_ws, job, keyword="CUDA error: misaligned address", scope="job").status_code == 302
    job.refresh_from_db()
    assert job.retryable_keywords == ["CUDA error: misaligned address"]


def test_a_workspace_keyword_counts_for_every_job_of_the_workspace(client, alice, alice_ws, job, job_body):
    other, _ = actions.submit_job(alice, job_body(alice_ws))
    client.force_login(alice)
    r = client.post(
        reverse("pages:retryable-keyword", args=[alice_ws.slug, job.pk]),
        {"keyword": "Xid 119", "scope": "workspace"},
        HTTP_HX_REQUEST="true",
    )
    assert r.status_code == 200 and "every job of" in r.content.decode()
    assert Workspace.objects.get(pk=alice_ws.pk).retryable_keywords == ["Xid 119"]
    other = Job.objects.select_related("workspace").get(pk=other.pk)
    assert "Xid 119" in keywords_of(other)
    job.refresh_from_db()
    assert job.retryable_keywords == []


@pytest.mark.parametrize(
    "data, field",
    [
        ({"keyword": "", "scope": "job"}, "keyword"),
        ({"keyword": "   ", "scope": "job"}, "keyword"),
        ({"keyword": "x" * 257, "scope": "job"}, "keyword"),
        ({"keyword": "two\nlines", "scope": "job"}, "keyword"),
        ({"scope": "job"}, "keyword"),
        ({"keyword": "fine", "scope": "cluster"}, "scope"),
        ({"keyword": "fine"}, "scope"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(client, alice, alice_ws, job, data, field):
    client.force_login(alice)
    r = offer(client, alice_ws, job, **data)
    assert r.status_code == 400
    assert f"{field}:" in r.content.decode()
    job.refresh_from_db()
    assert job.retryable_keywords == [] and Workspace.objects.get(pk=alice_ws.pk).retryable_keywords == []


def test_a_member_or_viewer_may_not_add_keywords(client, carol, dave, alice_ws, job):
    for user in (carol, dave):
        client.force_login(user)
        assert offer(client, alice_ws, job, keyword="fine", scope="workspace").status_code == 403
    job.refresh_from_db()
    assert job.retryable_keywords == [] and Workspace.objects.get(pk=alice_ws.pk).retryable_keywords == []


def test_another_workspaces_owner_cannot_reach_the_job(client, bob, bob_ws, alice_ws, job):
    client.force_login(bob)
    assert offer(client, alice_ws, job, keyword="fine", scope="job").status_code == 404
    # nor through their own workspace's address
    assert offer(client, bob_ws, job, keyword="fine", scope="workspace").status_code == 404
    job.refresh_from_db()
    assert job.retryable_keywords == []
    assert Workspace.objects.get(pk=bob_ws.pk).retryable_keywords == []


def test_the_endpoint_takes_only_post(client, alice, alice_ws, job):
    client.force_login(alice)
    assert client.get(reverse("pages:retryable-keyword", args=[alice_ws.slug, job.pk])).status_code == 405
