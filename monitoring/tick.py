"""One monitor tick over one job: read the backend's view of the current attempt,
keep the instance rows in step with it, then hand exits to the restarts module and
a running job to the checks. Every step is small and idempotent, so a tick is safe
to run concurrently and repeatedly; monitoring.tasks runs it (the sweep of a shard, under the
shard's Redis lease, and the run_job task, under a per-job lock)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError

from django.db.models import Value
from django.db.models.functions import Mod
from django.utils import timezone

from core.stages import clamp
from jobs import actions
from jobs.actions import sync_instances
from jobs.backends.base import Backend, BackendError
from jobs.models import (
    FINISHED_JOB_STATUSES,
    LIVE_ATTEMPT_STATUSES,
    LIVE_JOB_STATUSES,
    Attempt,
    AttemptStatus,
    Instance,
    InstanceStatus,
    Job,
    JobStatus,
    RestartKind,
    RestartRecord,
    RestartResult,
)
from monitoring import checks, quorum, schedule
from monitoring.state import MonitorState
from monitoring.restarts import (
    TickAction,
    complete_pending_restart,
    handle_failures,
    recover,
    relaunch_after,
    stop_orphaned_attempts,
)


log = logging.getLogger(__name__)


@dataclass
class TickResult:
    job_id: int
    action: TickAction = TickAction.NONE
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    # Its periodic checks wait for the chunk's claims (PeriodicTail); finish_periodic
    # runs them and schedules the job.
    deferred: bool = False


@dataclass
class PeriodicTail:
    """The rest of a sweep's tick of one job whose periodic checks are due: run once its
    chunk's claims are written in one statement (finish_periodic)."""

    claim: checks.PeriodicClaim
    attempt: Attempt
    instances: list[Instance]
    backend: Backend
    snapshot: JobSnapshot


@dataclass
class JobSnapshot:
    """What a sweep read for one job in a few bulk queries: the job, its live
    attempts and the instance rows of its current attempt. A tick given a snapshot
    skips the five per-job reads; every write stays a compare-and-set, so a
    snapshot a few milliseconds old is as safe as the job row a tick reads first."""

    job: Job
    live_attempts: list[Attempt] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    pending_instance_restarts: list[datetime] = field(default_factory=list)  # their restart times
    # The attempts a whole-job restart still pending started (complete_pending_restart
    # has work only for these; the record is committed with its attempt, before any read).
    pending_job_restarts: set[int] = field(default_factory=set)

    @property
    def current(self) -> Attempt | None:
        return next((a for a in self.live_attempts if a.number == self.job.current_attempt), None)

    def needs_recovery(self, now: datetime) -> bool:
        """recover() has work only for a queued attempt nobody took or an older attempt still live."""
        relaunch, lease = relaunch_after(), actions.launch_lease()
        if any(t < now - lease for t in self.pending_instance_restarts):
            return True
        return any(
            a.number < self.job.current_attempt
            or (
                a.number == self.job.current_attempt
                and a.status == AttemptStatus.QUEUING
                and a.queued_at < now - relaunch
            )
            or (
                a.number == self.job.current_attempt
                and a.status == AttemptStatus.STARTING
                and not a.backend_handle
                and a.preparing_at is not None
                and a.preparing_at < now - lease
            )
            for a in self.live_attempts
        )


SNAPSHOT_CHUNK = 200  # jobs read per bulk query in a sweep


def load_snapshots(job_ids: list[int]) -> dict[int, JobSnapshot]:
    """Four queries for any number of jobs (the caller chunks the ids): everything a
    tick of a steady job reads."""
    snaps = {j.pk: JobSnapshot(j) for j in Job.objects.filter(pk__in=job_ids).select_related("workspace")}
    for a in Attempt.objects.filter(job_id__in=job_ids, status__in=LIVE_ATTEMPT_STATUSES):
        snap = snaps.get(a.job_id)
        if snap is not None:
            a.job = snap.job
            snap.live_attempts.append(a)
    current = {s.current.pk: s for s in snaps.values() if s.current is not None}
    for i in Instance.objects.filter(attempt_id__in=list(current)):
        current[i.attempt_id].instances.append(i)
    for job_id, kind, at, new_attempt in RestartRecord.objects.filter(
        job_id__in=job_ids, result=RestartResult.PENDING
    ).values_list("job_id", "kind", "restart_time", "new_attempt"):
        if job_id in snaps:
            if kind == RestartKind.INSTANCE:
                snaps[job_id].pending_instance_restarts.append(at)
            elif new_attempt is not None:
                snaps[job_id].pending_job_restarts.add(new_attempt)
    return snaps


