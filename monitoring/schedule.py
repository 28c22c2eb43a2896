"""When the sweep must next tick a steady Running job, so that a job with nothing new
costs nothing per sweep (issue 17).

A tick that finds the job steady (Running, every instance of its one live attempt
running, nothing pending) stores the earliest moment anything could change without an
event: its hang or exit-hang deadline (core.hang.next_look_at), its next periodic check
(log scan, stragglers, C4D), and at most settings.MONITOR_QUIET_SECONDS ahead. Until
then the sweep leaves the job alone; an event sets the time back to null
(jobs.actions.wake_monitor: an announced exit, the first progress, a new hang interval).
The store is a compare-and-set on monitor_state_version, which wake_monitor bumps, so a
tick that read the job before an event never schedules past it.

Only jobs on a backend that announces exits on the listener's channel
(VIGIL_EXIT_CHANNEL) are scheduled (the others have no event for an exit but the
sweep's poll), and only while the exit listener is alive
(monitoring.tasks decides that per sweep).

When a shard falls behind its schedule (more jobs than its workers tick at this pace),
the quiet period stretches, up to settings.MONITOR_QUIET_MAX_SECONDS, and the periodic
log scan and straggler check by the same factor, and they shrink back once it keeps
up (core.pacing, stretch_of and pace below): the hang deadlines and C4D keep their time.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from datetime import datetime, timezone as dt_timezone

import redis
from django.conf import settings
from django.db import connection

from core import hang, pacing
from core.flags import ExecutionMode
from infra.client import redis_client
from jobs.backends.base import Backend
from jobs.models import Attempt, AttemptStatus, Instance, InstanceStatus, Job, JobStatus
from monitoring import bulk, checks
from monitoring.failures import epoch
from monitoring.state import MonitorState

log = logging.getLogger(__name__)


def quiet_seconds() -> float:
    return float(getattr(settings, "MONITOR_QUIET_SECONDS", 10.0))


def quiet_ceiling() -> float:
    """The longest the quiet period stretches while a shard is behind (core.pacing)."""
    return float(getattr(settings, "MONITOR_QUIET_MAX_SECONDS", 60.0))


def _stretch_key(shard: int) -> str:
    return f"vigil:monitor:quiet-stretch:{shard}"


def stretch_of(shard: int) -> float:
    """The shard's quiet-period factor as its last sweep left it (1 where none did, or
    Redis does not answer: the configured period)."""
    try:
        return _factor(redis_client().get(_stretch_key(shard)))
    except redis.RedisError:
        return 1.0


def stretches() -> dict[int, float]:
    """Every shard's factor, in one round trip (the /metrics scrape)."""
    shards = range(settings.MONITOR_SHARDS)
    try:
        raw = redis_client().mget([_stretch_key(shard) for shard in shards])
    except redis.RedisError:
        return {}
    return {shard: _factor(value) for shard, value in zip(shards, raw)}


def _factor(raw) -> float:
    try:
        return max(1.0, float(raw)) if raw is not None else 1.0
    except ValueError:
        return 1.0


def pace(shard: int, stretch: float, due: Iterable[datetime | None], now: datetime) -> float:
    """The factor a sweep of the shard that listed its due jobs at `now` schedules with
    (the shard's `stretch` so far, adjusted by how late those are: core.pacing), kept in
    Redis for whichever worker takes the shard next. Said in the log when the shard
    falls behind and when it is back on time."""
    late = pacing.lateness((at.timestamp() if at is not None else None for at in due), now.timestamp())
    quiet = quiet_seconds()
    if quiet <= 0:
        return 1.0
    after = pacing.next_stretch(
        stretch, late, quiet=quiet, cadence=settings.MONITOR_SWEEP_SECONDS, ceiling=quiet_ceiling() / quiet
    )
    if after > stretch:
        log.warning(
            "monitor shard %s is %.1f s behind its scheduled checks: steady jobs' quiet period stretched to %.0f s "
            "and the log scan and straggler check run every %.0f s (an unannounced exit may take that long to be "
            "found; more worker processes bring them back to %.0f s and %.0f s)",
            shard,
            late,
            quiet * after,
            checks.STRAGGLER_EVERY * after,
            quiet,
            checks.STRAGGLER_EVERY,
        )
    elif after == 1.0 < stretch:
        log.warning("monitor shard %s keeps up again: its quiet period and periodic checks are back to theirs", shard)
    if after != stretch:
        try:
            redis_client().set(_stretch_key(shard), repr(after), ex=3600)
        except redis.RedisError:
            pass
    return after


