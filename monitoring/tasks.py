"""Celery shells around the monitor tick (monitoring.tick). One job is ticked by one worker at a
time (a short Redis lock); the state changes inside are compare-and-set anyway,
so a lost lock costs a skipped tick, never a double restart."""

import logging
import threading
import time
from contextlib import contextmanager
from datetime import datetime

import redis
from celery import shared_task
from django.conf import settings

from infra import health, metrics
from infra.client import redis_client

from . import tick

log = logging.getLogger(__name__)
# Short, so that a killed worker's jobs are ticked by another within seconds; a
# tick that runs longer (an attempt's teardown grace, a launch) renews its locks
# every LOCK_SECONDS / 3 while it runs.
LOCK_SECONDS = 4


def with_job_lock(job_id: int, fn):
    try:
        lock = redis_client().lock(f"vigil:monitor:job:{job_id}", timeout=LOCK_SECONDS, blocking=False,
                              thread_local=False)  # renewed from another thread
        acquired = lock.acquire()
    except redis.RedisError:
        log.warning("Redis unavailable; ticking job %s without the lock", job_id)
        return fn()
    if not acquired:
        return None  # another worker is on this job right now
    try:
        with renewed([lock]):
            return fn()
    finally:
        try:
            lock.release()
        except redis.RedisError:
            pass


@contextmanager
def renewed(locks):
    """Keep the locks' TTL at LOCK_SECONDS while the block runs (a thread renews them)."""
    done = threading.Event()

    def renew():
        while not done.wait(LOCK_SECONDS / 3):
            for lock in locks:
                if done.is_set():
                    return
                try:
                    lock.reacquire()
                except redis.RedisError:  # lost (expired) or Redis away: the CAS writes still hold
                    pass

    renewer = threading.Thread(target=renew, name="vigil-lock-renewal", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        done.set()
        renewer.join()


@shared_task(name="monitoring.tasks.run_job", acks_late=True)
def run_job(job_id: int) -> str | None:
    result = with_job_lock(job_id, lambda: tick.run_job(job_id))
    return result.action if result else None


@shared_task(name="monitoring.tasks.sweep", ignore_result=True)
def sweep(now: datetime | None = None) -> int:
    """Every second (beat): tick every live job. The only sweep; tests pass `now`
    to look at the jobs as a later sweep would."""
    health.record(health.SWEEP)  # /readyz: the beat schedules sweeps and a worker runs them
    started = time.time()
    count = 0
    ids = tick.live_job_ids()
    for start in range(0, len(ids), tick.SNAPSHOT_CHUNK):
        chunk = ids[start:start + tick.SNAPSHOT_CHUNK]
        locks = {}
        try:
            for job_id in chunk:
                lock = _try_lock(job_id)
                if lock is not None:
                    locks[job_id] = lock
            # Read after locking: no other tick of these jobs runs until we release.
            with renewed([lock for lock in locks.values() if not isinstance(lock, _NoLock)]):
                snaps = tick.load_snapshots(list(locks))
                for job_id in locks:
                    try:
                        tick.run_job(job_id, now, snapshot=snaps.get(job_id))
                    except Exception:  # noqa: BLE001 - one broken job must not stop the others
                        log.exception("monitor tick of job %s failed", job_id)
                    count += 1
        finally:
            for lock in locks.values():
                try:
                    lock.release()
                except redis.RedisError:
                    pass
    metrics.sweep_done(started, count, settings.MONITOR_SWEEP_SECONDS)
    return count


def _try_lock(job_id: int):
    """The job's lock if free (None if another worker holds it); a dummy without Redis."""
    try:
        lock = redis_client().lock(f"vigil:monitor:job:{job_id}", timeout=LOCK_SECONDS, blocking=False,
                              thread_local=False)  # renewed from another thread
        return lock if lock.acquire() else None
    except redis.RedisError:
        log.warning("Redis unavailable; ticking job %s without the lock", job_id)
        return _NoLock()


class _NoLock:
    def release(self):
        pass
