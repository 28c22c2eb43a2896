"""What people and the monitor do to jobs: submit, launch an attempt, stop,
reset a job's token, record events. The API, the pages, the SDK endpoints and
the monitor all call these; views and tasks stay thin."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from celery import shared_task
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from core.flags import flags_given, parse_flags
from core import isolation as isolation_core
from infra.bounded import call_bounded

from . import events, faults
from . import access
from .access import missing_backend_permission, may_run_on
from .backends import get_backend
from .backends.base import AttemptLaunch, BackendError, InstanceLaunch, LaunchInProgress
from .inputs import workspace_ref
from .models import (
    FINISHED_JOB_STATUSES,
    LIVE_ATTEMPT_STATUSES,
    WRITE_ROLES,
    Attempt,
    AttemptStatus,
    EventLevel,
    EventType,
    Instance,
    InstanceStatus,
    Job,
    JobEvent,
    JobStatus,
    Workspace,
    token_digest,
)
from .serializers import JobSubmitSerializer
from .submission import RoleSpec, instance_names

log = logging.getLogger(__name__)

# A launch that took the attempt but never stored a handle (its worker died) may
# be taken over after this long (settings.VIGIL_LAUNCH_LEASE_SECONDS).
LAUNCH_LEASE = timedelta(seconds=30)


def launch_lease() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "VIGIL_LAUNCH_LEASE_SECONDS", LAUNCH_LEASE.total_seconds())))


class NotFound(Exception):
    """The object does not exist for this caller (outside their workspaces)."""


class Forbidden(Exception):
    """The caller may see the object but not do this to it."""


# --- workspaces and roles -------------------------------------------------------


def workspace_for(user, ref) -> Workspace:
    """The workspace `ref` names if the user is a member; NotFound otherwise. `ref` is
    a Workspace, an id (an int or ASCII digits) or a slug (which starts with a
    letter); anything else is an InputError naming the workspace field."""
    qs = Workspace.objects.for_user(user)
    if isinstance(ref, Workspace):
        ws = qs.filter(pk=ref.pk).first()
    else:
        kind, value = workspace_ref(ref)
        ws = qs.filter(**{kind: value}).first()
    if ws is None:
        raise NotFound(f"workspace {ref!r} not found")
    return ws


def workspace_by_slug(user, slug: str) -> Workspace:
    """The workspace with this slug (never an id: page URLs carry slugs) if the
    user is a member; NotFound otherwise."""
    ws = Workspace.objects.for_user(user).filter(slug=slug).first() if isinstance(slug, str) else None
    if ws is None:
        raise NotFound(f"workspace {slug!r} not found")
    return ws


def require_role(user, workspace: Workspace, roles, action: str) -> str:
    role = workspace.role_of(user)
    if role is None:
        raise NotFound("workspace not found")
    if role not in roles:
        raise Forbidden(f"your role in {workspace.name} is {role}; {action} needs one of: {', '.join(roles)}.")
    return role


def require_job_action(user, job: Job, action: str) -> str:
    """The one check of every mutating action on an existing job (jobs.access.JOB_ACTIONS):
    NotFound for a person outside the job's workspace, Forbidden with who may for a
    member who may not. Returns the person's role."""
    role = job.workspace.role_of(user)
    if role is None:
        raise NotFound(f"job {job.pk} not found")
    refusal = access.job_action_refusal(role, user.pk, job, action)
    if refusal:
        raise Forbidden(refusal)
    return role


def jobs_for(user):
    return Job.objects.filter(workspace__memberships__user=user).distinct()


def job_for(user, job_id) -> Job:
    try:
        return jobs_for(user).select_related("workspace").get(pk=int(job_id))
    except (Job.DoesNotExist, ValueError, TypeError):
        raise NotFound(f"job {job_id!r} not found") from None


# --- events ---------------------------------------------------------------------


def record_event(
    job: Job | int,
    type: str,
    message: str,
    *,
    level: str = EventLevel.INFO,
    payload: dict | None = None,
    attempt: int | None = None,
    instance: str = "",
    key: str | None = None,
) -> JobEvent | None:
    """Write one event row; with a key, a second call for the same decision writes
    nothing and returns None. After commit the event is announced to the
    subscribers of jobs.events (live pages, event rules)."""
    job_id = job.pk if isinstance(job, Job) else job
    try:
        with transaction.atomic():
            event = JobEvent.objects.create(
                job_id=job_id,
                type=type,
                level=level,
                message=message,
                payload=payload or {},
                attempt=attempt,
                instance=instance,
                idempotency_key=key,
            )
    except IntegrityError:
        if key is None:
            raise
        return None
    events.announce_on_commit(event.pk)
    if type in DECISION_LOG_TYPES:
        transaction.on_commit(lambda: _log_decision(event))
    return event


