"""Pushing what happened to the browsers that watch it (SPEC section 8's `ws`).

Events are rows before they are messages: jobs.actions.record_event writes the
row and, after commit, jobs.events calls its subscribers, among them
`event_committed(event_id)` (subscribed in MonitoringConfig.ready), which reads
the row back and sends it to the Channels group of its job (`job-<id>`) and of its
workspace (`workspace-<id>`), followed by the job's current status. A browser
that was away asks for the events after the last id it saw, so nothing is lost
and, because every message carries the row's id, nothing is shown twice.

These functions are synchronous (they run in after-commit hooks of views,
Celery tasks and the monitor) and never raise for a delivery problem: the state
change they describe has already committed.
"""

from __future__ import annotations

import json
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from infra.bounded import PUBLISH_TIMEOUT, call_bounded
from jobs.models import Diagnosis, JobEvent

log = logging.getLogger(__name__)

# Diagnoses are sent with their summary; their full data (stacks, C4D tables) is
# rendered by the page on demand, so a message stays small.
SUMMARY_LIMIT = 4000
SEND_TIMEOUT = PUBLISH_TIMEOUT  # seconds a caller waits for a send before moving on


def job_group(job_id: int) -> str:
    return f"job-{int(job_id)}"


def workspace_group(workspace_id: int) -> str:
    return f"workspace-{int(workspace_id)}"


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def event_message(event) -> dict:
    return {
        "type": "event",
        "id": event.pk,
        "job_id": event.job_id,
        "event_type": event.type,
        "label": event.get_type_display(),
        "level": event.level,
        "message": event.message,
        "attempt": event.attempt,
        "instance": event.instance,
        "created_at": _iso(event.created_at),
        "payload": event.payload if _small(event.payload) else {},
    }


def status_message(job) -> dict:
    return {
        "type": "status",
        "job_id": job.pk,
        "status": job.status,
        "reason": job.reason,
        "restart_count": job.restart_count,
        "max_restarts": job.restart_budget,
        "current_attempt": job.current_attempt,
        "updated_at": _iso(job.updated_at),
    }


def diagnosis_message(diagnosis) -> dict:
    summary = diagnosis.summary
    if len(summary) > SUMMARY_LIMIT:
        summary = summary[: SUMMARY_LIMIT - 1] + "…"
    return {
        "type": "diagnosis",
        "id": diagnosis.pk,
        "job_id": diagnosis.job_id,
        "kind": diagnosis.kind,
        "label": diagnosis.get_kind_display(),
        "attempt": diagnosis.attempt,
        "trigger": diagnosis.trigger,
        "summary": summary,
        "created_at": _iso(diagnosis.created_at),
    }


def _small(payload) -> bool:
    try:
        return len(json.dumps(payload, default=str)) <= SUMMARY_LIMIT
    except (TypeError, ValueError):
        return False


def _send(groups: list[str], messages: list[dict]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return

    async def send_all():
        for group in groups:
            for message in messages:
                await layer.group_send(group, {"type": "job.message", "message": message})

    # In a thread of its own, waited on briefly: a stalled Redis must not stall the
    # request or the monitor tick that committed the change (the page reads what it
    # missed from the database when it reconnects). Also lets sync code called from a
    # thread that runs an event loop send without blocking on that loop.
    call_bounded(lambda: async_to_sync(send_all)(), f"publish to {', '.join(groups)}", SEND_TIMEOUT)


def event_committed(event_id: int) -> None:
    """After commit: send the event and the job's status to everyone watching the
    job or its workspace. (Diagnoses are sent by diagnosis_committed.)"""
    event = JobEvent.objects.select_related("job").filter(pk=event_id).first()
    if event is None:
        return
    job = event.job
    messages = [event_message(event), status_message(job)]
    _send([job_group(job.pk), workspace_group(job.workspace_id)], messages)


def progress_reported(job_id: int, workspace_id: int, attempt: int, step: int) -> None:
    """After commit of a new report_progress step: the job page's progress panel and
    the job list's sparkline fetch their part again (they throttle), also for a job
    that prints nothing, whose log would never tell them."""
    message = {"type": "progress", "job_id": int(job_id), "attempt": int(attempt), "step": int(step)}
    _send([job_group(job_id), workspace_group(workspace_id)], [message])


def diagnosis_committed(diagnosis_id: int) -> None:
    """Send a diagnosis (stack snapshot, C4D verdict) to the job's watchers."""
    diagnosis = Diagnosis.objects.select_related("job").filter(pk=diagnosis_id).first()
    if diagnosis is None:
        return
    _send([job_group(diagnosis.job_id)], [diagnosis_message(diagnosis)])
