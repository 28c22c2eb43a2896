"""Issue 15's delivery log: errors in a sentence (never a connection-pool repr),
the payload that was sent, a Redeliver button for the workspace's admins (the
API's dispatch.redeliver), and a channel marked failing after a run of failed
deliveries. Real sends to a loopback receiver; pages through Django's client."""

from __future__ import annotations

import json
import socket

import pytest
from django.urls import reverse

from notifications import dispatch
from notifications.models import Delivery

pytestmark = pytest.mark.django_db

POOL_REPR = (
    "could not connect: HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /h "
    "(Caused by NewConnectionError(\"HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new "
    'connection: [Errno 111] Connection refused"))'
)


@pytest.fixture
def hook(alice_ws, make_channel, make_rule, http_sink, loopback_allowed):
    channel = make_channel(http_sink.url + "/in", name="receiver")
    rule = make_rule(channel, ["restart"], name="restarts")
    return channel, rule


def deliver(channel, rule, event) -> Delivery:
    delivery = Delivery.objects.create(event=event, channel=channel, rule=rule)
    delivery.matched_rules.add(rule)
    dispatch.attempt_delivery(delivery.pk, allow_retry=False)
    delivery.refresh_from_db()
    return delivery


def log_url(rule):
    return reverse("notifications:rule-deliveries", kwargs={"slug": rule.workspace.slug, "rule_id": rule.pk})


def redeliver_url(rule, delivery_id, slug=None):
    return reverse(
        "notifications:redeliver",
        kwargs={"slug": slug or rule.workspace.slug, "rule_id": rule.pk, "delivery_id": delivery_id},
    )


def closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there: connection refused
    return port


def test_a_refused_connection_is_stored_and_shown_as_a_sentence_with_the_payload_sent(
    alice_ws, alice, carol, job, make_event, make_channel, make_rule, loopback_allowed, client
):
    port = closed_port()
    channel = make_channel(f"http://127.0.0.1:{port}/in", name="nowhere")
    rule = make_rule(channel, ["restart"], name="restarts")
    delivery = deliver(channel, rule, make_event(job, message="worker-1 restarted"))
    assert delivery.status == "failed"
    assert delivery.error == f"could not connect: connection refused by 127.0.0.1:{port}"
    assert "worker-1 restarted" in json.dumps(json.loads(delivery.payload))  # the webhook's JSON body
    # a row stored before this change reads the same way
    old = Delivery.objects.create(
        event=make_event(job, message="older"), channel=channel, rule=rule, status="failed", attempts=3, error=POOL_REPR
    )
    old.matched_rules.add(rule)
    client.force_login(carol)  # a viewer reads the log, payload included, without the buttons
    html = client.get(log_url(rule)).content.decode()
    assert "HTTPConnectionPool" not in html and "Max retries" not in html
    assert f"connection refused by 127.0.0.1:{port}" in html and "connection refused by 127.0.0.1:9" in html
    assert "Payload sent" in html and "worker-1 restarted" in html
    assert "Redeliver" not in html


def test_an_admin_redelivers_a_failed_delivery_and_it_is_sent(
    hook, alice, job, make_event, http_sink, client, django_capture_on_commit_callbacks
):
    channel, rule = hook
    http_sink.answer(500)
    delivery = deliver(channel, rule, make_event(job))
    assert delivery.status == "failed"
    client.force_login(alice)
    assert "Redeliver" in client.get(log_url(rule)).content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(redeliver_url(rule, delivery.pk))
    assert response.status_code == 302 and response["Location"].endswith(f"?redelivered={delivery.pk}")
    delivery.refresh_from_db()
    assert delivery.status == "sent" and delivery.error == "" and len(http_sink.requests) == 2
    assert json.loads(delivery.payload) == json.loads(http_sink.requests[1].body)  # the payload is what was sent
    assert "is being sent again" in client.get(response["Location"]).content.decode()


def test_redeliver_refuses_bad_requests_and_other_people(
    hook, alice, carol, dave, bob, bob_ws, job, make_event, make_channel, make_rule, client
):
    channel, rule = hook
    delivery = deliver(channel, rule, make_event(job))
    other_rule = make_rule(channel, ["job_failed"], name="failures")
    url = redeliver_url(rule, delivery.pk)
    # a viewer and a member may read the log but not redeliver
    for who in (carol, dave):
        client.force_login(who)
        assert client.post(url).status_code == 403
    # another workspace's person: 404, as for every page of the workspace
    client.force_login(bob)
    assert client.post(url).status_code == 404
    assert client.post(redeliver_url(rule, delivery.pk, slug=bob_ws.slug)).status_code == 404
    client.force_login(alice)
    assert client.get(url).status_code == 405  # POST only
    assert client.post(redeliver_url(rule, 999999)).status_code == 404
    assert client.post(redeliver_url(other_rule, delivery.pk)).status_code == 404  # not this rule's delivery
    # bob's own delivery is not reachable through alice's workspace
    bob_channel = make_channel("http://127.0.0.1:9/x", name="bobs", workspace=bob_ws)
    bob_rule = make_rule(bob_channel, ["restart"], name="bobs", workspace=bob_ws)
    bobs = Delivery.objects.create(channel=bob_channel, rule=bob_rule, status="failed")
    bobs.matched_rules.add(bob_rule)
    assert client.post(redeliver_url(rule, bobs.pk)).status_code == 404
    assert client.post(redeliver_url(bob_rule, bobs.pk, slug="alice-lab")).status_code == 404
    # a delivery in flight is refused with the reason, on the page
    Delivery.objects.filter(pk=delivery.pk).update(status="pending")
    response = client.post(url)
    assert response.status_code == 409 and "Not redelivered:" in response.content.decode()
    assert "the delivery is pending" in response.content.decode()
    assert Delivery.objects.get(pk=delivery.pk).status == "pending"


def test_a_channel_is_shown_failing_after_three_failed_deliveries_and_not_after_one_gets_through(
    hook, alice, job, make_event, http_sink, client
):
    channel, rule = hook
    client.force_login(alice)
    channels_url = reverse("notifications:channels", kwargs={"slug": "alice-lab"})
    http_sink.answer(500, 500, 500)
    for n in range(3):
        deliver(channel, rule, make_event(job, message=f"restart {n}"))
        failing = "✕ Failing" in client.get(channels_url).content.decode()
        assert failing is (n == 2), n
    assert "✕ Failing" in client.get(log_url(rule)).content.decode()
    deliver(channel, rule, make_event(job, message="restart 3"))  # 200 this time
    assert "✕ Failing" not in client.get(channels_url).content.decode()
    assert "✕ Failing" not in client.get(log_url(rule)).content.decode()