# What `make run` shows by default: one line per decision a person wants to know about.
DECISION_LOG_TYPES = frozenset(
    {EventType.RESTART, EventType.JOB_FAILED, EventType.HANG, EventType.EXIT_HANG, EventType.NODE_ISOLATED}
)
decisions = logging.getLogger("vigil.decisions")


def _log_decision(event: JobEvent) -> None:
    level = logging.WARNING if event.level in (EventLevel.WARNING, EventLevel.ERROR) else logging.INFO
    where = f" attempt {event.attempt}" if event.attempt else ""
    decisions.log(
        level,
        "job %s%s %s: %s",
        event.job_id,
        where,
        event.type,
        event.message,
        extra={"job_id": event.job_id, "event": event.type, "attempt": event.attempt},
    )


# --- submit ---------------------------------------------------------------------


def submit_job(user, data: dict) -> tuple[Job, str]:
    """Validate a CreateJob body (jobs.serializers.JobSubmitSerializer: the API, the
    form and scripts alike) and store the job with its first attempt, then enqueue
    the launch. Returns the job and its plain SDK token (shown once). Refusals:
    NotFound for a workspace not among the caller's, Forbidden for a role or a
    backend they lack, serializers.ValidationError naming every bad field; nothing
    is stored then."""
    serializer = JobSubmitSerializer(data=data)
    # The workspace first: another workspace's is 404 whatever the body holds.
    ws_ref = data.get("workspace") if isinstance(data, dict) else None
    workspace = None
    if ws_ref not in (None, ""):
        workspace = workspace_for(user, ws_ref)
        require_role(user, workspace, WRITE_ROLES, "submitting a job")
    serializer.is_valid(raise_exception=True)
    assert workspace is not None  # the serializer refuses a body without one
    valid = serializer.valid_submission()
    if not may_run_on(user, valid.backend):
        raise Forbidden(missing_backend_permission(valid.backend))
    if valid.backend == "local":
        require_role(user, workspace, tuple(settings.VIGIL_LOCAL_SUBMIT_ROLES), "running jobs on the local backend")

    args, config = valid.error_monitoring_args, valid.ft_config
    if valid.fault_tolerance and workspace.warm_restart_default and "--enable-warm-restart" not in flags_given(args):
        # The workspace's default, written into the job's own flags so that the job page,
        # the API and a clone show what it runs with.
        args = f"{args} --enable-warm-restart=True".strip()
        config = parse_flags(args)
    with transaction.atomic():
        job = Job.objects.create(
            workspace=workspace,
            created_by=user if user.is_authenticated else None,
            display_name=valid.display_name,
            job_type=valid.job_type,
            job_specs=[r.to_dict() for r in valid.roles],
            user_command=valid.user_command,
            envs=valid.envs,
            image=valid.roles[0].image if valid.roles else "",
            workdir=valid.workdir,
            backend=valid.backend,
            fault_tolerance=valid.fault_tolerance,
            error_monitoring_args=args,
            ft_config=config.to_dict(),
            retryable_keywords=list(valid.retryable_keywords),
            current_attempt=1,
        )
        raw_token = job.reset_token()
        Attempt.objects.create(job=job, number=1)
        record_event(
            job,
            EventType.STATUS,
            f"Job submitted by {user.get_username()}: {valid.job_type} with "
            + ", ".join(f"{r.replicas} {r.role}" for r in valid.roles)
            + (f"; fault tolerance on ({config.to_flags() or 'defaults'})." if valid.fault_tolerance else "."),
            payload={"status": JobStatus.CREATING},
            attempt=1,
            key=f"submitted:{job.pk}",
        )
        launch: dict = {}
        transaction.on_commit(lambda: launch.update(queued=enqueue_launch(job.pk, 1)))
    # False when the task queue did not answer in time: the job is stored and the
    # sweep launches it once Redis answers again (None: not known yet, the caller's
    # own transaction has not committed).
    job.launch_queued = launch.get("queued")
    if job.launch_queued is False:
        Job.objects.filter(pk=job.pk, status=JobStatus.CREATING).update(reason=LAUNCH_DEFERRED)
        job.reason = LAUNCH_DEFERRED
    return job, raw_token


