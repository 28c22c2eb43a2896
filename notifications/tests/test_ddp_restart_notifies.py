"""End to end: a real DDP job restarts after an injected fault, and the people
subscribed hear about it once, by webhook and by e-mail, with a delivery log."""

import sys
import time
from pathlib import Path

import pytest

from jobs.models import Job, JobStatus
from monitoring import tick
from notifications.models import Delivery, DeliveryStatus

pytest.importorskip("torch", reason="torch is not installed (.ci/run installs torch==2.13.0)")
pytestmark = [pytest.mark.torch, pytest.mark.django_db(transaction=True)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"


def test_a_ddp_restart_delivers_one_webhook_and_one_email(
    alice,
    alice_ws,
    api_as,
    job_body,
    local_backend,
    loopback_allowed,
    http_sink,
    smtp_sink,
    make_channel,
    make_rule,
    tmp_path,
):
    hook = make_channel(http_sink.url + "/vigil")
    mail = make_channel(
        f"mailto://{smtp_sink.host}:{smtp_sink.port}?from=vigil@example.com&to=oncall@example.com", kind="email"
    )
    rule = make_rule([hook, mail], event_types=["restart"])
    r = api_as(alice).post(
        "/api/v1/jobs/",
        job_body(
            alice_ws,
            display_name="ddp-notify",
            user_command=f"{sys.executable} {EXAMPLE}",
            envs={
                "VIGIL_EXAMPLE_STEPS": "12",
                "FAULT": "sigkill",
                "FAULT_RANK": "1",
                "FAULT_STEP": "3",
                "FAULT_ONCE": str(tmp_path / "fired"),
            },
            job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 1}],
            settings={
                "enable_error_monitoring_in_aimaster": True,
                "error_monitoring_args": "--enable-job-restart=True --max-num-of-job-restart=2",
            },
        ),
        format="json",
    )
    job = Job.objects.get(pk=r.json()["id"])
    deadline = time.monotonic() + 120
    while job.status not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        assert time.monotonic() < deadline, f"job still {job.status}"
        tick.run_job(job.pk)
        job.refresh_from_db()
        time.sleep(0.2)
    assert job.status == JobStatus.SUCCEEDED and job.current_attempt == 2, job.reason

    deliveries = Delivery.objects.filter(event__job=job)
    assert deliveries.count() == 2
    assert {d.status for d in deliveries} == {DeliveryStatus.SENT}, [d.error for d in deliveries]
    assert {d.rule_id for d in deliveries} == {rule.pk}
    [request] = http_sink.requests
    assert request.headers["X-Vigil-Event"] == "restart"
    assert b"worker-0" in request.body and b"ddp-notify" in request.body
    [envelope] = smtp_sink.messages
    text = envelope.content.decode()
    assert "ddp-notify" in text and f"/jobs/{job.pk}/" in text
