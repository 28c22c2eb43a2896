"""Celery shells around jobs.actions: they translate a message into a call."""

from celery import shared_task

from . import actions


@shared_task(name="jobs.tasks.launch_attempt", acks_late=True)
def launch_attempt_task(job_id: int, number: int) -> bool:
    return actions.launch_attempt(job_id, number)


@shared_task(name="jobs.tasks.stop_job", acks_late=True)
def stop_job_task(job_id: int) -> bool:
    return actions.finish_stop(job_id)