LAUNCH_DEFERRED = (
    "Stored; the task queue (Redis) did not answer, so the launch was not queued now. "
    "The monitor's sweep launches the job once Redis answers again."
)


def enqueue_launch(job_id: int, number: int) -> bool:
    """Queue the launch task; False if Redis did not take it within a second (the
    monitor's sweep re-enqueues an attempt left queued, so nothing is lost)."""
    if launch_attempt_task.app.conf.task_always_eager:  # tests: run here, now
        launch_attempt_task.delay(job_id, number)
        return True
    return call_bounded(
        lambda: launch_attempt_task.delay(job_id, number), f"enqueue launch of attempt {number} of job {job_id}"
    )


# --- launch ---------------------------------------------------------------------


def roles_of(job: Job) -> list[RoleSpec]:
    return [RoleSpec(s["type"], int(s.get("pod_count", 1)), s.get("image", ""), **_resources(s)) for s in job.job_specs]


def _resources(spec: dict) -> dict:
    res = spec.get("resource_config") or {}
    return {"cpu": float(res.get("cpu", 1)), "memory": str(res.get("memory", "") or ""), "gpu": int(res.get("gpu", 0))}


def sdk_env(job: Job, attempt: int) -> dict:
    env = {
        "VIGIL_CONSOLE_URL": settings.VIGIL_CONSOLE_URL,
        "VIGIL_JOB_ID": str(job.pk),
        "VIGIL_JOB_TOKEN": job.plain_token(),
        "VIGIL_ATTEMPT": str(attempt),
    }
    if job.fault_tolerance and job.ft.enable_c4d_hang_detection:
        env["VIGIL_C4D"] = "1"
    if job.fault_tolerance:
        # What the SDK's hang_detect restores when a scope ends (the flag's value).
        env["VIGIL_JOB_HANG_INTERVAL"] = str(job.ft.job_hang_interval)
    return env


def attempt_launch_spec(job: Job, attempt: Attempt, avoid_nodes=()) -> AttemptLaunch:
    env = dict(job.envs)
    env.update(sdk_env(job, attempt.number))
    instances = tuple(
        InstanceLaunch(name=name, role=role, index=index, rank=rank, command=job.user_command, env={})
        for name, role, index, rank in instance_names(roles_of(job))
    )
    return AttemptLaunch(
        job_id=str(job.pk),
        attempt=attempt.number,
        job_type=job.job_type,
        instances=instances,
        env=env,
        workdir=job.workdir or None,
        avoid_nodes=tuple(avoid_nodes),
        run_as=job.workspace.run_as,
        account=job.workspace.slurm_account,
        workspace=str(job.workspace_id),
        warm=bool(job.fault_tolerance and job.ft.enable_warm_restart),
        warm_modules=tuple(job.ft.warm_modules) if job.fault_tolerance else (),
        replica_groups=job.ft.replica_groups,
        lighthouse_heartbeat_timeout_ms=job.ft.lighthouse_heartbeat_timeout_ms,
    )


def get_backend_for(job: Job):
    return get_backend(job.backend)


