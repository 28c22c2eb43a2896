"""A retryable keyword tried on past failures before it is kept, over the API (issue 26):
POST /api/v1/jobs/{id}/retryable-keywords/preview/ back-tests, POST
/api/v1/jobs/{id}/retryable-keywords/ saves; one serializer validates both. The past
failures are made by the real monitor over the in-memory backend, from real logs of the
failure corpus."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobs import actions
from jobs.models import Attempt, Job, JobEvent, JobStatus, RestartRecord, Workspace
from monitoring import restarts, tick
from testsupport import factory

pytestmark = pytest.mark.django_db

SYNC = "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3"
CORPUS = Path(__file__).resolve().parents[1] / "corpus"
WATCHDOG = "Watchdog caught collective operation timeout"


def corpus_log(entry_id: str) -> bytes:
    family = entry_id.rsplit("-", 1)[0]
    for line in (CORPUS / f"{family}.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["id"] == entry_id:
            return entry["log"].encode() + b"\n"
    raise LookupError(entry_id)


def handle(job, number):
    return Attempt.objects.get(job=job, number=number).backend_handle


def fail(backend, job, number, log: bytes, before: bytes = b""):
    """Attempt `number`'s worker fails with `log` and the monitor decides on it."""
    h = handle(job, number)
    backend.write_log(h, "worker-0", before + log)
    backend.finish(h, "worker-0", exit_code=1)
    return tick.run_job(job.pk, now=timezone.now() + timedelta(seconds=restarts.CASCADE_SETTLE_SECONDS + 1))


@pytest.fixture
def past(alice, alice_ws, memory_backend):
    """Two jobs of Alice Lab with a past: `watchdog` failed on a collective timeout (not
    retryable in the catalog); `gateway` was restarted on a 502 and its next attempt trained."""
    watchdog = factory.submit(alice, alice_ws, flags=SYNC, launch=True, display_name="watchdog")
    assert fail(memory_backend, watchdog, 1, corpus_log("collective-timeout-001")).action == "fail_job"
    gateway = factory.submit(alice, alice_ws, flags=SYNC, launch=True, display_name="gateway")
    assert fail(memory_backend, gateway, 1, corpus_log("external-services-001"), b"step=3\n").action == "restart_job"
    actions.launch_attempt(gateway.pk, 2)  # the restart's launch waits for a commit these tests never make
    memory_backend.write_log(handle(gateway, 2), "worker-0", b"step=3\nstep=40\n")
    return {"watchdog": watchdog, "gateway": gateway}


def preview(api, job, **body):
    return api.post(f"/api/v1/jobs/{job.pk}/retryable-keywords/preview/", body, format="json")


def saved_state(ws):
    return (
        list(Workspace.objects.filter(pk=ws.pk).values_list("retryable_keywords", flat=True)),
        list(Job.objects.filter(workspace=ws).order_by("pk").values_list("retryable_keywords", flat=True)),
        JobEvent.objects.count(),
        RestartRecord.objects.count(),
    )


def test_a_workspace_keyword_preview_shows_what_it_would_have_changed_and_saves_nothing(alice, alice_ws, api_as, past):
    before = saved_state(alice_ws)
    r = preview(api_as(alice), past["gateway"], keyword=WATCHDOG, scope="workspace")
    assert r.status_code == 200, r.content
    data = r.json()
    rows = {row["job_name"]: row for row in data["failures"]}
    assert set(rows) == {"watchdog", "gateway"}
    w = rows["watchdog"]
    assert (w["did"], w["would_do"], w["change"], w["proved"]) == (
        "failed",
        "restarted",
        "restart_instead_of_fail",
        "unknown",
    )
    assert w["verdict_then"]["retryable"] is False and w["verdict_with"]["rule"] == "user-keyword"
    assert w["job_url"] == f"/workspaces/alice-lab/jobs/{past['watchdog'].pk}/"
    g = rows["gateway"]
    # the keyword is not in the 502's log: the same verdict, and the next attempt trained past step 3
    assert (g["change"], g["matched"], g["proved"], g["right"]) == ("none", False, "retryable", True)
    assert g["restart_record_url"].startswith(f"/workspaces/alice-lab/jobs/{past['gateway'].pk}/restarts/")
    s = data["summary"]
    assert (s["failures"], s["matched"], s["would_restart_jobs"], s["logs_gone"]) == (2, 1, 1, 0)
    assert s["sentence"].startswith("Would have restarted 1 job")
    assert saved_state(alice_ws) == before  # a preview writes nothing


def test_a_job_keyword_is_tried_on_that_jobs_failures_only(alice, api_as, past):
    r = preview(api_as(alice), past["gateway"], keyword=WATCHDOG, scope="job")
    assert r.status_code == 200
    assert [row["job_name"] for row in r.json()["failures"]] == ["gateway"]
    assert r.json()["summary"]["would_restart_jobs"] == 0


def test_a_past_failure_whose_log_is_gone_is_said_so(alice, api_as, past, memory_backend):
    del memory_backend.attempts[(str(past["watchdog"].pk), 1)]
    r = preview(api_as(alice), past["watchdog"], keyword=WATCHDOG, scope="job")
    (row,) = r.json()["failures"]
    assert (row["log_gone"], row["change"], row["verdict_with"]) == (True, "log_gone", None)
    assert "could not be tried (the log is gone)" in r.json()["summary"]["sentence"]


