"""The channel and event-rule pages: who sees what, who may change what, forms
that put errors beside their fields, Send test showing its outcome, and the
delivery log filtered by event type."""

from __future__ import annotations

import pytest
from django.urls import reverse

from notifications.models import Channel, Delivery, EventRule

pytestmark = pytest.mark.django_db

SECRET_URL = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#ops"


@pytest.fixture
def page_as(client):
    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def setup(alice_ws, make_channel, make_rule):
    channel = make_channel(SECRET_URL, kind="slack", name="ops-slack")
    rule = make_rule(channel, ["restart", "job_failed"], pattern="resnet-*", name="resnet restarts")
    return channel, rule


def _all_urls(slug, channel, rule):
    c, r = {"slug": slug, "channel_id": channel.pk}, {"slug": slug, "rule_id": rule.pk}
    return [
        reverse("notifications:index", kwargs={"slug": slug}),
        reverse("notifications:channels", kwargs={"slug": slug}),
        reverse("notifications:channel-add", kwargs={"slug": slug}),
        reverse("notifications:channel-edit", kwargs=c),
        reverse("notifications:channel-test", kwargs=c),
        reverse("notifications:channel-delete", kwargs=c),
        reverse("notifications:rules", kwargs={"slug": slug}),
        reverse("notifications:rule-add", kwargs={"slug": slug}),
        reverse("notifications:rule-edit", kwargs=r),
        reverse("notifications:rule-toggle", kwargs=r),
        reverse("notifications:rule-delete", kwargs=r),
        reverse("notifications:rule-deliveries", kwargs=r),
    ]


def test_pages_live_under_the_workspace(setup):
    assert reverse("notifications:rules", kwargs={"slug": "alice-lab"}) == "/workspaces/alice-lab/notifications/rules/"


def test_someone_outside_the_workspace_gets_404_everywhere(setup, bob, bob_ws, page_as):
    channel, rule = setup
    client = page_as(bob)
    for url in _all_urls("alice-lab", channel, rule):
        assert client.get(url).status_code == 404, url
        assert client.post(url).status_code == 404, url
    assert (
        Channel.objects.filter(pk=channel.pk, enabled=True).exists() and EventRule.objects.filter(pk=rule.pk).exists()
    )


def test_bobs_own_objects_are_not_reachable_through_alices_workspace(setup, alice, bob_ws, make_channel, page_as):
    bobs = make_channel("https://example.com/bob", workspace=bob_ws, name="bob-hook")
    url = reverse("notifications:channel-edit", kwargs={"slug": "alice-lab", "channel_id": bobs.pk})
    assert page_as(alice).get(url).status_code == 404


def test_login_is_required(setup, client):
    response = client.get(reverse("notifications:rules", kwargs={"slug": "alice-lab"}))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("persona", ["carol", "dave"])  # viewer, member
def test_viewers_and_members_see_rules_but_not_channel_secrets(persona, setup, request, page_as):
    channel, rule = setup
    client = page_as(request.getfixturevalue(persona))
    rules = client.get(reverse("notifications:rules", kwargs={"slug": "alice-lab"}))
    assert rules.status_code == 200
    text = rules.content.decode()
    assert "resnet restarts" in text and "resnet-*" in text and "ops-slack" in text
    assert "Create rule" not in text and "TIiajkdnlazkcOXrIdevi7FQ" not in text

    channels = client.get(reverse("notifications:channels", kwargs={"slug": "alice-lab"})).content.decode()
    assert "ops-slack" in channels and "slack://••••••" in channels
    assert "TIiajkdnlazkcOXrIdevi7FQ" not in channels and channel.signing_secret not in channels
    assert "Send test" not in channels

    for url in _all_urls("alice-lab", channel, rule):
        if "deliveries" in url or url.endswith(("/rules/", "/channels/", "/notifications/")):
            continue
        assert client.post(url).status_code == 403, url
    assert (
        client.get(
            reverse("notifications:rule-deliveries", kwargs={"slug": "alice-lab", "rule_id": rule.pk})
        ).status_code
        == 200
    )