def run_job(
    job_id: int,
    now: datetime | None = None,
    *,
    snapshot: JobSnapshot | None = None,
    plans: list[tuple[Job, datetime]] | None = None,
    tails: list[PeriodicTail] | None = None,
    stretch: float = 1.0,
) -> TickResult:
    """One tick over one job. Safe to run concurrently and repeatedly. Given the
    sweep's snapshot it skips the per-job reads and recovers only when needed, and
    schedules the job's next tick when it found the job steady (monitoring.schedule);
    any other tick leaves the job due at every sweep. Given `plans`, a steady job's
    next tick is added there for the sweep to store with its chunk's
    (schedule.store_many); a job found not steady is made due at once either way.
    Given `tails` (and a snapshot), a job whose periodic checks are due stops before
    them and is added there: the sweep claims its chunk's in one write, then runs them
    and schedules those jobs (finish_periodic). `stretch`: the sweep's factor on the
    quiet period and the periodic checks' periods while its shard is behind (core.pacing)."""
    now = now or timezone.now()
    job = snapshot.job if snapshot is not None else Job.objects.filter(pk=job_id).select_related("workspace").first()
    plan: list[datetime] = []
    result = _run_job(job_id, job, now, snapshot, plan, tails, stretch)
    if job is not None and not result.deferred:
        _schedule(job, plan, plans)
    return result


def _schedule(job: Job, plan: list[datetime], plans: list[tuple[Job, datetime]] | None) -> None:
    if job.status not in FINISHED_JOB_STATUSES:
        if plan and plans is not None:
            plans.append((job, plan[0]))
        else:
            schedule.store(job, plan[0] if plan else None)


def finish_periodic(
    tails: list[PeriodicTail], now: datetime, plans: list[tuple[Job, datetime]], stretch: float = 1.0
) -> None:
    """Claim the chunk's due periodic checks in one compare-and-set write, run those
    this sweep won, and schedule each job as its tick would have. A claim lost to
    another worker (it ticked the job meanwhile) runs nothing here, as claim_periodic."""
    if not tails:
        return
    try:
        won = MonitorState.save_many([(t.claim.state, t.claim.job) for t in tails])
    except DatabaseError:  # unclaimed: due again, the next sweep claims them
        log.exception("could not claim the periodic checks of %s jobs", len(tails))
        won = set()
    for t in tails:
        job = t.claim.job
        try:
            ours = job.pk in won
            plan: list[datetime] = []
            _periodic_and_plan(
                job,
                t.attempt,
                t.instances,
                t.backend,
                now,
                t.snapshot,
                plan,
                scan=ours and t.claim.scan,
                stragglers=ours and t.claim.stragglers,
                stretch=stretch,
            )
            _schedule(job, plan, plans)
        except Exception:  # noqa: BLE001 - one broken job must not stop the others
            log.exception("monitor tick of job %s failed", job.pk)


def _run_job(
    job_id: int,
    job: Job | None,
    now: datetime,
    snapshot: JobSnapshot | None,
    plan: list[datetime],
    tails: list[PeriodicTail] | None = None,
    stretch: float = 1.0,
) -> TickResult:
    result = TickResult(job_id)
    if job is None or job.status in FINISHED_JOB_STATUSES:
        if job is not None:
            stop_orphaned_attempts(job)
        return result
    if job.status == JobStatus.STOPPING:
        actions.finish_stop(job.pk)
        result.action = TickAction.STOPPED
        return result
    if snapshot is None:
        recover(job, now)
        attempt = Attempt.objects.filter(job=job, number=job.current_attempt).first()
    else:
        if snapshot.needs_recovery(now):
            recover(job, now)
        attempt = snapshot.current
    if attempt is None or not attempt.backend_handle or attempt.status not in LIVE_ATTEMPT_STATUSES:
        return result
    backend = actions.get_backend_for(job)
    try:
        statuses = backend.poll(attempt.backend_handle)
    except BackendError as exc:
        result.notes.append(f"poll failed: {exc}")
        if not exc.retryable:
            actions.fail_job(
                job,
                f"The backend lost attempt {attempt.number}: {exc.message}",
                key=f"poll-failed:{job.pk}:{attempt.number}",
            )
        return result
    instances = sync_instances(attempt, statuses, snapshot.instances if snapshot is not None else None)
    note_first_output(job, attempt, instances)
    if job.status in (JobStatus.QUEUING, JobStatus.RESTARTING, JobStatus.CREATING) and any(
        i.status == InstanceStatus.RUNNING for i in instances
    ):
        actions.mark_running(job, attempt)
        job.refresh_from_db()
    if snapshot is None or attempt.number in snapshot.pending_job_restarts:
        complete_pending_restart(job, attempt, instances)

    if all(i.status == InstanceStatus.SUCCEEDED for i in instances) and instances:
        actions.succeed_job(job, attempt)
        if attempt.backend_handle.get("lighthouse"):
            # Replica groups: the attempt's Lighthouse outlives its groups; it ends with the job.
            try:
                backend.stop(attempt.backend_handle, grace=1.0)
            except BackendError as exc:
                log.warning("job %s: the Lighthouse of attempt %s did not stop: %s", job.pk, attempt.number, exc)
        result.action = TickAction.SUCCEEDED
        return result

    failed = [
        i for i in instances if i.status in (InstanceStatus.FAILED, InstanceStatus.LOST) and not i.handled_exit_key
    ]
    if failed:
        handled = handle_failures(job, attempt, instances, failed, backend, now)
        if handled:
            result.action, result.reason = handled
            return result

    if job.status != JobStatus.RUNNING:
        return result
    if job.fault_tolerance and attempt.backend_handle.get("lighthouse"):
        ended = quorum.observe(job, attempt, now)  # replica groups: the quorum, a group that never rejoined
        if ended:
            result.action, result.reason = TickAction.FAIL_JOB, ended[1]
            return result
    if job.fault_tolerance:
        problem = checks.check_problems(job, job.ft, attempt, instances, backend, now) or checks.check_c4d(
            job, job.ft, attempt, instances, now
        )
        if problem:
            result.action, result.reason = problem
            return result
    due = checks.periodic_due(job, now, log_scan=job.fault_tolerance, stretch=stretch)
    if due is not None and tails is not None and snapshot is not None:
        tails.append(PeriodicTail(due, attempt, instances, backend, snapshot))
        result.deferred = True
        return result
    # Both periodic checks claimed in one write (each claim was its own).
    claimed = due if due is not None and due.state.save(job) else None
    _periodic_and_plan(
        job,
        attempt,
        instances,
        backend,
        now,
        snapshot,
        plan,
        scan=claimed is not None and claimed.scan,
        stragglers=claimed is not None and claimed.stragglers,
        stretch=stretch,
    )
    return result