def launch_attempt(job_id: int, number: int) -> bool:
    """Start attempt `number` of a job on its backend. Safe to call twice: only
    the caller that moves the attempt out of Queuing launches it."""
    now = timezone.now()
    attempt = Attempt.objects.select_related("job").filter(job_id=job_id, number=number).first()
    if attempt is None:
        return False
    job = attempt.job
    if job.stop_requested or job.status in FINISHED_JOB_STATUSES or job.current_attempt != number:
        Attempt.objects.filter(pk=attempt.pk, status=AttemptStatus.QUEUING).update(
            status=AttemptStatus.STOPPED, ended_at=now, reason="not launched: the job was stopped or moved on"
        )
        return False
    took = attempt.transition(AttemptStatus.QUEUING, AttemptStatus.STARTING, preparing_at=now)
    if not took:
        # A worker that took the attempt may have died before storing a handle.
        took = bool(
            Attempt.objects.filter(
                pk=attempt.pk, status=AttemptStatus.STARTING, backend_handle={}, preparing_at__lt=now - launch_lease()
            ).update(preparing_at=now)
        )
        if not took:
            return False
    faults.point("launch.after_db_claim")
    job.transition((JobStatus.CREATING, JobStatus.RESTARTING), JobStatus.QUEUING)
    backend = get_backend_for(job)
    avoid = nodes_to_avoid(job, backend)
    spec = attempt_launch_spec(job, attempt, avoid)
    # Starting begins when the launch does: stamped after launch() returned, an instance
    # that printed at once had its first output (running_at) before starting_at, and the
    # starting stage lasted a negative time (issue 15, defect 10).
    started = timezone.now()
    try:
        handle = backend.launch(spec)
    except LaunchInProgress:
        # A live process is launching this attempt (its lease ran out, it did not die):
        # it stores the handle; the attempt stays Starting, so a later takeover is
        # still possible if that process dies after all.
        return False
    except BackendError as exc:
        if exc.retryable:
            # The backend is briefly unable (Slurm down, a node busy): queue the
            # attempt again with the reason shown; the sweep relaunches it.
            # Queued again from now: the earlier preparing stamp goes, or queued would end before it began.
            Attempt.objects.filter(pk=attempt.pk).update(
                status=AttemptStatus.QUEUING,
                queued_at=timezone.now(),
                preparing_at=None,
                starting_at=None,
                reason=exc.message,
            )
            Job.objects.filter(pk=job.pk, status=JobStatus.QUEUING).update(
                reason=f"Waiting for the backend: {exc.message}"
            )
            record_event(
                job,
                EventType.DECISION,
                f"Attempt {number} could not start yet and will be retried: {exc.message}",
                level=EventLevel.WARNING,
                attempt=number,
                key=f"launch-retry:{job.pk}:{number}:{token_digest(exc.message)[:16]}",
            )
            return False
        Attempt.objects.filter(pk=attempt.pk).update(
            status=AttemptStatus.FAILED, ended_at=timezone.now(), reason=str(exc)
        )
        fail_job(
            job, f"The backend could not start attempt {number}: {exc.message}", key=f"launch-failed:{job.pk}:{number}"
        )
        return False
    faults.point("launch.after_launched")
    statuses = {s.name: s for s in _safe_poll(backend, handle)}
    with transaction.atomic():
        # The handle and the instance rows together: a worker dying in between would
        # leave an attempt whose ranks run but that no tick can see.
        stored = Attempt.objects.filter(
            pk=attempt.pk, status__in=[AttemptStatus.STARTING, AttemptStatus.QUEUING]
        ).update(
            status=AttemptStatus.STARTING,
            backend_handle=handle,
            starting_at=started,
            master_port=handle.get("master_port"),
        )
        if stored:
            Instance.objects.bulk_create(
                [
                    Instance(
                        attempt=attempt,
                        role=i.role,
                        index=i.index,
                        name=i.name,
                        rank=i.rank,
                        node=getattr(statuses.get(i.name), "node", "") or "",
                        status=(
                            InstanceStatus.RUNNING
                            if i.name in statuses and statuses[i.name].state == "running"
                            else InstanceStatus.PENDING
                        ),
                        # Only what the backend says has started (a restart counts started instances).
                        started_at=_when(getattr(statuses.get(i.name), "started_at", None)),
                        start=getattr(statuses.get(i.name), "start", "") or "",
                        start_reason=(getattr(statuses.get(i.name), "start_reason", "") or "")[:256],
                    )
                    for i in spec.instances
                ],
                ignore_conflicts=True,
            )
    if not stored:
        # Stopped (or superseded) while we launched: nobody else knows these ranks.
        try:
            backend.stop(handle, grace=settings.VIGIL_RESTART_GRACE_SECONDS)
        except BackendError as exc:
            log.warning("stopping attempt %s of job %s launched after it ended failed: %s", number, job.pk, exc)
        return False
    faults.point("launch.after_handle_stored")
    placement_decision(job, number, handle)
    if any(s.state == "running" for s in statuses.values()):
        mark_running(job, attempt)
    return True


