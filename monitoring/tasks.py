"""Celery shells around monitoring.monitor. One job is ticked by one worker at a
time (a short Redis lock); the state changes inside are compare-and-set anyway,
so a lost lock costs a skipped tick, never a double restart."""

import logging

import redis
from celery import shared_task
from django.conf import settings

from . import monitor

log = logging.getLogger(__name__)
# Long enough for a tick that stops an attempt (the grace) and launches the next;
# short enough that a killed worker's lock does not keep its jobs unwatched long.
LOCK_SECONDS = 20
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
    from console import health

    health.record(health.SWEEP)  # /readyz: the beat schedules sweeps and a worker runs them
    count = 0
    ids = monitor.live_job_ids()
    for start in range(0, len(ids), monitor.SNAPSHOT_CHUNK):
        chunk = ids[start:start + monitor.SNAPSHOT_CHUNK]
        locks = {}
        try:
            for job_id in chunk:
                lock = _try_lock(job_id)
                if lock is not None:
                    locks[job_id] = lock
            # Read after locking: no other tick of these jobs runs until we release.
            snaps = monitor.load_snapshots(list(locks))
            for job_id in locks:
                try:
                    monitor.run_job(job_id, snapshot=snaps.get(job_id))
                except Exception:  # noqa: BLE001 - one broken job must not stop the others
                    log.exception("monitor tick of job %s failed", job_id)
                count += 1
        finally:
            for lock in locks.values():
                try:
                    lock.release()
                except redis.RedisError:
                    pass
    return count


def _try_lock(job_id: int):
    """The job's lock if free (None if another worker holds it); a dummy without Redis."""
    try:
        lock = _redis().lock(f"vigil:monitor:job:{job_id}", timeout=LOCK_SECONDS, blocking=False)
        return lock if lock.acquire() else None
    except redis.RedisError:
        log.warning("Redis unavailable; ticking job %s without the lock", job_id)
        return _NoLock()


class _NoLock:
    def release(self):
        pass
