"""Celery tasks of notifications: thin wrappers over notifications.dispatch."""

from __future__ import annotations

from celery import shared_task

from . import dispatch


@shared_task(acks_late=True, ignore_result=True)
def deliver(delivery_id: int) -> str:
    """One attempt. A transient failure enqueues the next attempt after the
    configured delay (VIGIL_NOTIFY_RETRY_DELAYS, by default 2 s then 8 s); the
    attempt count lives on the Delivery row, so a re-delivered message cannot
    add attempts (the row is claimed compare-and-set)."""
    outcome = dispatch.attempt_delivery(delivery_id)
    if outcome.retry_in is not None:
        dispatch.enqueue(delivery_id, countdown=outcome.retry_in)
    return outcome.status


@shared_task(ignore_result=True)
def sweep_deliveries() -> int:
    """Re-enqueue deliveries whose task was lost; meant for the beat schedule."""
    return len(dispatch.requeue_stale())
