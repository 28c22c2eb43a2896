"""From a committed event to deliveries, in small steps that each do one thing:

1. `event_committed(event_id)`: a subscriber of jobs.events (registered in
   NotificationsConfig.ready), called after the event's transaction commits.
   Matches the event against the workspace's rules, creates one Delivery per
   channel (never two: unique per event and channel) and enqueues the Celery task. No network I/O here, so the monitor is never held up.
2. `attempt_delivery(delivery_id)`: one try, run by notifications.tasks.deliver.
   It claims the delivery (compare-and-set), sends through the channel's
   transport, records a DeliveryAttempt row and decides what comes next with the
   pure `plan_after_attempt`: sent, retry after a delay, or failed. A permanent
   error disables the channel with the reason.
3. `send_test(channel)`: "Send test" on the channel page, one synchronous attempt.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from celery import shared_task
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core.delivery_errors import readable_error
from infra import metrics
from infra.bounded import call_bounded

from jobs.models import NOTIFIABLE_EVENT_TYPES, EventType, JobEvent

from . import outbound
from .messages import EventInfo, job_url
from .models import Channel, Delivery, DeliveryAttempt, DeliveryStatus, EventRule
from .transports import DeliveryFailure, InvalidChannelURL, transport_for

log = logging.getLogger(__name__)

DEFAULT_RETRY_DELAYS = (2.0, 8.0)  # seconds before the 2nd and 3rd attempt


def retry_delays() -> tuple[float, ...]:
    return tuple(float(d) for d in getattr(settings, "VIGIL_NOTIFY_RETRY_DELAYS", DEFAULT_RETRY_DELAYS))


# --- the pure decision -------------------------------------------------------------


def plan_after_attempt(attempt_number: int, verdict: str, delays) -> tuple[str, float | None]:
    """(new status, seconds until the next try or None) after attempt number n
    ended with verdict "ok", "transient", "permanent" or "rejected"."""
    if verdict == "ok":
        return DeliveryStatus.SENT, None
    if verdict == "transient" and attempt_number <= len(delays):
        return DeliveryStatus.RETRYING, float(delays[attempt_number - 1])
    return DeliveryStatus.FAILED, None


# --- step 1: event -> deliveries ---------------------------------------------------


def matching_rules(event: JobEvent) -> list[EventRule]:
    rules = EventRule.objects.filter(workspace_id=event.job.workspace_id, enabled=True).prefetch_related("channels")
    return [rule for rule in rules.order_by("id") if rule.matches(event.type, event.job.display_name)]


def event_committed(event_id: int) -> list[int]:
    """Create the deliveries an event asks for and enqueue them; returns the ids
    of the deliveries created by this call (a repeated call creates none)."""
    event = JobEvent.objects.select_related("job__workspace").filter(pk=event_id).first()
    if event is None or event.type not in NOTIFIABLE_EVENT_TYPES:
        return []
    by_channel: dict[int, tuple[Channel, list[EventRule]]] = {}
    for rule in matching_rules(event):
        for channel in rule.channels.all():
            by_channel.setdefault(channel.pk, (channel, []))[1].append(rule)

    created = []
    for channel, rules in by_channel.values():
        skipped = not channel.enabled
        try:
            with transaction.atomic():
                delivery = Delivery.objects.create(
                    event=event,
                    channel=channel,
                    rule=rules[0],
                    status=DeliveryStatus.SKIPPED if skipped else DeliveryStatus.PENDING,
                    error=f"channel disabled: {channel.disabled_reason}" if skipped else "",
                )
        except IntegrityError:
            delivery = Delivery.objects.get(event=event, channel=channel)
            delivery.matched_rules.add(*rules)
            continue
        delivery.matched_rules.add(*rules)
        if not skipped:
            created.append(delivery.pk)
            transaction.on_commit(partial(enqueue, delivery.pk))
    return created


def enqueue(delivery_id: int, countdown: float | None = None) -> None:
    if deliver.app.conf.task_always_eager:
        try:
            deliver.apply_async((delivery_id,), countdown=countdown)
        except Exception:  # noqa: BLE001 - broker down: the delivery stays pending for sweep_deliveries
            log.exception("could not enqueue delivery %s; sweep_deliveries will retry it", delivery_id)
        return
    # A stalled broker must not stall the request or tick: the delivery stays pending
    # for sweep_deliveries if this does not get through.
    call_bounded(lambda: deliver.apply_async((delivery_id,), countdown=countdown), f"enqueue delivery {delivery_id}")


# --- step 2: one attempt -----------------------------------------------------------


def event_info(event: JobEvent) -> EventInfo:
    job = event.job
    labels = dict(EventType.choices)
    return EventInfo(
        event_id=event.pk,
        type=event.type,
        type_label=labels.get(event.type, event.type),
        level=event.level,
        message=event.message,
        payload=event.payload if isinstance(event.payload, dict) else {"value": event.payload},
        attempt=event.attempt,
        instance=event.instance,
        created_at=event.created_at,
        job_id=job.pk,
        job_name=job.display_name,
        job_status=job.status,
        job_url=job_url(settings.VIGIL_CONSOLE_URL, job.pk),
        workspace_slug=job.workspace.slug,
        workspace_name=job.workspace.name,
    )


def test_info(channel: Channel, now) -> EventInfo:
    return EventInfo(
        event_id=None,
        type="test",
        type_label="Test",
        level="info",
        message=f"Channel “{channel.name}” ({channel.get_kind_display()}) was tested from the console.",
        created_at=now,
        workspace_slug=channel.workspace.slug,
        workspace_name=channel.workspace.name,
        is_test=True,
    )


@dataclass
class AttemptOutcome:
    delivery_id: int
    status: str
    retry_in: float | None = None
    error: str = ""


# A webhook body is a few KB; the cap only bounds a message grown by a huge event payload.
MAX_PAYLOAD_CHARS = 64_000


def attempt_delivery(delivery_id: int, *, allow_retry: bool = True) -> AttemptOutcome:
    now = timezone.now()
    claimed = Delivery.objects.filter(
        pk=delivery_id, status__in=(DeliveryStatus.PENDING, DeliveryStatus.RETRYING)
    ).update(status=DeliveryStatus.SENDING, last_attempt_at=now)
    if not claimed:
        # Already sent, failed, or in another worker's hands: nothing to do.
        current = Delivery.objects.filter(pk=delivery_id).values_list("status", flat=True).first()
        return AttemptOutcome(delivery_id, current or "missing")

    delivery = Delivery.objects.select_related("channel__workspace", "event__job__workspace").get(pk=delivery_id)
    channel = delivery.channel
    if not channel.enabled and not delivery.is_test:
        error = f"channel disabled: {channel.disabled_reason}"
        Delivery.objects.filter(pk=delivery_id).update(status=DeliveryStatus.SKIPPED, error=error)
        metrics.delivery_attempted(channel.kind, DeliveryStatus.SKIPPED)
        return AttemptOutcome(delivery_id, DeliveryStatus.SKIPPED, error=error)

    event = None if delivery.is_test else delivery.event  # a test delivery has no event
    info = test_info(channel, now) if event is None else event_info(event)
    verdict, error, status_code = "ok", "", None
    transport = None
    started = time.monotonic()
    try:
        transport = transport_for(channel.kind)(channel.url, channel.signing_secret)
        status_code = transport.send(info, delivery_id=delivery.pk).status_code
    except DeliveryFailure as failure:
        verdict, error, status_code = failure.kind, str(failure), failure.status_code
    except InvalidChannelURL as exc:
        verdict, error = "permanent", f"bad URL: {exc}"
    except Exception as exc:  # noqa: BLE001 - a bug in a transport must not lose the delivery
        log.exception("transport %s crashed on delivery %s", channel.kind, delivery_id)
        verdict, error = "transient", f"{exc.__class__.__name__}: {exc}"
    duration_ms = (time.monotonic() - started) * 1000.0
    # Shown to every member and kept: never the URL's path, query or credentials.
    # Readable too: a transport that lets a connection-pool repr through (apprise's own
    # requests calls) still stores the cause in a sentence.
    error = outbound.scrub(readable_error(error), channel.url)

    number = delivery.attempts + 1
    delays = retry_delays() if allow_retry else ()
    status, retry_in = plan_after_attempt(number, verdict, delays)
    DeliveryAttempt.objects.create(
        delivery=delivery,
        number=number,
        started_at=now,
        duration_ms=duration_ms,
        ok=verdict == "ok",
        permanent=verdict == "permanent",
        status_code=status_code,
        error=error,
    )
    finished = timezone.now()
    Delivery.objects.filter(pk=delivery_id, status=DeliveryStatus.SENDING).update(
        status=status,
        attempts=number,
        error=error,
        permanent_error=verdict == "permanent",
        status_code=status_code,
        duration_ms=duration_ms,
        payload=(transport.payload if transport is not None else "")[:MAX_PAYLOAD_CHARS],
        sent_at=finished if status == DeliveryStatus.SENT else None,
        next_attempt_at=finished + timedelta(seconds=retry_in) if retry_in is not None else None,
    )
    metrics.delivery_attempted(channel.kind, status, None if event is None else event.created_at)
    if verdict == "permanent" and not delivery.is_test:
        channel.disable(error)
    return AttemptOutcome(delivery_id, status, retry_in, error)


# --- step 3: Send test ---------------------------------------------------------------


def send_test(channel: Channel) -> Delivery:
    """One real delivery of a test message, now, without retries; the returned
    delivery carries the outcome. A failed test does not disable the channel:
    the person testing sees the error on the page."""
    delivery = Delivery.objects.create(channel=channel, is_test=True)
    attempt_delivery(delivery.pk, allow_retry=False)
    delivery.refresh_from_db()
    return delivery


class CannotRedeliver(Exception):
    """The delivery's state refuses another try (the message says why)."""