BAD = [
    ({"scope": "job"}, "keyword"),
    ({"keyword": "", "scope": "job"}, "keyword"),
    ({"keyword": "x" * 257, "scope": "job"}, "keyword"),
    ({"keyword": "two\nlines", "scope": "job"}, "keyword"),
    ({"keyword": ["a list"], "scope": "job"}, "keyword"),
    ('{"keyword": "lone \\ud800 surrogate", "scope": "job"}', "keyword"),  # raw JSON: the client cannot encode it
    ({"keyword": "fine"}, "scope"),
    ({"keyword": "fine", "scope": "everywhere"}, "scope"),
]


def test_bad_input_is_a_400_naming_the_field_for_the_preview_and_the_save_alike(alice, alice_ws, api_as, past):
    api, job = api_as(alice), past["watchdog"]
    before = saved_state(alice_ws)
    for body, field in BAD:
        for url in ("retryable-keywords/preview/", "retryable-keywords/"):
            if isinstance(body, str):
                r = api.post(f"/api/v1/jobs/{job.pk}/{url}", body, content_type="application/json")
            else:
                r = api.post(f"/api/v1/jobs/{job.pk}/{url}", body, format="json")
            assert r.status_code == 400, (body, url, r.content)
            assert field in r.json(), (body, url, r.json())
    assert saved_state(alice_ws) == before


def test_another_workspaces_job_is_404_and_a_member_or_viewer_is_403(alice_ws, bob, bob_ws, carol, dave, api_as, past):
    job = past["watchdog"]
    before = saved_state(alice_ws)
    for url in ("retryable-keywords/preview/", "retryable-keywords/"):
        body = {"keyword": WATCHDOG, "scope": "workspace"}
        assert api_as(bob).post(f"/api/v1/jobs/{job.pk}/{url}", body, format="json").status_code == 404
        assert api_as(bob).post(f"/api/v1/jobs/999999/{url}", body, format="json").status_code == 404
        for who in (carol, dave):  # a viewer, a member: only owners and admins add keywords
            r = api_as(who).post(f"/api/v1/jobs/{job.pk}/{url}", body, format="json")
            assert r.status_code == 403, (who, url, r.content)
            # refused before the body is read: no field errors for a person who may not
            assert api_as(who).post(f"/api/v1/jobs/{job.pk}/{url}", {}, format="json").status_code == 403
    assert saved_state(alice_ws) == before


def test_the_save_keeps_what_the_preview_showed(alice, alice_ws, api_as, past):
    api = api_as(alice)
    shown = preview(api, past["watchdog"], keyword=WATCHDOG, scope="workspace").json()
    r = api.post(
        f"/api/v1/jobs/{past['watchdog'].pk}/retryable-keywords/",
        {"keyword": WATCHDOG, "scope": "workspace"},
        format="json",
    )
    assert r.status_code == 200 and r.json() == {"keyword": WATCHDOG, "scope": "workspace", "added": True}
    alice_ws.refresh_from_db()
    assert alice_ws.retryable_keywords == [WATCHDOG]
    # once kept, the keyword is in force: trying it again changes nothing more
    again = preview(api, past["watchdog"], keyword=WATCHDOG, scope="workspace").json()
    assert shown["summary"]["would_restart_jobs"] == 1 and again["summary"]["would_restart_jobs"] == 0
    assert Job.objects.get(pk=past["watchdog"].pk).status == JobStatus.FAILED


# ---- the page: the job page's keyword offer tries the keyword first --------------------------


def page_preview(client, job, htmx=True, **data):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    return client.post(f"/workspaces/alice-lab/jobs/{job.pk}/retryable-keyword/preview/", data, **headers)


def test_the_offer_tries_the_keyword_on_past_failures_and_saves_nothing(client, alice, alice_ws, past):
    client.force_login(alice)
    job = past["watchdog"]
    offer = client.get(f"/workspaces/alice-lab/jobs/{job.pk}/").content.decode()
    assert "Try on past failures" in offer and "data-backtest" in offer
    before = saved_state(alice_ws)
    body = page_preview(client, job, keyword=WATCHDOG, scope="workspace").content.decode()
    assert "Would have restarted 1 job" in body
    assert body.count("data-backtest-row") == 2
    assert 'data-change="restart_instead_of_fail"' in body and f'href="/workspaces/alice-lab/jobs/{job.pk}/"' in body
    # without htmx: a page with the offer, the scope kept, and the panel filled
    page = page_preview(client, job, htmx=False, keyword=WATCHDOG, scope="workspace").content.decode()
    assert "<html" in page and 'value="workspace" checked' in page and "Would have restarted 1 job" in page
    assert saved_state(alice_ws) == before


def test_the_pages_preview_refuses_as_the_api_does(client, alice, bob, bob_ws, dave, past):
    job = past["watchdog"]
    client.force_login(alice)
    r = page_preview(client, job, keyword="two\nlines", scope="job")
    assert r.status_code == 400 and "keyword:" in r.content.decode()
    assert page_preview(client, job, keyword="x", scope="nowhere").status_code == 400
    client.force_login(dave)
    assert page_preview(client, job, keyword=WATCHDOG, scope="job").status_code == 403
    client.force_login(bob)
    assert page_preview(client, job, keyword=WATCHDOG, scope="job").status_code == 404
