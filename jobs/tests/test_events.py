"""A committed event reaches every subscriber, in order, after commit; one that
fails is logged and does not silence the others or the change."""

import logging

import pytest

from jobs import events
from jobs.actions import record_event
from jobs.models import Job, JobEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice_ws):
    return Job.objects.create(workspace=alice_ws, display_name="events", job_type="PyTorchJob", user_command="true")


def test_the_page_hears_of_an_event_before_the_event_rules_do():
    names = [f"{s.__module__}.{s.__qualname__}" for s in events.subscribers()]
    assert names == ["monitoring.publish.event_committed", "notifications.dispatch.event_committed"]


def test_subscribing_twice_is_one_subscription(monkeypatch):
    monkeypatch.setattr(events, "_subscribers", [])
    heard = []
    events.subscribe(heard.append)
    events.subscribe(heard.append)
    events.announce(7)
    assert heard == [7]


def test_subscribers_hear_after_commit_and_a_failing_one_is_logged_not_raised(
    job, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    heard = []

    def broken(event_id):
        heard.append(("broken", event_id))
        raise RuntimeError("the channel layer is gone")

    monkeypatch.setattr(events, "_subscribers", [])
    events.subscribe(broken)
    events.subscribe(lambda event_id: heard.append(("next", event_id)))
    with caplog.at_level(logging.ERROR, logger="jobs.events"):
        with django_capture_on_commit_callbacks(execute=True):
            event = record_event(job, "custom_message", "loss is NaN")
            assert heard == []  # nothing is announced before the commit
    assert heard == [("broken", event.pk), ("next", event.pk)]
    assert JobEvent.objects.filter(pk=event.pk).exists()
    assert f"could not announce event {event.pk}" in caplog.text and "broken" in caplog.text