REDELIVERABLE = (DeliveryStatus.SENT, DeliveryStatus.FAILED, DeliveryStatus.SKIPPED)


def redeliver(delivery: Delivery) -> None:
    """One more try of a finished delivery of an event, through the task queue (no
    further automatic retries: its retry budget is spent). Compare-and-set, so a
    delivery is never sent twice at once."""
    if delivery.is_test:
        raise CannotRedeliver("a test delivery is not redelivered; send a new test.")
    channel = Channel.objects.get(pk=delivery.channel_id)
    if not channel.enabled:
        raise CannotRedeliver(
            f"the channel is disabled ({channel.disabled_reason}); save the channel to turn it back on first."
        )
    with transaction.atomic():
        if not Delivery.objects.filter(pk=delivery.pk, status__in=REDELIVERABLE).update(
            status=DeliveryStatus.PENDING, error="", permanent_error=False, next_attempt_at=None
        ):
            current = Delivery.objects.filter(pk=delivery.pk).values_list("status", flat=True).first()
            raise CannotRedeliver(f"the delivery is {current}; only a sent, failed or skipped one is redelivered.")
        transaction.on_commit(lambda: enqueue(delivery.pk))


# --- the safety net ------------------------------------------------------------------


def stale_deliveries(now, *, pending_after=timedelta(minutes=5), sending_after=timedelta(minutes=10)):
    """Deliveries whose task was lost (broker down at enqueue, worker killed)."""
    return Delivery.objects.filter(
        Q(status=DeliveryStatus.PENDING, created_at__lt=now - pending_after)
        | Q(status=DeliveryStatus.RETRYING, next_attempt_at__lt=now - pending_after)
        | Q(status=DeliveryStatus.SENDING, last_attempt_at__lt=now - sending_after)
    )


