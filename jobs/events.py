"""Who hears about a job event once it has committed: one registry of subscribers.

The domain writes event rows (jobs.actions.record_event) and announces each one
after its transaction commits; it does not know who listens. The apps that react
register here from their AppConfig.ready(): monitoring pushes the event to the
pages that watch the job (monitoring.publish), notifications matches it against
the workspace's event rules (notifications.dispatch). Like Zulip's events after
commit, this keeps the dependency one way: those apps import jobs, never the
reverse.

Subscribers run in registration order, which is INSTALLED_APPS order (monitoring
before notifications: the page hears of an event before a message leaves). Telling
people must never break a state change that already committed, so a subscriber
that raises is logged and the next one still runs.
"""

from __future__ import annotations

import logging
from typing import Callable

from django.db import transaction

log = logging.getLogger(__name__)

Subscriber = Callable[[int], object]  # called with the committed event's id

_subscribers: list[Subscriber] = []


def subscribe(subscriber: Subscriber) -> Subscriber:
    """Hear of every committed event from now on. Registering twice is one
    registration (ready() may run more than once in a test process)."""
    if subscriber not in _subscribers:
        _subscribers.append(subscriber)
    return subscriber


def subscribers() -> tuple[Subscriber, ...]:
    return tuple(_subscribers)


def announce_on_commit(event_id: int) -> None:
    """Announce the event once the current transaction commits (now, outside one)."""
    transaction.on_commit(lambda: announce(event_id))


def announce(event_id: int) -> None:
    """Call every subscriber with the event's id; a failure is logged, never raised."""
    for subscriber in subscribers():
        try:
            subscriber(event_id)
        except Exception:  # noqa: BLE001 - one listener's failure must not silence the others
            log.exception("%s.%s could not announce event %s", subscriber.__module__, subscriber.__qualname__, event_id)


# Progress reported through the SDK is not an event row (one a second per job would
# drown the monitor log), but the pages that draw it follow it live: the same
# after-commit announcement, to its own subscribers, with what a page needs to know.
ProgressSubscriber = Callable[[int, int, int, int], object]  # (job id, workspace id, attempt, step)

_progress_subscribers: list[ProgressSubscriber] = []


def subscribe_progress(subscriber: ProgressSubscriber) -> ProgressSubscriber:
    if subscriber not in _progress_subscribers:
        _progress_subscribers.append(subscriber)
    return subscriber


def announce_progress_on_commit(job_id: int, workspace_id: int, attempt: int, step: int) -> None:
    def announce() -> None:
        for subscriber in tuple(_progress_subscribers):
            try:
                subscriber(job_id, workspace_id, attempt, step)
            except Exception:  # noqa: BLE001 - a page not told is not a failed report
                log.exception("%s could not announce progress of job %s", subscriber.__qualname__, job_id)

    transaction.on_commit(announce)
