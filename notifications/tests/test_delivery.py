"""Deliveries to real receivers on loopback: the signed webhook, apprise's JSON
service, e-mail over SMTP; retries, permanent failures, and how events become
deliveries (rules, de-duplication, nothing without rules)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from notifications import dispatch
from notifications.models import Channel, Delivery, DeliveryAttempt, DeliveryStatus

from .conftest import assert_only_loopback

pytestmark = pytest.mark.django_db


def test_webhook_receives_every_event_field_signed_with_the_channel_secret(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule, connections
):
    channel = make_channel(http_sink.url + "/hooks/vigil")
    make_rule(channel)
    event = make_event(job)

    created = announce(event.pk)

    assert len(created) == 1
    delivery = Delivery.objects.get(pk=created[0])
    assert delivery.status == DeliveryStatus.SENT, delivery.error
    assert delivery.attempts == 1 and delivery.status_code == 200 and delivery.duration_ms > 0
    [request] = http_sink.requests
    assert request.method == "POST" and request.path == "/hooks/vigil"
    expected = hmac.new(channel.signing_secret.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Vigil-Signature"] == f"sha256={expected}"
    assert request.headers["X-Vigil-Event"] == "restart"
    assert request.headers["X-Vigil-Delivery"] == str(delivery.pk)
    assert request.headers["X-Vigil-Timestamp"].isdigit()
    body = json.loads(request.body)
    assert body["event"] == {
        "id": event.pk,
        "type": "restart",
        "type_label": "Restart",
        "level": "warning",
        "message": "worker-1 exited with code 1; restarting the job",
        "payload": {"reason": "NCCL timeout on worker-1 is retryable", "error_code": "NCCL_TIMEOUT"},
        "attempt": 2,
        "instance": "worker-1",
        "created_at": event.created_at.isoformat(),
    }
    assert body["job"] == {
        "id": job.pk,
        "name": "resnet-ddp",
        "status": "Restarting",
        "url": f"http://console.test/jobs/{job.pk}/",
    }
    assert body["workspace"] == {"slug": "alice-lab", "name": "Alice Lab"}
    assert body["test"] is False
    assert "Why: NCCL timeout on worker-1 is retryable" in body["text"]
    assert "127.0.0.1" in connections
    assert_only_loopback(connections)


def test_each_channel_signs_with_its_own_secret_so_one_receiver_cannot_verify_anothers_deliveries(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule
):
    first = make_channel(http_sink.url + "/first")
    second = make_channel(http_sink.url + "/second")
    make_rule(first)
    make_rule(second)
    assert first.signing_secret and second.signing_secret and first.signing_secret != second.signing_secret

    announce(make_event(job).pk)

    by_path = {request.path: request for request in http_sink.requests}
    assert set(by_path) == {"/first", "/second"}
    for channel, path, other in ((first, "/first", second), (second, "/second", first)):
        request = by_path[path]
        own = hmac.new(channel.signing_secret.encode(), request.body, hashlib.sha256).hexdigest()
        foreign = hmac.new(other.signing_secret.encode(), request.body, hashlib.sha256).hexdigest()
        assert request.headers["X-Vigil-Signature"] == f"sha256={own}"
        assert request.headers["X-Vigil-Signature"] != f"sha256={foreign}"


def test_apprise_json_service_delivers_to_a_loopback_server(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule, connections
):
    channel = make_channel(f"json://127.0.0.1:{http_sink.port}/apprise", kind="apprise_json")
    make_rule(channel)

    [delivery_id] = announce(make_event(job).pk)

    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.SENT, delivery.error
    [request] = http_sink.requests
    assert request.path == "/apprise"
    body = json.loads(request.body)
    assert body["title"] == f"[Vigil] Restart: resnet-ddp (#{job.pk})"
    assert "What happened: worker-1 exited with code 1; restarting the job" in body["message"]
    assert f"Job page: http://console.test/jobs/{job.pk}/" in body["message"]
    assert_only_loopback(connections)


def test_apprise_service_answering_403_disables_the_channel(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule
):
    http_sink.answer(403)
    channel = make_channel(f"json://127.0.0.1:{http_sink.port}/x", kind="apprise_json")
    make_rule(channel)
    [delivery_id] = announce(make_event(job).pk)
    delivery = Delivery.objects.get(pk=delivery_id)
    channel.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED and delivery.status_code == 403 and delivery.attempts == 1
    assert not channel.enabled and "403" in channel.disabled_reason


def test_email_arrives_at_a_loopback_smtp_server_through_apprise(
    announce, loopback_allowed, smtp_sink, job, make_event, make_channel, make_rule, connections
):
    channel = make_channel(
        f"mailto://{smtp_sink.host}:{smtp_sink.port}?from=vigil@example.com&to=oncall@example.com", kind="email"
    )
    make_rule(channel, event_types=["job_failed"])

    [delivery_id] = announce(
        make_event(job, type="job_failed", message="the job failed: CUDA out of memory is not retryable").pk
    )

    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.SENT, delivery.error
    [envelope] = smtp_sink.messages
    assert envelope.rcpt_tos == ["oncall@example.com"]
    text = envelope.content.decode()
    assert f"Subject: [Vigil] Job failed: resnet-ddp (#{job.pk})" in text
    assert "CUDA out of memory is not retryable" in text
    assert f"http://console.test/jobs/{job.pk}/" in text
    assert_only_loopback(connections)


def test_a_server_failing_twice_gets_one_delivery_in_three_attempts(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule
):
    http_sink.answer(503, 502)
    channel = make_channel(http_sink.url + "/flaky")
    make_rule(channel)

    [delivery_id] = announce(make_event(job).pk)

    assert Delivery.objects.count() == 1
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.SENT and delivery.attempts == 3
    attempts = list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("number"))
    assert [(a.number, a.ok, a.status_code) for a in attempts] == [(1, False, 503), (2, False, 502), (3, True, 200)]
    assert "HTTP 503" in attempts[0].error and all(a.duration_ms > 0 for a in attempts)
    assert len(http_sink.requests) == 3
    # Every attempt carries the same delivery id, so a receiver can de-duplicate.
    assert {r.headers["X-Vigil-Delivery"] for r in http_sink.requests} == {str(delivery.pk)}
    channel.refresh_from_db()
    assert channel.enabled


def test_transient_failures_stop_after_the_configured_attempts_and_keep_the_channel(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule
):
    http_sink.answer(500, 500, 500, 500)
    channel = make_channel(http_sink.url + "/down")
    make_rule(channel)
    [delivery_id] = announce(make_event(job).pk)
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 3 and not delivery.permanent_error
    assert len(http_sink.requests) == 3
    channel.refresh_from_db()
    assert channel.enabled


def test_a_connection_refused_is_retried(announce, loopback_allowed, job, make_event, make_channel, make_rule):
    import socket

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    channel = make_channel(f"http://127.0.0.1:{port}/nobody")
    make_rule(channel)
    [delivery_id] = announce(make_event(job).pk)
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 3
    assert "could not connect" in delivery.error
    channel.refresh_from_db()
    assert channel.enabled


@pytest.mark.parametrize("status", [401, 403, 404, 410])
def test_a_permanent_error_disables_the_channel_and_says_why(
    announce, status, loopback_allowed, http_sink, job, make_event, make_channel, make_rule
):
    http_sink.answer(status)
    channel = make_channel(http_sink.url + "/gone")
    make_rule(channel)

    [delivery_id] = announce(make_event(job).pk)

    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 1 and delivery.permanent_error
    channel.refresh_from_db()
    assert not channel.enabled
    assert f"HTTP {status}" in channel.disabled_reason and channel.disabled_at is not None
    # The next event is not sent to the disabled channel; its delivery says why.
    assert announce(make_event(job, message="second").pk) == []
    skipped = Delivery.objects.exclude(pk=delivery_id).get()
    assert skipped.status == DeliveryStatus.SKIPPED and "channel disabled" in skipped.error
    assert len(http_sink.requests) == 1


def test_a_rejected_request_fails_without_retry_and_keeps_the_channel(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule
):
    http_sink.answer(400)
    channel = make_channel(http_sink.url + "/picky")
    make_rule(channel)
    [delivery_id] = announce(make_event(job).pk)
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 1 and not delivery.permanent_error
    channel.refresh_from_db()
    assert channel.enabled


def test_dispatch_with_no_rules_creates_nothing(announce, loopback_allowed, job, make_event, make_channel):
    make_channel("http://127.0.0.1:9/never")
    assert announce(make_event(job).pk) == []
    assert Delivery.objects.count() == 0


def test_two_rules_to_one_channel_deliver_once(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule
):
    channel = make_channel(http_sink.url + "/once")
    first = make_rule(channel, event_types=["restart", "hang"])
    second = make_rule(channel, pattern="resnet-*")

    announce(make_event(job).pk)

    delivery = Delivery.objects.get()
    assert delivery.rule == first
    assert set(delivery.matched_rules.all()) == {first, second}
    assert len(http_sink.requests) == 1


def test_a_repeated_announcement_of_an_event_sends_nothing_more(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule
):
    make_rule(make_channel(http_sink.url + "/x"))
    event = make_event(job)
    assert len(announce(event.pk)) == 1
    assert announce(event.pk) == []
    assert Delivery.objects.count() == 1 and len(http_sink.requests) == 1


def test_record_event_reaches_the_rules_after_commit(
    loopback_allowed, http_sink, job, make_channel, make_rule, django_capture_on_commit_callbacks
):
    from jobs.actions import record_event

    make_rule(make_channel(http_sink.url + "/after-commit"), event_types=["custom_message"])
    with django_capture_on_commit_callbacks(execute=True):
        event = record_event(job, "custom_message", "loss is NaN at step 1200")
        assert http_sink.requests == []  # nothing leaves before the commit
    assert Delivery.objects.get().event == event
    assert json.loads(http_sink.requests[0].body)["event"]["message"] == "loss is NaN at step 1200"


def test_event_committed_does_no_network_io_itself(
    loopback_allowed, http_sink, job, make_event, make_channel, make_rule, django_capture_on_commit_callbacks
):
    from django.db import transaction

    make_rule(make_channel(http_sink.url + "/later"))
    event = make_event(job)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with transaction.atomic():
            created = dispatch.event_committed(event.pk)
    # Rows exist, the task is only queued for after commit, nothing was sent.
    assert Delivery.objects.get(pk=created[0]).status == DeliveryStatus.PENDING
    assert http_sink.requests == [] and len(callbacks) == 1
    callbacks[0]()
    assert len(http_sink.requests) == 1
    assert Delivery.objects.get(pk=created[0]).status == DeliveryStatus.SENT


def test_send_test_delivers_a_test_message_and_reports_the_outcome(loopback_allowed, http_sink, make_channel):
    channel = make_channel(http_sink.url + "/test")
    delivery = dispatch.send_test(channel)
    assert delivery.is_test and delivery.status == DeliveryStatus.SENT
    body = json.loads(http_sink.requests[0].body)
    assert body["test"] is True and body["job"] is None and http_sink.requests[0].headers["X-Vigil-Event"] == "test"


def test_a_failed_send_test_shows_the_error_without_disabling_the_channel(loopback_allowed, http_sink, make_channel):
    http_sink.answer(404)
    channel = make_channel(http_sink.url + "/missing")
    delivery = dispatch.send_test(channel)
    assert delivery.status == DeliveryStatus.FAILED and "HTTP 404" in delivery.error
    channel.refresh_from_db()
    assert channel.enabled


def test_a_lost_delivery_is_picked_up_by_the_sweep(loopback_allowed, http_sink, job, make_event, make_channel):
    from datetime import timedelta

    import time_machine
    from django.utils import timezone

    channel = make_channel(http_sink.url + "/sweep")
    delivery = Delivery.objects.create(event=make_event(job), channel=channel)  # its task never ran
    assert dispatch.requeue_stale() == []
    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        assert dispatch.requeue_stale() == [delivery.pk]
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SENT and len(http_sink.requests) == 1


def test_other_workspaces_rules_do_not_see_the_event(
    announce, loopback_allowed, http_sink, job, bob_ws, make_event, make_channel, make_rule
):
    bobs = make_channel(http_sink.url + "/bob", workspace=bob_ws)
    make_rule(bobs, workspace=bob_ws)
    assert announce(make_event(job).pk) == []
    assert Channel.objects.get(pk=bobs.pk).deliveries.count() == 0