def placement_decision(job: Job, number: int, handle: dict) -> None:
    """Say where an attempt that avoids nodes goes: the remaining nodes, or, when the job
    needs the avoided ones too (a backend reports them as `waiting_for_nodes`), nowhere
    until they return or a replacement joins."""
    avoided, waiting = handle.get("avoided_nodes") or [], handle.get("waiting_for_nodes") or []
    if waiting:
        text = (
            f"Attempt {number} needs every node, {', '.join(waiting)} included: it waits for "
            f"{'that node' if len(waiting) == 1 else 'those nodes'} to return or for a replacement "
            "instead of running without."
        )
    elif avoided:
        text = f"Attempt {number} avoids node {', '.join(avoided)}: it runs on the remaining nodes."
    else:
        return
    record_event(
        job,
        EventType.DECISION,
        text,
        attempt=number,
        payload={"avoided_nodes": avoided, "waiting_for_nodes": waiting},
        key=f"placement:{job.pk}:{number}",
    )


def _when(epoch: float | None):
    return datetime.fromtimestamp(epoch, tz=dt_timezone.utc) if epoch is not None else None


def _safe_poll(backend, handle) -> list:
    try:
        return backend.poll(handle)
    except BackendError:
        return []


def nodes_to_avoid(job: Job, backend) -> list[str]:
    """Isolated nodes, and those this job's own C4D Errors named (core.isolation: a
    job's reports steer its own attempts, not other jobs')."""
    from .isolation import own_suspects

    try:
        nodes = backend.list_nodes()
    except BackendError:
        return []
    return isolation_core.nodes_to_avoid(
        [n.name for n in nodes if not n.schedulable], own_suspects(job), [n.name for n in nodes if n.schedulable]
    )


def wake_monitor(job_id: int) -> None:
    """Something the monitor must look at happened (an exit was announced, the first
    progress, a new hang interval): the sweep ticks the job at its next pass instead of
    at its scheduled check. The version bump fails the compare-and-set of a tick that
    read the job before this, so it cannot schedule past the event."""
    Job.objects.filter(pk=job_id).update(
        monitor_next_check_at=None, monitor_state_version=F("monitor_state_version") + 1
    )


def mark_running(job: Job, attempt: Attempt) -> None:
    Attempt.objects.filter(pk=attempt.pk, status=AttemptStatus.STARTING).update(status=AttemptStatus.RUNNING)
    first = not Job.objects.filter(pk=job.pk, started_at__isnull=False).exists()
    # A check scheduled for an earlier attempt means nothing for this one.
    fields = {"started_at": timezone.now(), "monitor_next_check_at": None} if first else {"monitor_next_check_at": None}
    if job.transition(
        (JobStatus.QUEUING, JobStatus.CREATING, JobStatus.RESTARTING), JobStatus.RUNNING, reason="", **fields
    ):
        record_event(
            job,
            EventType.STATUS,
            f"Attempt {attempt.number} is running.",
            payload={"status": JobStatus.RUNNING},
            attempt=attempt.number,
            key=f"running:{job.pk}:{attempt.number}",
        )


# --- finishing --------------------------------------------------------------------


def fail_job(job: Job, reason: str, *, key: str, payload: dict | None = None) -> bool:
    now = timezone.now()
    ok = job.transition(
        (JobStatus.CREATING, JobStatus.QUEUING, JobStatus.RUNNING, JobStatus.RESTARTING),
        JobStatus.FAILED,
        reason=reason,
        finished_at=now,
    )
    if ok:
        record_event(
            job,
            EventType.JOB_FAILED,
            reason,
            level=EventLevel.ERROR,
            payload=payload or {},
            attempt=job.current_attempt,
            key=key,
        )
    return ok


def succeed_job(job: Job, attempt: Attempt) -> bool:
    now = timezone.now()
    ok = job.transition(
        (JobStatus.QUEUING, JobStatus.RUNNING),
        JobStatus.SUCCEEDED,
        finished_at=now,
        reason=f"All instances of attempt {attempt.number} exited 0.",
    )
    if ok:
        Attempt.objects.filter(pk=attempt.pk).exclude(status__in=[AttemptStatus.SUCCEEDED]).update(
            status=AttemptStatus.SUCCEEDED, ended_at=now
        )
        record_event(
            job,
            EventType.STATUS,
            f"Job succeeded on attempt {attempt.number}.",
            payload={"status": JobStatus.SUCCEEDED},
            attempt=attempt.number,
            key=f"succeeded:{job.pk}",
        )
    return ok