def test_the_owner_sees_the_full_url(setup, alice, page_as):
    text = page_as(alice).get(reverse("notifications:channels", kwargs={"slug": "alice-lab"})).content.decode()
    assert SECRET_URL in text and "Send test" in text


def test_adding_a_channel_with_a_refused_url_shows_the_error_beside_the_url_field(alice, alice_ws, page_as, settings):
    settings.VIGIL_OUTBOUND_ALLOW = []
    response = page_as(alice).post(
        reverse("notifications:channel-add", kwargs={"slug": "alice-lab"}),
        {"name": "internal", "kind": "webhook", "url": "http://169.254.169.254/latest/meta-data"},
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="id_url_error"' in html and "cloud metadata address" in html
    # Beside the field: after its input, before the form's buttons.
    assert html.index('id="id_url"') < html.index('id="id_url_error"') < html.index('type="submit">Save')
    assert not Channel.objects.filter(name="internal").exists()


def test_adding_a_slack_channel_with_the_wrong_scheme_names_the_accepted_ones(alice, alice_ws, page_as):
    response = page_as(alice).post(
        reverse("notifications:channel-add", kwargs={"slug": "alice-lab"}),
        {"name": "chat", "kind": "slack", "url": "http://hooks.example.com/x"},
    )
    assert "slack://" in response.context["form"].errors["url"][0]


def test_an_admin_adds_tests_and_edits_a_webhook_channel(alice, alice_ws, page_as, http_sink, loopback_allowed):
    client = page_as(alice)
    response = client.post(
        reverse("notifications:channel-add", kwargs={"slug": "alice-lab"}),
        {"name": "receiver", "kind": "webhook", "url": http_sink.url + "/in"},
    )
    assert response.status_code == 302
    channel = Channel.objects.get(name="receiver")
    assert channel.created_by == alice

    tested = client.post(
        reverse("notifications:channel-test", kwargs={"slug": "alice-lab", "channel_id": channel.pk}), follow=True
    )
    html = tested.content.decode()
    assert "Test of “receiver”" in html and "✓ Sent" in html and "HTTP 200" in html
    assert http_sink.requests[0].headers["X-Vigil-Event"] == "test"

    # The channel list shows the last delivery.
    assert "(test)" in html

    # A failing test shows the error.
    http_sink.answer(500)
    html = client.post(
        reverse("notifications:channel-test", kwargs={"slug": "alice-lab", "channel_id": channel.pk}), follow=True
    ).content.decode()
    assert "✗ Failed" in html and "HTTP 500" in html

    # Saving a disabled channel turns it back on and clears the reason.
    channel.disable("HTTP 410 from 127.0.0.1")
    edit_url = reverse("notifications:channel-edit", kwargs={"slug": "alice-lab", "channel_id": channel.pk})
    assert "HTTP 410 from 127.0.0.1" in client.get(edit_url).content.decode()
    old_secret = channel.signing_secret
    client.post(edit_url, {"name": "receiver", "kind": "webhook", "url": http_sink.url + "/in2", "rotate_secret": "on"})
    channel.refresh_from_db()
    assert channel.enabled and channel.disabled_reason == "" and channel.url.endswith("/in2")
    assert channel.signing_secret != old_secret


def test_a_second_channel_with_the_same_name_is_refused(setup, alice, page_as):
    response = page_as(alice).post(
        reverse("notifications:channel-add", kwargs={"slug": "alice-lab"}),
        {"name": "OPS-slack", "kind": "slack", "url": SECRET_URL},
    )
    assert "already has a channel named" in response.context["form"].errors["name"][0]


def test_an_admin_creates_edits_toggles_and_deletes_a_rule(setup, alice, page_as):
    channel, _ = setup
    client = page_as(alice)
    add = reverse("notifications:rule-add", kwargs={"slug": "alice-lab"})

    form_html = client.get(add).content.decode()
    assert 'type="checkbox" name="event_types" value="hang"' in form_html
    assert 'type="radio" name="job_scope" value="pattern"' in form_html

    missing = client.post(add, {"name": "hangs", "job_scope": "pattern", "job_pattern": ""})
    errors = missing.context["form"].errors
    assert "Tick at least one event type." in errors["event_types"]
    assert "Type a pattern" in errors["job_pattern"][0]
    assert "Choose at least one channel" in errors["channels"][0]
    assert 'id="id_job_pattern_error"' in missing.content.decode()

    created = client.post(
        add,
        {
            "name": "hangs",
            "event_types": ["hang", "exit_hang"],
            "job_scope": "all",
            "job_pattern": "ignored-*",
            "channels": [channel.pk],
            "enabled": "on",
        },
    )
    assert created.status_code == 302
    rule = EventRule.objects.get(name="hangs")
    assert (
        rule.event_types == ["hang", "exit_hang"] and rule.job_pattern == "" and list(rule.channels.all()) == [channel]
    )
    assert rule.created_by == alice

    edit = reverse("notifications:rule-edit", kwargs={"slug": "alice-lab", "rule_id": rule.pk})
    client.post(
        edit,
        {
            "name": "hangs",
            "event_types": ["hang"],
            "job_scope": "pattern",
            "job_pattern": "llama-*",
            "channels": [channel.pk],
            "enabled": "on",
        },
    )
    rule.refresh_from_db()
    assert rule.event_types == ["hang"] and rule.job_pattern == "llama-*" and rule.job_scope == "pattern"

    client.post(reverse("notifications:rule-toggle", kwargs={"slug": "alice-lab", "rule_id": rule.pk}))
    rule.refresh_from_db()
    assert not rule.enabled
    assert "Enable" in client.get(reverse("notifications:rules", kwargs={"slug": "alice-lab"})).content.decode()

    client.post(reverse("notifications:rule-delete", kwargs={"slug": "alice-lab", "rule_id": rule.pk}))
    assert not EventRule.objects.filter(pk=rule.pk).exists()


def test_a_rule_cannot_use_another_workspaces_channel(setup, alice, bob_ws, make_channel, page_as):
    bobs = make_channel("https://example.com/bob", workspace=bob_ws, name="bob-hook")
    response = page_as(alice).post(
        reverse("notifications:rule-add", kwargs={"slug": "alice-lab"}),
        {"name": "sneaky", "event_types": ["hang"], "job_scope": "all", "channels": [bobs.pk]},
    )
    assert "channels" in response.context["form"].errors
    assert not EventRule.objects.filter(name="sneaky").exists()


def test_the_delivery_log_of_a_rule_filters_by_event_type(
    setup, carol, job, make_event, page_as, announce, loopback_allowed
):
    channel, rule = setup
    # Slack cannot be reached from here; the rows are what matters for the log.
    restart = Delivery.objects.create(
        event=make_event(job, type="restart", message="restarted after NCCL timeout"),
        channel=channel,
        rule=rule,
        status="sent",
        attempts=1,
    )
    failed = Delivery.objects.create(
        event=make_event(job, type="job_failed", message="gave up: OOM"),
        channel=channel,
        rule=rule,
        status="failed",
        attempts=3,
        error="HTTP 500",
    )
    restart.matched_rules.add(rule)
    failed.matched_rules.add(rule)
    url = reverse("notifications:rule-deliveries", kwargs={"slug": "alice-lab", "rule_id": rule.pk})
    client = page_as(carol)

    everything = client.get(url).content.decode()
    assert "restarted after NCCL timeout" in everything and "gave up: OOM" in everything

    only_failures = client.get(url, {"type": "job_failed"}).content.decode()
    assert "gave up: OOM" in only_failures and "HTTP 500" in only_failures
    assert "restarted after NCCL timeout" not in only_failures