def requeue_stale(now=None) -> list[int]:
    now = now or timezone.now()
    ids = []
    for delivery in stale_deliveries(now).only("pk", "status"):
        # A delivery stuck in "sending" lost its worker mid-attempt; count it as retrying.
        if Delivery.objects.filter(pk=delivery.pk, status=delivery.status).update(status=DeliveryStatus.RETRYING):
            ids.append(delivery.pk)
            enqueue(delivery.pk)
    return ids


# --- the Celery tasks ----------------------------------------------------------------
# Defined beside what they run, so that enqueue() needs no import of
# notifications.tasks (the module Celery's autodiscovery reads, which re-exports
# them under these names).


@shared_task(name="notifications.tasks.deliver", acks_late=True, ignore_result=True)
def deliver(delivery_id: int) -> str:
    """One attempt. A transient failure enqueues the next attempt after the
    configured delay (VIGIL_NOTIFY_RETRY_DELAYS, by default 2 s then 8 s); the
    attempt count lives on the Delivery row, so a re-delivered message cannot
    add attempts (the row is claimed compare-and-set)."""
    outcome = attempt_delivery(delivery_id)
    if outcome.retry_in is not None:
        enqueue(delivery_id, countdown=outcome.retry_in)
    return outcome.status


@shared_task(name="notifications.tasks.sweep_deliveries", ignore_result=True)
def sweep_deliveries() -> int:
    """Re-enqueue deliveries whose task was lost; meant for the beat schedule."""
    return len(requeue_stale())