# --- stop -----------------------------------------------------------------------


MAX_RETRYABLE_KEYWORDS = 100  # as many as the classifier reads for one job


def add_retryable_keyword(user, job: Job, keyword: str, scope: str) -> bool:
    """An owner/admin marks a log line as retryable for this job or its whole workspace.
    False when it was already there (idempotent). The keyword is matched literally."""
    require_job_action(user, job, access.RETRYABLE_KEYWORD)
    model, pk = (Job, job.pk) if scope == "job" else (Workspace, job.workspace_id)
    with transaction.atomic():
        row = model.objects.select_for_update().get(pk=pk)
        keywords = list(row.retryable_keywords or [])
        if keyword in keywords:
            return False
        if len(keywords) >= MAX_RETRYABLE_KEYWORDS:
            raise Forbidden(f"the {scope} already has {MAX_RETRYABLE_KEYWORDS} retryable keywords; remove one first.")
        model.objects.filter(pk=pk).update(retryable_keywords=keywords + [keyword])
        where = "this job" if scope == "job" else f"every job of {job.workspace.name}"
        record_event(
            job,
            EventType.DECISION,
            f'{user.get_username()} made "{keyword}" a retryable keyword for {where}.',
            payload={"retryable_keyword": keyword, "scope": scope},
        )
    return True


def stop_job(user, job: Job) -> bool:
    """A person's stop: wins over everything the monitor might decide."""
    require_job_action(user, job, access.STOP)
    ok = job.transition(
        (JobStatus.CREATING, JobStatus.QUEUING, JobStatus.RUNNING, JobStatus.RESTARTING),
        JobStatus.STOPPING,
        stop_requested=True,
        stopped_by=user,
        reason=f"Stopped by {user.get_username()}.",
    )
    if ok:
        record_event(
            job,
            EventType.STATUS,
            f"Stop requested by {user.get_username()}.",
            payload={"status": JobStatus.STOPPING},
            key=f"stop:{job.pk}",
        )
        transaction.on_commit(lambda: _enqueue_stop(job.pk))
    return ok


def _enqueue_stop(job_id: int) -> None:
    stop_job_task.delay(job_id)


