"""Celery tasks of notifications: thin wrappers over notifications.dispatch."""

from __future__ import annotations

from celery import shared_task

from . import dispatch


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=None)
def deliver(self, delivery_id: int) -> str:
    """One attempt; a transient failure comes back after the configured delay
    (VIGIL_NOTIFY_RETRY_DELAYS, exponential by default: 2 s, 8 s)."""
    outcome = dispatch.attempt_delivery(delivery_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.status


@shared_task(ignore_result=True)
def sweep_deliveries() -> int:
    """Re-enqueue deliveries whose task was lost; meant for the beat schedule."""
    return len(dispatch.requeue_stale())
