"""Notifications over the REST API: the pages' validation (one source: the forms),
the pages' access (members read with URLs masked, owners and admins change, anyone
outside gets 404), and a channel and rule made through the API hearing about a real
restart of a real job on a loopback webhook."""

from __future__ import annotations

import pytest

from jobs.models import Job, JobEvent, JobStatus
from testsupport.monitor import finished, submit_fault_once, tick_until
from notifications.models import Channel, Delivery, DeliveryStatus, EventRule

BASE = "/api/v1/workspaces/{ws}/notifications/"
CHANNELS = BASE + "channels/"
RULES = BASE + "rules/"
DELIVERIES = BASE + "deliveries/"
HOOK = "https://hooks.example.com/vigil"


def url(template, ws="alice-lab", pk=None, tail=""):
    return template.format(ws=ws) + (f"{pk}/" if pk is not None else "") + tail


@pytest.fixture
def alice_api(alice, alice_ws, api_as):
    return api_as(alice)


@pytest.fixture
def objects(alice_ws, make_channel, make_rule, make_event, job):
    """A channel, a rule on it and a failed delivery of an event, in Alice Lab."""
    channel = make_channel(HOOK, name="ops")
    rule = make_rule(channel, name="restarts")
    event = make_event(job)
    delivery = Delivery.objects.create(
        event=event, channel=channel, rule=rule, status=DeliveryStatus.FAILED, attempts=3, error="HTTP 500"
    )
    delivery.matched_rules.add(rule)
    return channel, rule, delivery


def every_endpoint(channel, rule, delivery):
    """(method, path, body) for each endpoint of a workspace's notifications."""
    ch, ru, de = channel.pk, rule.pk, delivery.pk
    body_ch = {"name": "x", "kind": "webhook", "url": HOOK}
    body_ru = {"name": "x", "event_types": ["restart"], "channels": [ch]}
    return [
        ("get", url(CHANNELS), None),
        ("post", url(CHANNELS), body_ch),
        ("get", url(CHANNELS, pk=ch), None),
        ("patch", url(CHANNELS, pk=ch), {"name": "y"}),
        ("put", url(CHANNELS, pk=ch), body_ch),
        ("post", url(CHANNELS, pk=ch, tail="test/"), None),
        ("delete", url(CHANNELS, pk=ch), None),
        ("get", url(RULES), None),
        ("post", url(RULES), body_ru),
        ("post", url(RULES, tail="preview/"), body_ru),
        ("get", url(RULES, pk=ru), None),
        ("patch", url(RULES, pk=ru), {"name": "y"}),
        ("put", url(RULES, pk=ru), body_ru),
        ("delete", url(RULES, pk=ru), None),
        ("get", url(DELIVERIES), None),
        ("get", url(DELIVERIES, pk=de), None),
        ("post", url(DELIVERIES, pk=de, tail="redeliver/"), None),
    ]


def call(client, method, path, body=None):
    return getattr(client, method)(path, body, format="json") if body is not None else getattr(client, method)(path)


# --- access ---------------------------------------------------------------------------------


def test_someone_outside_the_workspace_gets_404_from_every_endpoint(objects, bob, bob_ws, api_as):
    bob_api = api_as(bob)
    for method, path, body in every_endpoint(*objects):
        r = call(bob_api, method, path, body)
        assert r.status_code == 404, (method, path, r.status_code)
    assert Channel.objects.filter(name="ops").exists() and EventRule.objects.filter(name="restarts").exists()


def test_members_and_viewers_read_with_secrets_masked_and_change_nothing(objects, carol, dave, api_as):
    for person in (carol, dave):
        client = api_as(person)
        for method, path, body in every_endpoint(*objects):
            r = call(client, method, path, body)
            if method == "get":
                assert r.status_code == 200, (method, path)
            else:
                assert r.status_code == 403, (method, path, r.status_code)
                assert "owners and admins" in r.json()["detail"]
        [channel] = client.get(url(CHANNELS)).json()["results"]
        assert channel["url"] == "https://••••••" and channel["signing_secret"] is None
    channel, rule, delivery = objects
    assert Channel.objects.get(pk=channel.pk).name == "ops"
    assert Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.FAILED