def finish_stop(job_id: int) -> bool:
    """Tear down every live attempt of a stopping job, then mark it Stopped."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.status != JobStatus.STOPPING:
        return False
    backend = get_backend_for(job)
    for attempt in job.attempts.exclude(
        status__in=[AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.STOPPED]
    ):
        end_attempt(
            job,
            attempt,
            backend,
            final=AttemptStatus.STOPPED,
            grace=settings.VIGIL_STOP_GRACE_SECONDS,
            overwrite=(InstanceStatus.RUNNING, InstanceStatus.PENDING, InstanceStatus.LOST),
        )
    try:
        backend.discard_standby(str(job.pk))  # a stopped job restarts no more: its parked interpreters go
    except BackendError as exc:
        log.warning("discarding the standby of job %s failed: %s", job.pk, exc)
    ok = job.transition(JobStatus.STOPPING, JobStatus.STOPPED, finished_at=timezone.now())
    if ok:
        record_event(
            job, EventType.STATUS, "Job stopped.", payload={"status": JobStatus.STOPPED}, key=f"stopped:{job.pk}"
        )
    return ok


def end_attempt(
    job: Job,
    attempt: Attempt,
    backend,
    *,
    final: str,
    grace: float,
    reason: str | None = None,
    retry: bool = False,
    overwrite=(InstanceStatus.RUNNING, InstanceStatus.PENDING),
) -> bool:
    """Stop an attempt's instances, record how each really ended, then close the attempt.

    The attempt is marked Stopping first, so that a launch still running elsewhere
    cannot store its handle any more (it stops what it started instead); an attempt
    without a handle may have been half-launched by a worker that died, which the
    backend cleans up. Instance rows are synced from the backend after the stop, so
    a rank that exited on its own keeps its exit code and time; only rows the
    backend could not account for are overwritten as Stopped. With `retry`, a
    retryable failure to stop leaves the attempt live (False) for the next sweep."""
    now = timezone.now()
    Attempt.objects.filter(
        pk=attempt.pk, status__in=[AttemptStatus.QUEUING, AttemptStatus.STARTING, AttemptStatus.RUNNING]
    ).update(status=AttemptStatus.STOPPING)
    Attempt.objects.filter(pk=attempt.pk, stopping_at__isnull=True).update(stopping_at=now)
    handle = Attempt.objects.filter(pk=attempt.pk).values_list("backend_handle", flat=True).first() or {}
    try:
        if handle:
            backend.stop(handle, grace=grace)
        else:
            backend.abandon_launch(str(job.pk), attempt.number)
    except BackendError as exc:
        log.warning("stopping attempt %s of job %s failed: %s", attempt.number, job.pk, exc)
        if retry and exc.retryable:
            return False
    if handle:
        sync_instances(attempt, _safe_poll(backend, handle))
    fields = {"status": final, "ended_at": timezone.now()}
    if reason is not None:
        fields["reason"] = reason
    Attempt.objects.filter(pk=attempt.pk, status__in=LIVE_ATTEMPT_STATUSES).update(**fields)
    attempt.instances.filter(status__in=list(overwrite)).update(status=InstanceStatus.STOPPED, exited_at=timezone.now())
    return True


_STATE_TO_STATUS = {
    "pending": InstanceStatus.PENDING,
    "running": InstanceStatus.RUNNING,
    "succeeded": InstanceStatus.SUCCEEDED,
    "failed": InstanceStatus.FAILED,
    "stopped": InstanceStatus.STOPPED,
    "lost": InstanceStatus.LOST,
}


def sync_instances(attempt: Attempt, statuses, rows: list[Instance] | None = None) -> list[Instance]:
    """Make the Instance rows say what the backend says; write only what changed."""
    by_name = {i.name: i for i in (attempt.instances.all() if rows is None else rows)}
    changed = []
    fields = (
        "status",
        "node",
        "exit_code",
        "signal",
        "backend_reason",
        "start",
        "start_reason",
        "started_at",
        "exited_at",
        "last_output_at",
    )
    for s in statuses:
        row = by_name.get(s.name)
        if row is None:
            continue
        new = {
            "status": _STATE_TO_STATUS[str(s.state)],
            "node": s.node or row.node,
            "exit_code": s.exit_code,
            "signal": s.signal,
            "backend_reason": (s.reason or "")[:256],
            "start": s.start or row.start,
            "start_reason": (s.start_reason or row.start_reason)[:256],
            "started_at": _when(s.started_at) or row.started_at,
            "exited_at": _when(s.exited_at),
            "last_output_at": _when(s.last_output_at),
        }
        if any(getattr(row, k) != v for k, v in new.items()):
            for k, v in new.items():
                setattr(row, k, v)
            changed.append(row)
    if changed:
        Instance.objects.bulk_update(changed, fields)
    return list(by_name.values())


# --- tokens -----------------------------------------------------------------------


def reset_job_token(user, job: Job) -> str:
    require_job_action(user, job, access.RESET_TOKEN)
    raw = job.reset_token()
    record_event(job, EventType.STATUS, f"SDK token reset by {user.get_username()}; the old token no longer works.")
    return raw


# --- runtime configuration ----------------------------------------------------------


def set_hang_interval(job: Job, value: int | None, *, source: str) -> None:
    """The runtime override of --job-hang-interval (API now, SDK reset_config/hang_detect):
    a value jobs.serializers.HangInterval accepted."""
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(hang_interval_override=value, hang_interval_set_at=now)
    wake_monitor(job.pk)  # the hang deadline moved
    job.hang_interval_override = value
    job.hang_interval_set_at = now
    if value is None:
        text = f"Hang interval restored to the job's setting by {source}."
    elif value == -1:
        text = f"Hang detection suspended by {source}."
    else:
        text = f"Hang interval set to {value} s by {source}."
    record_event(
        job,
        EventType.DECISION,
        text,
        payload={"job_hang_interval": value, "source": source},
        attempt=job.current_attempt,
    )


# --- the Celery tasks that run these off the request ------------------------------
# Defined beside what they run, so that queueing one needs no import of jobs.tasks
# (the module Celery's autodiscovery reads, which re-exports them by these names).


@shared_task(name="jobs.tasks.launch_attempt", acks_late=True)
def launch_attempt_task(job_id: int, number: int) -> bool:
    return launch_attempt(job_id, number)


@shared_task(name="jobs.tasks.stop_job", acks_late=True)
def stop_job_task(job_id: int) -> bool:
    return finish_stop(job_id)
