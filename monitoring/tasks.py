"""Celery shells around monitoring.monitor. One job is ticked by one worker at a
time (a short Redis lock); the state changes inside are compare-and-set anyway,
so a lost lock costs a skipped tick, never a double restart."""

import logging

import redis
from celery import shared_task
from django.conf import settings

from . import monitor

log = logging.getLogger(__name__)
LOCK_SECONDS = 60
_client = None


def _redis():
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return _client


def with_job_lock(job_id: int, fn):
    try:
        lock = _redis().lock(f"vigil:monitor:job:{job_id}", timeout=LOCK_SECONDS, blocking=False)
        acquired = lock.acquire()
    except redis.RedisError:
        log.warning("Redis unavailable; ticking job %s without the lock", job_id)
        return fn()
    if not acquired:
        return None  # another worker is on this job right now
    try:
        return fn()
    finally:
        try:
            lock.release()
        except redis.RedisError:
            pass


@shared_task(name="monitoring.tasks.run_job", acks_late=True)
def run_job(job_id: int) -> str | None:
    result = with_job_lock(job_id, lambda: monitor.run_job(job_id))
    return result.action if result else None


@shared_task(name="monitoring.tasks.sweep", ignore_result=True)
def sweep() -> int:
    """Every second (beat): tick every live job."""
    count = 0
    for job_id in monitor.live_job_ids():
        with_job_lock(job_id, lambda: monitor.run_job(job_id))
        count += 1
    return count