def test_bobs_objects_are_404_through_alices_workspace(
    alice_api, objects, bob, bob_ws, make_channel, make_rule, make_event
):
    theirs = make_channel(HOOK, name="theirs", workspace=bob_ws)
    rule = make_rule(theirs, workspace=bob_ws)
    job = Job.objects.create(workspace=bob_ws, created_by=bob, display_name="bobs", user_command="true")
    delivery = Delivery.objects.create(event=make_event(job), channel=theirs, status=DeliveryStatus.FAILED)
    for method, path, body in every_endpoint(theirs, rule, delivery):
        if path.rstrip("/").endswith(("channels", "rules", "deliveries", "rules/preview")):
            continue  # the lists, creates and previews are Alice's own
        r = call(alice_api, method, path, body)
        assert r.status_code == 404, (method, path, r.status_code)
    assert Channel.objects.filter(pk=theirs.pk, name="theirs").exists()


def test_the_workspace_is_found_by_id_or_slug_and_a_login_is_needed(alice_api, alice_ws, objects, client):
    assert alice_api.get(url(CHANNELS, ws=alice_ws.pk)).json()["count"] == 1
    assert alice_api.get(url(CHANNELS, ws="no-such-lab")).status_code == 404
    assert alice_api.get(url(CHANNELS, ws="9" * 30)).status_code == 404
    assert client.get(url(CHANNELS)).status_code in (401, 403)


# --- channels -------------------------------------------------------------------------------


def test_an_admin_creates_reads_updates_tests_and_deletes_a_channel(alice_api, http_sink, loopback_allowed):
    r = alice_api.post(
        url(CHANNELS), {"name": " ops ", "kind": "webhook", "url": http_sink.url + "/hook"}, format="json"
    )
    assert r.status_code == 201, r.content
    created = r.json()
    assert (
        created["name"] == "ops" and created["url"] == http_sink.url + "/hook" and len(created["signing_secret"]) == 64
    )
    pk = created["id"]
    assert Channel.objects.get(pk=pk).created_by.username == "alice"

    r = alice_api.patch(url(CHANNELS, pk=pk), {"name": "on-call", "rotate_secret": True}, format="json")
    assert r.status_code == 200 and r.json()["name"] == "on-call"
    assert r.json()["signing_secret"] != created["signing_secret"]
    r = alice_api.put(
        url(CHANNELS, pk=pk), {"name": "pager", "kind": "webhook", "url": http_sink.url + "/p"}, format="json"
    )
    assert r.status_code == 200 and (r.json()["name"], r.json()["url"]) == ("pager", http_sink.url + "/p")

    r = alice_api.post(url(CHANNELS, pk=pk, tail="test/"))
    assert r.status_code == 200 and r.json()["status"] == "sent" and r.json()["is_test"]
    assert [req.path for req in http_sink.requests] == ["/p"]

    assert alice_api.delete(url(CHANNELS, pk=pk)).status_code == 204
    assert not Channel.objects.filter(pk=pk).exists()


def test_a_test_to_a_refused_address_says_so_in_the_delivery(alice_api, alice_ws, make_channel, nothing_allowed):
    channel = make_channel("http://127.0.0.1:9/hook")  # stored while allowed; the guard now refuses it
    r = alice_api.post(url(CHANNELS, pk=channel.pk, tail="test/"))
    assert r.status_code == 200 and r.json()["status"] == "failed" and r.json()["error"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"kind": "webhook", "url": HOOK}, "name"),
        ({"name": "   ", "kind": "webhook", "url": HOOK}, "name"),
        ({"name": ["a"], "kind": "webhook", "url": HOOK}, "name"),
        ({"name": "x" * 101, "kind": "webhook", "url": HOOK}, "name"),
        ({"name": "ops", "kind": "webhook", "url": HOOK}, "name"),  # taken (the fixture's channel), any case
        ({"name": "n", "kind": "pager", "url": HOOK}, "kind"),
        ({"name": "n", "url": HOOK}, "kind"),
        ({"name": "n", "kind": "webhook", "url": "ftp://example.com/x"}, "url"),
        ({"name": "n", "kind": "slack", "url": "http://hooks.example.com/x"}, "url"),
        # The outbound-address guard of the pages: private, loopback and metadata addresses.
        ({"name": "n", "kind": "webhook", "url": "http://169.254.169.254/latest/meta-data"}, "url"),
        ({"name": "n", "kind": "webhook", "url": "http://10.1.2.3/hook"}, "url"),
        ({"name": "n", "kind": "webhook", "url": None}, "url"),
        ({"name": "n", "kind": "webhook", "url": HOOK, "rotate_secret": "maybe"}, "rotate_secret"),
    ],
)
def test_a_bad_channel_is_a_400_naming_the_field_and_stores_nothing(alice_api, objects, nothing_allowed, body, field):
    before = Channel.objects.count()
    r = alice_api.post(url(CHANNELS), body, format="json")
    assert r.status_code == 400 and field in r.json(), r.content
    assert Channel.objects.count() == before