def _periodic_and_plan(
    job: Job,
    attempt: Attempt,
    instances: list[Instance],
    backend: Backend,
    now: datetime,
    snapshot: JobSnapshot | None,
    plan: list[datetime],
    *,
    scan: bool,
    stragglers: bool,
    stretch: float = 1.0,
) -> None:
    """The claimed periodic checks, then the steady job's next tick."""
    if scan:
        checks.scan_logs_for_hints(job, attempt, instances, backend, now, claimed=True)
    if stragglers:
        checks.check_stragglers(job, attempt, instances, backend, now, claimed=True)
    if snapshot is not None and schedule.steady(
        job, attempt, instances, snapshot.live_attempts, snapshot.pending_instance_restarts, backend
    ):
        plan.append(schedule.next_tick_at(job, attempt, instances, now, stretch))


def live_job_ids(shard: int | None = None, shards: int = 1, *, due_at: datetime | None = None) -> list[int]:
    """The jobs a sweep ticks: live ones, and those a person is stopping; given a
    shard, only the jobs whose id is that shard modulo `shards` (every job is in
    exactly one shard, and stays in it for life). Given `due_at`, a Running job
    whose next tick is scheduled after it is left out (monitoring.schedule)."""
    return [job_id for job_id, _ in due_jobs(shard, shards, due_at=due_at)]


def due_jobs(
    shard: int | None = None, shards: int = 1, *, due_at: datetime | None = None
) -> list[tuple[int, datetime | None]]:
    """live_job_ids with each job's scheduled check (None: not scheduled), which says how
    late the sweep is (core.pacing)."""
    jobs = Job.objects.filter(status__in=[*LIVE_JOB_STATUSES, JobStatus.STOPPING])
    if due_at is not None:
        jobs = jobs.exclude(status=JobStatus.RUNNING, monitor_next_check_at__gt=due_at)
    if shard is not None:
        jobs = jobs.annotate(shard=Mod("pk", Value(shards))).filter(shard=shard)
    return list(jobs.order_by("pk").values_list("pk", "monitor_next_check_at"))


def note_first_output(job: Job, attempt: Attempt, instances: list[Instance]) -> None:
    """The attempt's running_at is its first output of any instance (the goodput ledger)."""
    if attempt.running_at is None:
        outputs = [i.last_output_at for i in instances if i.last_output_at]
        if outputs:
            # The first output is stamped by the instance's node, whose clock may be behind the
            # console's: never before the attempt started (nor its stop), so stages stay in order.
            started = attempt.starting_at or attempt.preparing_at or attempt.queued_at
            first = clamp(min(outputs), started, attempt.stopping_at or attempt.ended_at)
            Attempt.objects.filter(pk=attempt.pk, running_at__isnull=True).update(running_at=first)
            attempt.running_at = first
