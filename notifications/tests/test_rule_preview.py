"""An event rule tried on past events before it is kept (issue 26): the notifier's own
matching over the workspace's past events, on the rule form's page; nothing is saved."""

from __future__ import annotations

import pytest

from jobs.models import Job
from notifications.matching import PastEvent, backtest_rule
from notifications.models import Delivery, EventRule

HOOK = "https://hooks.example.com/vigil"


def test_backtest_rule_keeps_the_events_the_notifier_would_match():
    events = [
        PastEvent(1, "job_failed", "ResNet-50"),
        PastEvent(2, "restart", "resnet-18"),
        PastEvent(3, "job_failed", "bert"),
        PastEvent(4, "hang", "resnet-18"),
    ]
    assert [e.ref for e in backtest_rule(events, ["job_failed", "restart"], "resnet-*")] == [1, 2]
    assert [e.ref for e in backtest_rule(events, ["job_failed"], "")] == [1, 3]
    assert backtest_rule(events, [], "") == []


@pytest.fixture
def past(alice, alice_ws, make_channel, make_event):
    ops = make_channel(HOOK, name="ops")
    resnet = Job.objects.create(workspace=alice_ws, created_by=alice, display_name="resnet-ddp", user_command="true")
    bert = Job.objects.create(workspace=alice_ws, created_by=alice, display_name="bert", user_command="true")
    return {
        "ops": ops,
        "events": [make_event(resnet, type="job_failed"), make_event(bert, type="job_failed"), make_event(resnet)],
    }


def preview(client, data, htmx=True, rule_id=None):
    tail = f"rules/{rule_id}/preview/" if rule_id else "rules/preview/"
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    return client.post(f"/workspaces/alice-lab/notifications/{tail}", data, **headers)


def test_the_rule_form_tries_the_rule_on_past_events_and_saves_nothing(client, alice, past, make_rule):
    client.force_login(alice)
    form = client.get("/workspaces/alice-lab/notifications/rules/add/").content.decode()
    assert "Try on past events" in form and 'id="rule-backtest"' in form
    data = {"name": "resnet", "event_types": ["job_failed"], "job_scope": "pattern", "job_pattern": "resnet-*"}
    data["channels"] = [past["ops"].pk]
    before = (EventRule.objects.count(), Delivery.objects.count())
    body = preview(client, data).content.decode()
    assert "Would have matched 1 of the last 3 events (1 job): 1 message to ops." in body
    assert body.count("data-backtest-row") == 1 and f'data-event="{past["events"][0].pk}"' in body
    page = preview(client, data, htmx=False).content.decode()  # without htmx: the form page, panel filled
    assert "<html" in page and 'value="resnet-*"' in page and "Would have matched 1 of the last 3" in page
    # an edit tries the form's values, not the saved rule's
    rule = make_rule(past["ops"], event_types=("restart",), name="old")
    body = preview(client, {**data, "job_pattern": "*"}, rule_id=rule.pk).content.decode()
    assert "Would have matched 2 of the last 3 events (2 jobs)" in body
    assert (EventRule.objects.count() - 1, Delivery.objects.count()) == before
    assert EventRule.objects.get(pk=rule.pk).event_types == ["restart"]


def test_the_pages_preview_refuses_as_the_save_does(client, alice, bob, bob_ws, dave, past, make_channel):
    client.force_login(alice)
    r = preview(client, {"name": "r", "event_types": [], "channels": [past["ops"].pk], "job_scope": "all"})
    assert r.status_code == 400 and "event_types: Tick at least one event type." in r.content.decode()
    theirs = make_channel(HOOK, name="theirs", workspace=bob_ws)
    r = preview(client, {"name": "r", "event_types": ["restart"], "channels": [theirs.pk], "job_scope": "all"})
    assert r.status_code == 400 and "channels:" in r.content.decode()
    good = {"name": "r", "event_types": ["restart"], "channels": [past["ops"].pk], "job_scope": "all"}
    client.force_login(dave)  # a member
    assert preview(client, good).status_code == 403
    client.force_login(bob)
    assert preview(client, good).status_code == 404
    assert EventRule.objects.count() == 0