def test_the_api_and_the_page_give_the_same_message(alice_api, alice_ws, nothing_allowed):
    from notifications.forms import ChannelForm

    body = {"name": "n", "kind": "slack", "url": "http://hooks.example.com/x"}
    form = ChannelForm(body, workspace=alice_ws)
    assert not form.is_valid()
    assert alice_api.post(url(CHANNELS), body, format="json").json()["url"] == form.errors["url"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"url": "http://10.1.2.3/hook"}, "url"),
        ({"kind": "discord"}, "url"),  # a webhook URL is not a Discord one
        ({"name": ""}, "name"),
        ({"name": "OPS-2"}, "name"),  # another channel's name, other case
    ],
)
def test_a_bad_channel_update_is_a_400_naming_the_field_and_changes_nothing(
    alice_api, objects, make_channel, nothing_allowed, body, field
):
    make_channel(HOOK, name="ops-2")
    channel = objects[0]
    r = alice_api.patch(url(CHANNELS, pk=channel.pk), body, format="json")
    assert r.status_code == 400 and field in r.json(), r.content
    fresh = Channel.objects.get(pk=channel.pk)
    assert (fresh.name, fresh.kind, fresh.url) == ("ops", "webhook", HOOK)
    r = alice_api.put(url(CHANNELS, pk=channel.pk), {"name": "ops"}, format="json")
    assert r.status_code == 400 and {"kind", "url"} <= set(r.json())


# --- rules ----------------------------------------------------------------------------------


def test_an_admin_creates_updates_and_deletes_a_rule(alice_api, objects):
    channel = objects[0]
    r = alice_api.post(
        url(RULES),
        {
            "name": "hangs",
            "event_types": ["hang", "exit_hang"],
            "job_scope": "pattern",
            "job_pattern": " resnet-* ",
            "channels": [channel.pk],
        },
        format="json",
    )
    assert r.status_code == 201, r.content
    rule = r.json()
    assert (rule["job_pattern"], rule["channels"], rule["enabled"]) == ("resnet-*", [channel.pk], True)
    r = alice_api.patch(url(RULES, pk=rule["id"]), {"enabled": False, "job_scope": "all"}, format="json")
    assert r.status_code == 200 and (r.json()["enabled"], r.json()["job_pattern"]) == (False, "")
    assert r.json()["event_types"] == ["hang", "exit_hang"]  # untouched by the partial update
    assert alice_api.delete(url(RULES, pk=rule["id"])).status_code == 204
    assert not EventRule.objects.filter(pk=rule["id"]).exists()


@pytest.mark.parametrize(
    "change, field",
    [
        ({"name": ""}, "name"),
        ({"event_types": []}, "event_types"),
        ({"event_types": ["reboot"]}, "event_types"),
        ({"event_types": "restart"}, "event_types"),
        ({"channels": []}, "channels"),
        ({"channels": ["ops"]}, "channels"),
        ({"channels": [999999]}, "channels"),
        ({"channels": [10**30]}, "channels"),
        ({"job_scope": "pattern", "job_pattern": ""}, "job_pattern"),
        ({"job_scope": "pattern", "job_pattern": "x" * 201}, "job_pattern"),
        ({"job_scope": "some"}, "job_scope"),
        ({"enabled": "maybe"}, "enabled"),
    ],
)
def test_a_bad_rule_is_a_400_naming_the_field_and_stores_or_changes_nothing(alice_api, objects, change, field):
    channel, rule, _ = objects
    body = {"name": "r", "event_types": ["restart"], "channels": [channel.pk], **change}
    before = EventRule.objects.count()
    r = alice_api.post(url(RULES), body, format="json")
    assert r.status_code == 400 and field in r.json(), r.content
    assert EventRule.objects.count() == before
    # the preview validates as the save does
    r = alice_api.post(url(RULES, tail="preview/"), body, format="json")
    assert r.status_code == 400 and field in r.json(), r.content
    r = alice_api.patch(url(RULES, pk=rule.pk), change, format="json")
    assert r.status_code == 400 and field in r.json(), r.content
    fresh = EventRule.objects.get(pk=rule.pk)
    assert (fresh.name, fresh.event_types, list(fresh.channels.all()), fresh.enabled) == (
        "restarts",
        ["restart"],
        [channel],
        True,
    )


