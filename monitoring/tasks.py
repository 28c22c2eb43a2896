"""Celery shells around the monitor tick (monitoring.tick). The sweep is split into
shards (job id modulo MONITOR_SHARDS), one task per shard per beat tick, each
worked by one worker at a time under the shard's Redis lease (monitoring.leases),
so more worker processes watch more jobs. A steady job is ticked only when its
scheduled check is due or an event woke it (monitoring.schedule). run_job (the exit listener's tick of one
job) takes a short per-job lock. The state changes inside are compare-and-set and
each decision has its idempotency key, so a tick run twice (a lost lease, run_job
beside the sweep) costs a wasted tick, never a double restart."""

import logging
import threading
import time
from contextlib import contextmanager
from datetime import datetime

import redis
from celery import shared_task
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from infra import health, metrics
from infra.client import redis_client

from . import leases, schedule, tick

log = logging.getLogger(__name__)
# run_job's per-job lock. Short, so that a killed worker's job is ticked by another
# within seconds; a tick that runs longer (an attempt's teardown grace, a launch)
# renews it every LOCK_SECONDS / 3 while it runs.
LOCK_SECONDS = 4


def with_job_lock(job_id: int, fn):
    """run_job's guard: the exit listener's tick of one job, one worker at a time."""
    lock = _try_lock(job_id)
    if lock is None:
        return None  # another worker is on this job right now
    if isinstance(lock, _NoLock):
        return fn()
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
def sweep(shard: int | None = None, now: datetime | None = None) -> int | None:
    """Beat fires one per shard every MONITOR_SWEEP_SECONDS; any worker takes it.
    Ticks the shard's live jobs under the shard's lease; None if another worker
    holds it (it is sweeping that shard now). Without a shard, every shard in turn
    (tests pass `now` to look at the jobs as a later sweep would)."""
    if shard is None:
        return sum(sweep(s, now) or 0 for s in range(settings.MONITOR_SHARDS))
    health.record(health.SWEEP)  # /readyz: the beat schedules sweeps and a worker runs them
    started = time.time()
    lease = leases.Lease(leases.shard_key(shard))
    try:
        if not lease.acquire():
            return None
    except redis.RedisError:
        log.warning("Redis unavailable; sweeping shard %s without its lease", shard)
        count = _sweep_jobs(tick.live_job_ids(shard, settings.MONITOR_SHARDS), now, None)
    else:
        try:
            with leases.renewing(lease):
                # Read after leasing: no other sweep of this shard runs until we release.
                # Steady jobs wait for their scheduled tick only while exits reach us as events,
                # and wait longer while the shard is behind (schedule.pace).
                due_at = (now or timezone.now()) if exits_announced() else None
                due = tick.due_jobs(shard, settings.MONITOR_SHARDS, due_at=due_at)
                stretch = (
                    schedule.pace(shard, schedule.stretch_of(shard), (at for _, at in due), due_at)
                    if due_at is not None
                    else 1.0
                )
                count = _sweep_jobs([job_id for job_id, _ in due], now, lease, stretch)
        finally:
            lease.release()
    metrics.sweep_done(started, count, settings.MONITOR_SWEEP_SECONDS, shard=shard)
    return count


def exits_announced() -> bool:
    """Is the exit listener alive (its heartbeat fresh)? Then an instance exit reaches
    the monitor as an event (jobs.actions.wake_monitor) and the sweep may leave steady
    jobs to their schedule; otherwise it ticks every job, as its poll is the only way
    an exit is seen."""
    try:
        raw = redis_client().get(health.EXITS)
    except redis.RedisError:
        return False
    try:
        beat = float(raw) if raw is not None else None
    except ValueError:
        return False
    return beat is not None and time.time() - beat < health.stale_after(settings.MONITOR_SWEEP_SECONDS)


def _sweep_jobs(ids: list[int], now: datetime | None, lease: leases.Lease | None, stretch: float = 1.0) -> int:
    """Tick the jobs, reading them in bulk chunks, claiming a chunk's due periodic checks
    in one write and scheduling its steady jobs in another; stop if the lease was lost (another worker has the shard now and
    ticks the rest)."""
    count = 0
    for start in range(0, len(ids), tick.SNAPSHOT_CHUNK):
        if lease is not None and lease.lost.is_set():
            log.warning("lost the lease of %s mid-sweep; leaving the rest to its new holder", lease.key)
            break
        chunk = ids[start : start + tick.SNAPSHOT_CHUNK]
        snaps = tick.load_snapshots(chunk)
        plans: list = []
        tails: list[tick.PeriodicTail] = []
        for job_id in chunk:
            try:
                tick.run_job(job_id, now, snapshot=snaps.get(job_id), plans=plans, tails=tails, stretch=stretch)
            except Exception:  # noqa: BLE001 - one broken job must not stop the others
                log.exception("monitor tick of job %s failed", job_id)
            count += 1
        # The chunk's due periodic checks claimed in one write, then run.
        tick.finish_periodic(tails, now or timezone.now(), plans, stretch)
        try:
            schedule.store_many(plans)
        except DatabaseError:  # unscheduled, the jobs are due at the next sweep: a wasted tick
            log.exception("could not schedule the next ticks of %s jobs", len(plans))
    return count


def _try_lock(job_id: int):
    """The job's lock if free (None if another worker holds it); a dummy without Redis."""
    try:
        lock = redis_client().lock(
            f"vigil:monitor:job:{job_id}", timeout=LOCK_SECONDS, blocking=False, thread_local=False
        )  # renewed from another thread
        return lock if lock.acquire() else None
    except redis.RedisError:
        log.warning("Redis unavailable; ticking job %s without the lock", job_id)
        return _NoLock()


class _NoLock:
    def release(self):
        pass
