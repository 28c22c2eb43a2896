"""The Celery tasks of jobs, where Celery's autodiscovery looks for them. They are
defined in jobs.actions beside what they run (thin shells: a message becomes a
call), so that queueing one there needs no import back into this module."""

from .actions import launch_attempt_task, stop_job_task

__all__ = ["launch_attempt_task", "stop_job_task"]