def steady(
    job: Job,
    attempt: Attempt | None,
    instances: list[Instance],
    live_attempts: list[Attempt],
    pending_instance_restarts: list,
    backend: Backend,
) -> bool:
    """Nothing but time can change this job's next tick, short of an event."""
    # Only exits announced where the listener hears them are events.
    return (
        quiet_seconds() > 0
        and backend.exit_channel == settings.VIGIL_EXIT_CHANNEL
        and job.status == JobStatus.RUNNING
        and attempt is not None
        and attempt.status == AttemptStatus.RUNNING
        and bool(instances)
        and all(i.status == InstanceStatus.RUNNING for i in instances)
        and [a.pk for a in live_attempts] == [attempt.pk]
        and not pending_instance_restarts
    )


def next_tick_at(
    job: Job, attempt: Attempt, instances: list[Instance], now: datetime, stretch: float = 1.0
) -> datetime:
    """The earliest moment a tick of this steady job could find something to do. While
    its shard is behind, `stretch` lengthens the quiet period and the periodic checks'
    periods (core.pacing); the hang deadlines and C4D keep theirs."""
    state = MonitorState.load(job)
    ts = now.timestamp()
    # The cap is spread over its second half so jobs scheduled in one sweep do not all
    # fall due in one later sweep.
    due = [
        ts + quiet_seconds() * stretch * random.uniform(0.5, 1.0),
        state.stragglers_at + checks.STRAGGLER_EVERY * stretch,
    ]
    if job.fault_tolerance:
        config = job.ft
        due.append((state.log_scan_at or 0.0) + checks.LOG_SCAN_EVERY.total_seconds() * stretch)
        if config.enable_c4d_hang_detection:
            due.append(state.c4d_at + config.c4d_common_envs.conn_bw_check_period)
        if config.job_execution_mode == ExecutionMode.SYNC:
            activity = [
                hang.InstanceActivity(name=i.name, running=True, last_output_at=epoch(i.last_output_at))
                for i in instances
            ]
            started = epoch(attempt.starting_at) or epoch(attempt.queued_at) or ts
            watched = hang.WatchedAttempt(
                config,
                job.hang_interval_override,
                activity,
                started,
                first_progress_at=epoch(attempt.first_progress_at),
                override_set_at=epoch(job.hang_interval_set_at),
            )
            at = hang.next_look_at(watched, ts)
            if at is not None:
                due.append(at)
    return datetime.fromtimestamp(max(ts, min(due)), tz=dt_timezone.utc)


def store(job: Job, at: datetime | None) -> None:
    """Schedule the job's next tick (None: every sweep). Scheduling is a compare-and-set
    against events; clearing always wins."""
    if at == job.monitor_next_check_at:
        return
    rows = Job.objects.filter(pk=job.pk)
    if at is not None:
        # ... and against a restart another worker made meanwhile (a new attempt is not steady yet).
        rows = rows.filter(
            monitor_state_version=job.monitor_state_version,
            status=JobStatus.RUNNING,
            current_attempt=job.current_attempt,
        )
    if rows.update(monitor_next_check_at=at):
        job.monitor_next_check_at = at


def store_many(plans: Iterable[tuple[Job, datetime]]) -> int:
    """Schedule many steady jobs' next ticks in one statement (a sweep's chunk), each
    row under store's compare-and-set: a job an event woke, or another worker restarted,
    since its tick read it keeps its row as it is. A sweep pays one write per chunk
    instead of one per job (on PostgreSQL each is a commit). Returns the rows written."""
    plans = [(job, at) for job, at in plans if at != job.monitor_next_check_at]
    if not plans:
        return 0
    written = bulk.update_jobs(
        "monitor_next_check_at",
        [(job.pk, connection.ops.adapt_datetimefield_value(at)) for job, at in plans],
        ("id", "monitor_state_version", "current_attempt"),
        [(job.pk, job.monitor_state_version, job.current_attempt) for job, _ in plans],
        where={"status": str(JobStatus.RUNNING)},
    )
    assert isinstance(written, int)
    return written
