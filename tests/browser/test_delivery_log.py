"""Issue 15's delivery log in a real browser, as a workspace admin uses it: a
failed delivery reads as a sentence (no connection-pool repr), Redeliver sends
it again from the page, the payload that was sent unfolds under its row, and a
channel whose last deliveries all failed is marked failing. axe-core and the
phone width are checked on the same page."""

from __future__ import annotations

import socket

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import Job, JobEvent, JobStatus
from test_log_lines import serious_violations
from test_phone_and_forms import PHONE, overflow

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def closed_port(monkeypatch):
    """A loopback port nothing listens on, which the console's daphne may send to
    (the outbound guard refuses loopback unless allowed; daphne reads the environment)."""
    monkeypatch.setenv("VIGIL_OUTBOUND_ALLOW", "127.0.0.1")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def test_an_admin_reads_redelivers_and_unfolds_a_failed_delivery(closed_port, page_for, alice, alice_ws, shoot):
    from notifications.models import Channel, Delivery, EventRule

    channel = Channel.objects.create(
        workspace=alice_ws,
        name="ops-webhook",
        kind="webhook",
        created_by=alice,
        url=f"http://127.0.0.1:{closed_port}/hook",
    )
    rule = EventRule.objects.create(workspace=alice_ws, name="failures", event_types=["job_failed"], created_by=alice)
    rule.channels.add(channel)
    job = Job.objects.create(
        workspace=alice_ws,
        display_name="resnet",
        job_type="PyTorchJob",
        user_command="true",
        status=JobStatus.FAILED,
        reason="worker-1 failed with NCCL_ERROR",
    )
    pool_repr = (
        f"could not connect: HTTPConnectionPool(host='127.0.0.1', port={closed_port}): Max retries exceeded "
        f"with url: /hook (Caused by NewConnectionError(\"HTTPConnection(host='127.0.0.1', "
        f'port={closed_port}): Failed to establish a new connection: [Errno 111] Connection refused"))'
    )
    for n in range(3):  # three failures in a row: the channel is failing
        event = JobEvent.objects.create(job=job, type="job_failed", level="error", message=f"resnet failed ({n})")
        delivery = Delivery.objects.create(
            event=event,
            channel=channel,
            rule=rule,
            status="failed",
            attempts=3,
            error=pool_repr,
            last_attempt_at=timezone.now(),
        )
        delivery.matched_rules.add(rule)
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/notifications/rules/{rule.pk}/deliveries/")
    sentence = f"could not connect: connection refused by 127.0.0.1:{closed_port}"
    expect(page.locator("td[data-label=Error]").first).to_have_text(sentence)
    expect(page.get_by_text("Max retries exceeded")).to_have_count(0)
    expect(page.locator("td[data-label=Channel]").first).to_contain_text("Failing")
    # Redeliver the newest: the console sends it again (to the closed port: it fails again, readably)
    newest = page.locator("tbody tr").first
    newest.get_by_role("button", name="Redeliver").click()
    expect(page.get_by_role("status").filter(has_text="is being sent again")).to_be_visible()
    newest = page.locator("tbody tr").first
    expect(newest.locator("td[data-label=Attempts]")).to_have_text("4")
    expect(newest.locator("td[data-label=Error]")).to_have_text(sentence)
    # the payload that was sent, folded until asked for
    body = newest.locator("details.payload pre")
    expect(body).to_be_hidden()
    newest.get_by_text("Payload sent").click()
    expect(body).to_be_visible()
    expect(body).to_contain_text("resnet failed (2)")
    shoot(page, "delivery-log-redelivered")
    axe = {"desktop": serious_violations(page)}
    page.set_viewport_size(PHONE)
    shoot(page, "phone-delivery-log-redelivered")
    axe["phone"] = serious_violations(page)
    assert overflow(page) == 0
    assert axe == {"desktop": [], "phone": []}  # axe-core: no serious or critical violation