def test_a_rule_cannot_use_another_workspaces_channel(alice_api, objects, bob_ws, make_channel):
    theirs = make_channel(HOOK, name="theirs", workspace=bob_ws)
    r = alice_api.post(
        url(RULES, tail="preview/"), {"name": "r", "event_types": ["restart"], "channels": [theirs.pk]}, format="json"
    )
    assert r.status_code == 400 and "channels" in r.json()
    r = alice_api.post(url(RULES), {"name": "r", "event_types": ["restart"], "channels": [theirs.pk]}, format="json")
    assert r.status_code == 400 and "channels" in r.json()
    r = alice_api.patch(url(RULES, pk=objects[1].pk), {"channels": [theirs.pk]}, format="json")
    assert r.status_code == 400 and "channels" in r.json()


def test_a_rule_preview_lists_the_past_events_it_would_have_matched_and_saves_nothing(
    alice_api, alice_ws, alice, objects, make_event, make_channel
):
    channel, rule, delivery = objects  # "restarts" sent a restart event of resnet-ddp to "ops"
    pager = make_channel(HOOK + "/pager", name="pager")
    bert = Job.objects.create(workspace=alice_ws, created_by=alice, display_name="bert-large", user_command="true")
    resnet = delivery.event.job
    failed_resnet = make_event(resnet, type="job_failed", message="Not restarted: worker-0 failed")
    make_event(bert, type="job_failed", message="Not restarted: worker-1 failed")
    make_event(resnet, type="status", message="Job succeeded")  # not notifiable: never matched
    body = {"name": "resnet failures", "event_types": ["job_failed", "restart"], "job_scope": "pattern"}
    body |= {"job_pattern": "RESNET-*", "channels": [channel.pk, pager.pk]}
    rules, deliveries = EventRule.objects.count(), Delivery.objects.count()
    r = alice_api.post(url(RULES, tail="preview/"), body, format="json")
    assert r.status_code == 200, r.content
    data = r.json()
    assert [e["event"] for e in data["events"]] == [failed_resnet.pk, delivery.event_id]  # newest first
    assert {e["job_name"] for e in data["events"]} == {"resnet-ddp"}
    first, second = data["events"]
    assert first["channels"] == ["ops", "pager"] and first["already_sent_to"] == []
    assert second["already_sent_to"] == ["ops"]  # the existing rule sent that one to ops
    s = data["summary"]
    assert (s["events_considered"], s["matched"], s["jobs"], s["new_messages"]) == (3, 2, 1, 3)
    assert s["sentence"] == (
        "Would have matched 2 of the last 3 events (1 job): 3 messages to ops, pager, besides 1 that other rules sent there."
    )
    assert (EventRule.objects.count(), Delivery.objects.count()) == (rules, deliveries)


# --- deliveries -----------------------------------------------------------------------------


def test_deliveries_filter_by_rule_channel_status_and_type(alice_api, objects):
    channel, rule, delivery = objects
    for query in (f"?rule={rule.pk}", f"?channel={channel.pk}", "?status=failed", "?type=restart", ""):
        assert [d["id"] for d in alice_api.get(url(DELIVERIES) + query).json()["results"]] == [delivery.pk], query
    for query in ("?status=sent", "?type=hang", f"?rule={rule.pk + 1000}"):
        assert alice_api.get(url(DELIVERIES) + query).json()["results"] == [], query
    one = alice_api.get(url(DELIVERIES, pk=delivery.pk)).json()
    assert (one["event_type"], one["channel_kind"], one["matched_rules"]) == ("restart", "webhook", [rule.pk])


@pytest.mark.parametrize(
    "query, field",
    [
        ("?status=lost", "status"),
        ("?rule=one", "rule"),
        ("?channel=x", "channel"),
        ("?rule=" + "9" * 30, "rule"),
        ("?channel=%EF%BC%91", "channel"),
    ],
)
def test_a_bad_delivery_filter_is_a_400_naming_it(alice_api, objects, query, field):
    r = alice_api.get(url(DELIVERIES) + query)
    assert r.status_code == 400 and field in r.json()


def test_redeliver_tries_a_finished_delivery_once_more_and_refuses_the_others(
    alice_api, objects, http_sink, loopback_allowed, django_capture_on_commit_callbacks
):
    channel, rule, delivery = objects
    Channel.objects.filter(pk=channel.pk).update(url=http_sink.url + "/again")
    with django_capture_on_commit_callbacks(execute=True):  # the task is enqueued after commit
        r = alice_api.post(url(DELIVERIES, pk=delivery.pk, tail="redeliver/"))
    assert r.status_code == 202, r.content
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.error) == (DeliveryStatus.SENT, 4, "")
    assert [req.path for req in http_sink.requests] == ["/again"]

    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.RETRYING)
    r = alice_api.post(url(DELIVERIES, pk=delivery.pk, tail="redeliver/"))
    assert r.status_code == 409 and "retrying" in r.json()["detail"]
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED)
    channel.disable("HTTP 404 from the receiver")
    r = alice_api.post(url(DELIVERIES, pk=delivery.pk, tail="redeliver/"))
    assert r.status_code == 409 and "disabled" in r.json()["detail"]
    test = Delivery.objects.create(channel=channel, is_test=True, status=DeliveryStatus.FAILED)
    assert alice_api.post(url(DELIVERIES, pk=test.pk, tail="redeliver/")).status_code == 409
    assert len(http_sink.requests) == 1


def test_the_openapi_schema_describes_the_notification_endpoints(alice_api):
    text = alice_api.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    for path in (
        "/notifications/channels/",
        "/notifications/channels/{id}/test/",
        "/notifications/rules/{id}/",
        "/notifications/deliveries/",
        "/notifications/deliveries/{id}/redeliver/",
    ):
        assert "/api/v1/workspaces/{workspace}" + path in text, path
    assert "ChannelWrite" in text and "EventRuleWrite" in text


# --- end to end -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_channel_and_rule_made_through_the_api_hear_about_a_real_restart(
    alice_api, alice_ws, job_body, local_backend, http_sink, loopback_allowed, tmp_path, client
):
    from prometheus_client.parser import text_string_to_metric_families

    def sent_webhooks():
        loopback_allowed.VIGIL_METRICS_TOKEN = "t0ken"
        text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken").content.decode()
        return sum(
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "vigil_notification_deliveries_total"
            and s.labels == {"status": "sent", "channel_kind": "webhook"}
        )

    before = sent_webhooks()
    channel = alice_api.post(
        url(CHANNELS), {"name": "on-call", "kind": "webhook", "url": http_sink.url + "/vigil"}, format="json"
    ).json()
    r = alice_api.post(
        url(RULES), {"name": "restarts", "event_types": ["restart"], "channels": [channel["id"]]}, format="json"
    )
    assert r.status_code == 201, r.content
    rule = r.json()
    job = submit_fault_once(alice_api, job_body(alice_ws, display_name="api-notify"), tmp_path)
    job = tick_until(job, finished, backend=local_backend)
    assert job.status == JobStatus.SUCCEEDED and job.current_attempt == 2, job.reason

    [delivery] = alice_api.get(url(DELIVERIES) + f"?rule={rule['id']}").json()["results"]
    restart = JobEvent.objects.get(job=job, type="restart")
    assert (delivery["event"], delivery["status"], delivery["channel"]) == (restart.pk, "sent", channel["id"])
    [request] = http_sink.requests
    assert request.path == "/vigil" and request.headers["X-Vigil-Event"] == "restart"
    assert b"api-notify" in request.body and b"worker-0" in request.body
    assert sent_webhooks() == before + 1
