"""One monitor tick over one job: read the backend's view of the current attempt,
run the pure checks (classification, decision rules, hang, exit hang), apply
what they decide. Every step is small and idempotent:

- instance rows follow the backend (`sync_instances`);
- a failed instance is handled once: a compare-and-set on its `handled_exit_key`
  lets only one worker act on one exit;
- a whole-job restart moves `current_attempt` from n to n+1 with a compare-and-set,
  in the same transaction as its RestartRecord, its events and the new Attempt
  row; a second worker, a re-delivered task or a late exit announcement finds
  n+1 already there and does nothing;
- launching the new attempt and stopping the old one happen after commit and are
  repeated by the sweep until done (`recover`), so a worker killed between the
  decision and the launch leaves exactly one new attempt behind.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from console import metrics
from jobs import actions, faults
from jobs.actions import sync_instances
from jobs.backends.base import BackendError
from jobs.models import (
    FINISHED_JOB_STATUSES,
    LIVE_ATTEMPT_STATUSES,
    Attempt,
    AttemptStatus,
    EventLevel,
    EventType,
    Instance,
    InstanceStatus,
    Job,
    JobStatus,
    NodeFault,
    RestartKind,
    RestartRecord,
    RestartResult,
)
from monitoring import diagnose
from core.classify import (
    Classification,
    ErrorSource,
    FailureInput,
    FailureObservation,
    classify_failure,
    pick_root_cause,
)
from core.flags import ExecutionMode, FaultToleranceConfig
from core.policy import Action, DetectedProblem, InstanceFailure, JobHistory, PreviousFailure, decide

log = logging.getLogger(__name__)

TAIL_BYTES = 64 * 1024
# A failure that looks like a peer's symptom waits this long for the real cause
# to show up before it is decided on (SPEC 9: root cause first).
CASCADE_SETTLE_SECONDS = 1.0
# An attempt queued this long without being taken by a launch task is re-enqueued
# (settings.VIGIL_RELAUNCH_AFTER_SECONDS).
RELAUNCH_AFTER = timedelta(seconds=10)


def relaunch_after() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "VIGIL_RELAUNCH_AFTER_SECONDS", RELAUNCH_AFTER.total_seconds())))
# How often the slower checks (watchdog hints in logs) run per job.
LOG_SCAN_EVERY = timedelta(seconds=30)
# Lines that show training progress without the SDK: "step=12", "Step 12", "iteration 5", "epoch 3".
PROGRESS_RE = re.compile(rb"(?i)\b(?:step|iter(?:ation)?|epoch)\b\s*[=:#]?\s*\d+")



@dataclass
class TickResult:
    job_id: int
    action: str = "none"
    reason: str = ""
    notes: list[str] = field(default_factory=list)


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def config_of(job: Job) -> FaultToleranceConfig:
    return FaultToleranceConfig.from_dict(job.ft_config or {})


# --- the tick ------------------------------------------------------------------------


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

    @property
    def current(self) -> Attempt | None:
        return next((a for a in self.live_attempts if a.number == self.job.current_attempt), None)

    def needs_recovery(self, now: datetime) -> bool:
        """recover() has work only for a queued attempt nobody took or an older attempt still live."""
        relaunch, lease = relaunch_after(), actions.launch_lease()
        if any(t < now - lease for t in self.pending_instance_restarts):
            return True
        return any(a.number < self.job.current_attempt
                   or (a.number == self.job.current_attempt and a.status == AttemptStatus.QUEUING
                       and a.queued_at < now - relaunch)
                   or (a.number == self.job.current_attempt and a.status == AttemptStatus.STARTING
                       and not a.backend_handle and a.preparing_at is not None
                       and a.preparing_at < now - lease)
                   for a in self.live_attempts)


SNAPSHOT_CHUNK = 200  # jobs read per bulk query in a sweep


def load_snapshots(job_ids: list[int]) -> dict[int, JobSnapshot]:
    """Four queries for any number of jobs (the caller chunks the ids)."""
    snaps = {j.pk: JobSnapshot(j) for j in Job.objects.filter(pk__in=job_ids).select_related("workspace")}
    for a in Attempt.objects.filter(job_id__in=job_ids, status__in=LIVE_ATTEMPT_STATUSES):
        snap = snaps.get(a.job_id)
        if snap is not None:
            a.job = snap.job
            snap.live_attempts.append(a)
    current = {s.current.pk: s for s in snaps.values() if s.current is not None}
    for i in Instance.objects.filter(attempt_id__in=list(current)):
        current[i.attempt_id].instances.append(i)
    for job_id, at in RestartRecord.objects.filter(job_id__in=job_ids, kind=RestartKind.INSTANCE,
                                                   result=RestartResult.PENDING).values_list("job_id", "restart_time"):
        if job_id in snaps:
            snaps[job_id].pending_instance_restarts.append(at)
    return snaps


def run_job(job_id: int, now: datetime | None = None, *, snapshot: JobSnapshot | None = None) -> TickResult:
    """One tick over one job. Safe to run concurrently and repeatedly."""
    now = now or timezone.now()
    result = TickResult(job_id)
    job = snapshot.job if snapshot is not None else Job.objects.filter(pk=job_id).select_related("workspace").first()
    if job is None or job.status in FINISHED_JOB_STATUSES:
        if job is not None:
            stop_orphaned_attempts(job)
        return result
    if job.status == JobStatus.STOPPING:
        actions.finish_stop(job.pk)
        result.action = "stopped"
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
            actions.fail_job(job, f"The backend lost attempt {attempt.number}: {exc.message}",
                             key=f"poll-failed:{job.pk}:{attempt.number}")
        return result
    instances = sync_instances(attempt, statuses, snapshot.instances if snapshot is not None else None)
    note_first_output(job, attempt, instances)
    if job.status in (JobStatus.QUEUING, JobStatus.RESTARTING, JobStatus.CREATING) and any(
        i.status == InstanceStatus.RUNNING for i in instances
    ):
        actions.mark_running(job, attempt)
        job.refresh_from_db()
    complete_pending_restart(job, attempt, instances)

    if all(i.status == InstanceStatus.SUCCEEDED for i in instances) and instances:
        actions.succeed_job(job, attempt)
        result.action = "succeeded"
        return result

    failed = [i for i in instances if i.status in (InstanceStatus.FAILED, InstanceStatus.LOST) and not i.handled_exit_key]
    if failed:
        handled = handle_failures(job, attempt, instances, failed, backend, now)
        if handled:
            result.action, result.reason = handled
            return result

    if job.status != JobStatus.RUNNING:
        return result
    if job.fault_tolerance:
        config = config_of(job)  # parsed once per tick
        problem = (check_problems(job, config, attempt, instances, now)
                   or check_c4d(job, config, attempt, instances, now))
        if problem:
            result.action, result.reason = problem
            return result
        scan_logs_for_hints(job, attempt, instances, backend, now)
    diagnose.check_stragglers(job, attempt, instances, backend, now)
    return result


def live_job_ids() -> list[int]:
    return list(
        Job.objects.filter(status__in=[JobStatus.CREATING, JobStatus.QUEUING, JobStatus.RUNNING,
                                       JobStatus.RESTARTING, JobStatus.STOPPING]).values_list("pk", flat=True)
    )


def sweep(now: datetime | None = None) -> int:
    """Tick every live job once, in this process."""
    ids = live_job_ids()
    for start in range(0, len(ids), SNAPSHOT_CHUNK):
        chunk = ids[start:start + SNAPSHOT_CHUNK]
        snaps = load_snapshots(chunk)
        for job_id in chunk:
            try:
                run_job(job_id, now, snapshot=snaps.get(job_id))
            except Exception:  # noqa: BLE001 - one broken job must not stop the others
                log.exception("monitor tick of job %s failed", job_id)
    return len(ids)


# --- small steps ---------------------------------------------------------------------


def note_first_output(job: Job, attempt: Attempt, instances: list[Instance]) -> None:
    if attempt.running_at is None:
        outputs = [i.last_output_at for i in instances if i.last_output_at]
        if outputs:
            first = min(outputs)
            Attempt.objects.filter(pk=attempt.pk, running_at__isnull=True).update(running_at=first)
            attempt.running_at = first


def complete_pending_restart(job: Job, attempt: Attempt, instances: list[Instance]) -> None:
    """A whole-job restart has worked once every instance of the new attempt has
    started (a short attempt may already have finished by the time we look). An
    instance the backend lost before it ever started does not count: the restart
    is then recorded as failed, and the lost instance is handled as a failure."""
    if attempt.number < 2 or not instances or any(i.status == InstanceStatus.PENDING for i in instances):
        return
    now = timezone.now()
    never = [i.name for i in instances if not really_started(i)]
    started = [i.started_at for i in instances if i.started_at]
    for record in RestartRecord.objects.filter(job=job, new_attempt=attempt.number, result=RestartResult.PENDING):
        done_at = max(started) if len(started) == len(instances) else now
        took = max(0.0, (min(done_at, now) - record.restart_time).total_seconds())
        result = RestartResult.FAILED if never else RestartResult.SUCCEEDED
        if RestartRecord.objects.filter(pk=record.pk, result=RestartResult.PENDING).update(
            result=result, completed_at=now, duration_seconds=took,
        ):
            if never:
                text = (f"Restart {record.number} failed: {len(never)} of {len(instances)} instances of attempt "
                        f"{attempt.number} never started ({', '.join(never)}).")
            else:
                metrics.restart_completed("job", took)
                text = (f"Restart {record.number} succeeded: all {len(instances)} instances of attempt "
                        f"{attempt.number} started {took:.1f} s after the decision.")
            actions.record_event(job, EventType.DECISION, text, attempt=attempt.number,
                                 level=EventLevel.WARNING if never else EventLevel.INFO,
                                 key=f"restart-done:{record.pk}")


def really_started(inst: Instance) -> bool:
    """Did the backend ever start this instance? Lost or stopped ones count only with a start time."""
    if inst.status in (InstanceStatus.RUNNING, InstanceStatus.SUCCEEDED, InstanceStatus.FAILED):
        return True
    return inst.status != InstanceStatus.PENDING and inst.started_at is not None


def recover(job: Job, now: datetime) -> None:
    """Finish what a dead worker left half-done: launch a queued attempt nobody
    took, and stop attempts older than the current one that still run."""
    current = Attempt.objects.filter(job=job, number=job.current_attempt)
    stuck = (
        current.filter(status=AttemptStatus.QUEUING, queued_at__lt=now - relaunch_after()).first()
        # A launch whose worker died inside backend.launch: take it over after the lease.
        or current.filter(status=AttemptStatus.STARTING, backend_handle={},
                          preparing_at__lt=now - actions.launch_lease()).first()
    )
    if stuck is not None:
        actions.enqueue_launch(job.pk, stuck.number)
    for record in RestartRecord.objects.filter(job=job, kind=RestartKind.INSTANCE, attempt=job.current_attempt,
                                               result=RestartResult.PENDING,
                                               restart_time__lt=now - actions.launch_lease()):
        attempt = Attempt.objects.filter(job=job, number=record.attempt, status__in=LIVE_ATTEMPT_STATUSES).first()
        if attempt is not None and attempt.backend_handle:
            complete_instance_restart(job, attempt, record)  # its worker died half-way
    stop_orphaned_attempts(job, below=job.current_attempt)


def stop_orphaned_attempts(job: Job, below: int | None = None) -> None:
    qs = Attempt.objects.filter(job=job, status__in=LIVE_ATTEMPT_STATUSES)
    if below is not None:
        qs = qs.filter(number__lt=below)
    elif job.status not in FINISHED_JOB_STATUSES:
        return
    for old in qs:
        stop_attempt(job, old, reason="superseded" if below else f"job {job.status.lower()}")


def stop_attempt(job: Job, attempt: Attempt, *, reason: str, grace: float | None = None) -> None:
    final = AttemptStatus.FAILED if reason != "succeeded" else AttemptStatus.SUCCEEDED
    # A retryable failure to stop leaves the attempt live: the next sweep tries again.
    actions.end_attempt(job, attempt, actions.get_backend_for(job), final=final, reason=attempt.reason or reason,
                        grace=settings.VIGIL_RESTART_GRACE_SECONDS if grace is None else grace, retry=True)


# --- failures ------------------------------------------------------------------------


def keywords_of(job: Job) -> tuple[str, ...]:
    """The job's own retryable keywords, the SDK's, then its workspace's (at most 100)."""
    seen: list[str] = []
    workspace = list(job.workspace.retryable_keywords or []) if job.workspace_id else []
    for k in list(job.retryable_keywords or []) + list(job.sdk_retryable_keywords or []) + workspace:
        if k and k not in seen:
            seen.append(k)
    return tuple(seen[:100])


def classify_instance(job: Job, attempt: Attempt, inst: Instance, backend) -> tuple[Classification, int | None]:
    """Classify one failed instance from its exit and log tail; also returns the
    byte offset of the line the classifier used, when it can tell."""
    try:
        tail = backend.tail_log(attempt.backend_handle, inst.name, TAIL_BYTES)
    except BackendError:
        tail = b""
    exit_code = inst.exit_code
    if exit_code == 0 and inst.signal is None:
        exit_code = None  # a LOST instance with no exit code
    c = classify_failure(
        FailureInput(exit_code=exit_code, signal=inst.signal, log_tail=tail,
                     backend_reason=inst.backend_reason or ("lost" if inst.status == InstanceStatus.LOST else ""),
                     user_keywords=keywords_of(job))
    )
    return c, _line_offset(backend, attempt, inst, tail, c)


def _line_offset(backend, attempt, inst, tail: bytes, c: Classification) -> int | None:
    """Where in the log the line the message quotes starts (for 'jump to error')."""
    try:
        path = backend.log_path(attempt.backend_handle, inst.name)
        import os

        size = os.path.getsize(path) if path else None
    except (BackendError, OSError):
        size = None
    if size is None or not tail:
        return None
    quote = c.message.split(": ", 1)[-1].strip().rstrip("…")[:80].encode()
    if not quote:
        return None
    pos = tail.rfind(quote)
    if pos < 0:
        return None
    line_start = tail.rfind(b"\n", 0, pos) + 1
    return size - len(tail) + line_start


def previous_failure_of(job: Job, attempt: Attempt, instances: list[Instance], backend) -> PreviousFailure | None:
    """The root cause of the whole-job restart that started this attempt, for the
    repeated-failure guard; None when this attempt was not started by a failure."""
    last = (RestartRecord.objects.filter(job=job, root_cause=True).exclude(rule="")
            .order_by("-restart_time", "-pk").first())
    if last is None or last.kind != RestartKind.JOB or last.new_attempt != attempt.number:
        return None
    role_index = last.instance_name.rsplit("-", 1)
    if len(role_index) != 2 or not role_index[1].isdigit():
        return None
    inst = next((i for i in instances if i.name == last.instance_name), None)
    step_now = Job.objects.filter(pk=job.pk).values_list("last_progress_step", flat=True).first()
    return PreviousFailure(
        rule=last.rule, role=inst.role if inst else role_index[0].capitalize(), index=int(role_index[1]),
        step=last.progress_step, step_now=step_now,
        progress_since=attempt_made_progress(job, attempt, instances, backend),
    )


def history_of(job: Job, attempt: Attempt, instances: list[Instance], backend=None) -> JobHistory:
    counts: dict[tuple[str, str, int], int] = {}
    for rule, name in RestartRecord.objects.filter(job=job, root_cause=True).values_list("rule", "instance_name"):
        role_index = name.rsplit("-", 1)
        if len(role_index) == 2 and role_index[1].isdigit():
            inst = next((i for i in instances if i.name == name), None)
            role = inst.role if inst else role_index[0].capitalize()
            key = (rule, role, int(role_index[1]))
            counts[key] = counts.get(key, 0) + 1
    workers = [i for i in instances if i.role == "Worker"]
    failed_workers = [i for i in workers if i.status in (InstanceStatus.FAILED, InstanceStatus.LOST)]
    return JobHistory(
        stopped_by_user=bool(job.stop_requested),
        job_restarts_so_far=RestartRecord.objects.filter(job=job, kind=RestartKind.JOB).count(),
        same_error_counts=counts,
        failed_worker_instances_now=len(failed_workers),
        total_worker_instances=len(workers),
        consecutive_restarts_without_progress=restarts_without_progress(job),
        previous_failure=previous_failure_of(job, attempt, instances, backend) if backend is not None else None,
    )


def restarts_without_progress(job: Job) -> int:
    """Whole-job restarts in a row (most recent first) whose attempt made no progress."""
    count = 0
    for made_progress in (
        Attempt.objects.filter(job=job, number__lt=job.current_attempt).order_by("-number").values_list("made_progress", flat=True)
    ):
        if made_progress:
            break
        count += 1
    return min(count, RestartRecord.objects.filter(job=job, kind=RestartKind.JOB).count())


def attempt_made_progress(job: Job, attempt: Attempt, instances: list[Instance], backend) -> bool:
    if attempt.first_progress_at is not None:
        return True
    for inst in instances:
        try:
            tail = backend.tail_log(attempt.backend_handle, inst.name, TAIL_BYTES)
        except BackendError:
            continue
        if PROGRESS_RE.search(tail):
            return True
    return False


def handle_failures(job, attempt, instances, failed, backend, now) -> tuple[str, str] | None:
    """Classify the failed instances, pick the root cause, decide, apply."""
    # Keywords the SDK set moments before the crash must count: read them afresh.
    job.retryable_keywords, job.sdk_retryable_keywords, job.workspace.retryable_keywords = (
        Job.objects.filter(pk=job.pk).values_list(
            "retryable_keywords", "sdk_retryable_keywords", "workspace__retryable_keywords").get())
    observations = []
    offsets = {}
    for inst in failed:
        c, offset = classify_instance(job, attempt, inst, backend)
        offsets[inst.name] = offset
        observations.append(
            FailureObservation(instance=inst.name, role=inst.role, index=inst.index,
                               exited_at=_epoch(inst.exited_at), classification=c)
        )
    root, cascades = pick_root_cause(observations)
    still_running = any(i.status == InstanceStatus.RUNNING for i in instances)
    if (root.classification.cascade_like and still_running and root.exited_at is not None
            and now.timestamp() < root.exited_at + CASCADE_SETTLE_SECONDS):
        return None  # the real cause may still be exiting; decide on a later tick
    root_inst = next(i for i in failed if i.name == root.instance)

    if not job.fault_tolerance:
        return fail_without_monitoring(job, attempt, root_inst, root.classification, cascades)

    config = config_of(job)
    decision = decide(
        config, history_of(job, attempt, instances, backend),
        InstanceFailure(instance=root_inst.name, role=root_inst.role, index=root_inst.index,
                        node=root_inst.node, classification=root.classification),
    )
    exit_key = f"{attempt.number}:{root_inst.name}:{root_inst.restarts}"
    if decision.action == Action.RESTART_INSTANCE:
        # Async: the other failed instances are handled on their own later ticks.
        if not restart_instance(job, attempt, root_inst, root.classification, decision, offsets.get(root_inst.name),
                                exit_key):
            return None
        metrics.failure_decided(root.classification, root_inst.exited_at, decision.action)
        return "restart_instance", decision.reason
    # Only one worker acts on one exit.
    if not Instance.objects.filter(pk=root_inst.pk, handled_exit_key="").update(handled_exit_key=exit_key):
        return None
    metrics.failure_decided(root.classification, root_inst.exited_at, decision.action)
    # Sync (or a fail): the other failures of this attempt are cascades of the root.
    for o in cascades:
        if Instance.objects.filter(attempt=attempt, name=o.instance, handled_exit_key="").update(
                handled_exit_key=f"cascade-of:{exit_key}"):
            metrics.instance_failed(o.classification)
    count_node_fault(job, root_inst, root.classification)
    cascade_info = [{"instance": o.instance, "error_code": o.classification.error_code,
                     "message": o.classification.message} for o in cascades]
    if decision.action == Action.RESTART_JOB:
        restart_job(job, attempt, instances, backend, decision.reason, ErrorSource(root.classification.source),
                    root_inst=root_inst, classification=root.classification, cascades=cascade_info,
                    log_offset=offsets.get(root_inst.name))
        return "restart_job", decision.reason
    if decision.action == Action.FAIL_JOB:
        fail_and_stop(job, attempt, decision.reason, key=f"failed:{job.pk}:{exit_key}",
                      payload={"rule": root.classification.rule, "error_code": root.classification.error_code,
                               "error_source": str(root.classification.source),
                               "instance": root_inst.name, "step": decision.step, "cascades": cascade_info,
                               "log_offset": offsets.get(root_inst.name),
                               "family": root.classification.family, "evidence": root.classification.evidence,
                               "cause": root.classification.cause, "next_step": root.classification.next_step})
        return "fail_job", decision.reason
    actions.record_event(job, EventType.DECISION, decision.reason, attempt=attempt.number,
                         instance=root_inst.name, key=f"decision:{job.pk}:{exit_key}")
    return "nothing", decision.reason


def fail_without_monitoring(job, attempt, inst, c: Classification, cascades) -> tuple[str, str]:
    """Fault tolerance off: the first failure fails the job, with its cause."""
    if not Instance.objects.filter(pk=inst.pk, handled_exit_key="").update(handled_exit_key=f"nofault:{attempt.number}"):
        return "none", ""
    metrics.failure_decided(c, inst.exited_at, "fail_job")
    what = f"exit code {inst.exit_code}" if inst.signal is None else f"signal {inst.signal}"
    # The catalog's next step assumes the monitor is on; say what applies instead.
    advice = ("Turn on automatic fault tolerance to have failures like this one retried."
              if c.retryable else c.next_step)
    reason = (f"{inst.name} failed ({what}): {c.message}. {c.cause} "
              f"Automatic fault tolerance is off for this job, so it was not restarted. {advice}")
    fail_and_stop(job, attempt, reason, key=f"failed:{job.pk}:{attempt.number}",
                  payload={"rule": c.rule, "error_code": c.error_code, "instance": inst.name,
                           "error_source": str(c.source), "family": c.family, "evidence": c.evidence,
                           "cascades": [o.instance for o in cascades]})
    return "fail_job", reason


def fail_and_stop(job: Job, attempt: Attempt, reason: str, *, key: str, payload: dict) -> None:
    if actions.fail_job(job, reason, key=key, payload=payload):
        Attempt.objects.filter(pk=attempt.pk).update(reason=reason[:2000])
        attempt.reason = reason
        stop_attempt(job, attempt, reason="failed")


def count_node_fault(job: Job, inst: Instance, c: Classification) -> None:
    if inst.node:
        NodeFault.objects.create(node=inst.node, backend=job.backend, job=job, error_code=c.error_code,
                                 retryable=c.retryable)


def _progress_step(job: Job) -> int | None:
    """The step the SDK last reported, read afresh (it moves while the tick runs)."""
    return Job.objects.filter(pk=job.pk).values_list("last_progress_step", flat=True).first()


def restart_instance(job, attempt, inst, c: Classification, decision, log_offset, exit_key: str) -> bool:
    """Async: restart one instance within its attempt. The exit is taken (only one worker
    acts on one exit) and the restart recorded in one transaction, so a worker dying
    right after leaves a pending record that recover() completes, never an exit that
    nobody restarts. False if another worker took this exit first."""
    number = RestartRecord.objects.filter(job=job, kind=RestartKind.INSTANCE).count() + 1
    with transaction.atomic():
        if not Instance.objects.filter(pk=inst.pk, handled_exit_key="").update(handled_exit_key=exit_key):
            return False
        record = RestartRecord.objects.create(
            job=job, number=number, kind=RestartKind.INSTANCE, attempt=attempt.number, new_attempt=attempt.number,
            node_name=inst.node, instance_name=inst.name, error_code=c.error_code, error_message=c.message,
            error_source=c.source, rule=c.rule, reason=decision.reason, cause=c.cause, next_step=c.next_step,
            family=c.family, evidence=c.evidence, progress_step=_progress_step(job),
            log_offset=log_offset, idempotency_key=f"instance:{job.pk}:{attempt.number}:{inst.name}:{inst.restarts}",
        )
        actions.record_event(job, EventType.RESTART, decision.reason, level=EventLevel.WARNING, attempt=attempt.number,
                             instance=inst.name, key=f"restart:{record.idempotency_key}",
                             payload={"kind": "instance", "rule": c.rule, "error_code": c.error_code, "record": record.pk})
    metrics.restart_decided("instance", metrics.cause_of(c, c.source))
    faults.point("restart.instance_after_record")
    complete_instance_restart(job, attempt, record)
    return True


def complete_instance_restart(job: Job, attempt: Attempt, record: RestartRecord) -> None:
    """Start the recorded instance's next run unless the backend already did (a worker
    died after asking it), then record the restart once. Run by the deciding worker, or
    by recover() for a record left pending past the launch lease."""
    backend = actions.get_backend_for(job)
    started = time.monotonic()
    name = record.instance_name
    handle = attempt.backend_handle
    status = next((s for s in actions._safe_poll(backend, handle) if s.name == name), None)
    # Already restarted: its new run is live, or ended after the decision.
    done = status is not None and (not status.state.finished
                                   or (status.exited_at or 0) > record.restart_time.timestamp())
    if not done:
        try:
            handle = backend.restart_instance(handle, name)
        except BackendError as exc:
            if RestartRecord.objects.filter(pk=record.pk, result=RestartResult.PENDING).update(
                    result=RestartResult.FAILED, completed_at=timezone.now()):
                fail_and_stop(job, attempt, f"Could not restart {name}: {exc.message}",
                              key=f"instance-restart-failed:{record.pk}", payload={"instance": name})
            return
        faults.point("restart.instance_after_backend")
    took = time.monotonic() - started
    with transaction.atomic():
        if not RestartRecord.objects.filter(pk=record.pk, result=RestartResult.PENDING).update(
                result=RestartResult.SUCCEEDED, completed_at=timezone.now(), duration_seconds=took):
            return  # completed by another worker
        Attempt.objects.filter(pk=attempt.pk).update(backend_handle=handle)
        Instance.objects.filter(attempt=attempt, name=name).update(
            status=InstanceStatus.RUNNING, exit_code=None, signal=None, exited_at=None, backend_reason="",
            restarts=F("restarts") + 1, handled_exit_key="", started_at=timezone.now(),
        )
        Job.objects.filter(pk=job.pk).update(restart_count=F("restart_count") + 1)
    metrics.restart_completed("instance", took)


def restart_job(job, attempt, instances, backend, reason: str, source: ErrorSource, *, root_inst=None,
                classification: Classification | None = None, cascades=(), log_offset=None,
                message: str = "") -> bool:
    """Whole-job restart: attempt n -> n+1, exactly once."""
    n = attempt.number
    now = timezone.now()
    progress = attempt_made_progress(job, attempt, instances, backend)
    c = classification
    with transaction.atomic():
        moved = Job.objects.filter(
            pk=job.pk, current_attempt=n, status__in=[JobStatus.RUNNING, JobStatus.QUEUING], stop_requested=False
        ).update(status=JobStatus.RESTARTING, current_attempt=n + 1, restart_count=job.restart_count + 1,
                 reason=reason, updated_at=now)
        if not moved:
            return False
        number = RestartRecord.objects.filter(job=job, kind=RestartKind.JOB).count() + 1
        RestartRecord.objects.create(
            job=job, number=number, kind=RestartKind.JOB, attempt=n, new_attempt=n + 1, restart_time=now,
            node_name=root_inst.node if root_inst else "", instance_name=root_inst.name if root_inst else "",
            error_code=c.error_code if c else source.upper(), error_message=c.message if c else message or reason,
            error_source=source, rule=c.rule if c else source.lower(), reason=reason,
            cause=c.cause if c else "", next_step=c.next_step if c else "", cascades=list(cascades),
            family=c.family if c else "", evidence=c.evidence if c else "", progress_step=_progress_step(job),
            log_offset=log_offset, idempotency_key=f"job:{job.pk}:{n}",
        )
        Attempt.objects.filter(pk=attempt.pk).update(made_progress=progress, reason=reason[:2000])
        Attempt.objects.create(job=job, number=n + 1, detected_failure_at=now)
        actions.record_event(job, EventType.RESTART, reason, level=EventLevel.WARNING, attempt=n,
                             instance=root_inst.name if root_inst else "", key=f"restart:job:{job.pk}:{n}",
                             payload={"kind": "job", "new_attempt": n + 1, "source": str(source),
                                      "rule": c.rule if c else "", "error_code": c.error_code if c else "",
                                      "cascades": list(cascades), "progress": progress})
    metrics.restart_decided("job", metrics.cause_of(c, source))
    job.current_attempt = n + 1
    job.status = JobStatus.RESTARTING
    faults.point("restart.after_decision")
    # Tear down the old attempt, then start the new one at once (not via the
    # queue: every second here is lost training); the sweep repeats either if
    # this worker dies in between.
    stop_attempt(job, attempt, reason="restarted")
    faults.point("restart.after_stop")
    actions.launch_attempt(job.pk, n + 1)
    return True


# --- hangs ---------------------------------------------------------------------------


def check_problems(job: Job, config: FaultToleranceConfig, attempt: Attempt, instances: list[Instance],
                   now: datetime) -> tuple[str, str] | None:
    """Hang and exit hang (Sync jobs with the detections on)."""
    from core import hang

    if config.job_execution_mode != ExecutionMode.SYNC:
        return None
    activity = [hang.InstanceActivity(
        name=i.name,
        running=i.status == InstanceStatus.RUNNING,
        last_output_at=_epoch(i.last_output_at),
        exit_code=i.exit_code,
        exited_at=_epoch(i.exited_at),
    ) for i in instances]
    started = _epoch(attempt.starting_at) or _epoch(attempt.queued_at) or now.timestamp()
    # Until the start-up interval is wired in here (issue 14), every attempt counts as
    # having made progress, so the hang interval applies from the start as before.
    verdict = hang.check_hang(config, job.hang_interval_override, activity, started, now.timestamp(),
                              first_progress_at=started, override_set_at=_epoch(job.hang_interval_set_at))
    if verdict is not None:
        return on_problem(job, attempt, instances, ErrorSource.HANG, EventType.HANG, verdict.message, now)
    verdict = hang.check_exit_hang(config, activity, now.timestamp())
    if verdict is not None:
        return on_problem(job, attempt, instances, ErrorSource.EXIT_HANG, EventType.EXIT_HANG, verdict.message, now)
    return None


def on_problem(job, attempt, instances, source: ErrorSource, event_type: str, message: str, now) -> tuple[str, str]:
    key = f"{event_type}:{job.pk}:{attempt.number}:problem"
    event = actions.record_event(job, event_type, message, level=EventLevel.ERROR, attempt=attempt.number, key=key)
    if event is None:
        return "none", ""  # another worker is already handling this attempt's hang
    metrics.hang_detected(metrics.cause_of(None, source))
    if source == ErrorSource.HANG:
        diagnose_hang(job, attempt, instances)
    backend = actions.get_backend_for(job)
    decision = decide(config_of(job), history_of(job, attempt, instances), DetectedProblem(source, message))
    if decision.action == Action.RESTART_JOB:
        restart_job(job, attempt, instances, backend, decision.reason, source, message=message)
        return "restart_job", decision.reason
    if decision.action == Action.FAIL_JOB:
        fail_and_stop(job, attempt, decision.reason, key=f"failed:{job.pk}:{key}", payload={"source": str(source)})
        return "fail_job", decision.reason
    actions.record_event(job, EventType.DECISION, decision.reason, attempt=attempt.number, key=f"decision:{key}")
    return "nothing", decision.reason


def diagnose_hang(job, attempt, instances) -> None:
    """Stack snapshot (and C4D) before any restart, when the backend allows it."""
    try:
        diagnose.on_hang(job, attempt, instances)
    except Exception:  # noqa: BLE001 - a failed diagnosis must not block the restart
        log.exception("hang diagnosis of job %s failed", job.pk)


def check_c4d(job: Job, config: FaultToleranceConfig, attempt: Attempt, instances: list[Instance],
              now: datetime) -> tuple[str, str] | None:
    """Every C4D_CONN_BW_CHECK_PERIOD: classify ranks; an Error isolates the rank's
    node and restarts the job, Warnings and Info are only shown."""
    if not config.enable_c4d_hang_detection:
        return None
    state = job.monitor_state or {}
    if now.timestamp() - state.get("c4d_at", 0) < config.c4d_common_envs.conn_bw_check_period:
        return None
    state["c4d_at"] = now.timestamp()
    job.monitor_state = state
    result = diagnose.run_c4d(job, attempt, config, now)
    if not result.errors:
        return None
    isolated = [n for n in (diagnose.isolate_for(job, attempt, v) for v in result.errors) if n]
    message = " ".join(v.message for v in result.errors)
    if isolated:
        message += f" Isolated node(s): {', '.join(isolated)}."
    return on_problem(job, attempt, instances, ErrorSource.C4D, EventType.C4D, message, now)


def scan_logs_for_hints(job, attempt, instances, backend, now) -> None:
    """Every LOG_SCAN_EVERY: a watchdog timeout in a log suggests a hang interval."""
    from core import hang

    state = job.monitor_state or {}
    last = state.get("log_scan_at")
    if last and now.timestamp() - last < LOG_SCAN_EVERY.total_seconds():
        return
    state["log_scan_at"] = now.timestamp()
    for inst in instances:
        if state.get("watchdog_suggested"):
            break
        try:
            tail = backend.tail_log(attempt.backend_handle, inst.name, TAIL_BYTES)
        except BackendError:
            continue
        suggestion = hang.suggest_hang_interval(tail.decode("utf-8", "replace"))
        if suggestion is not None:
            state["watchdog_suggested"] = suggestion.interval
            actions.record_event(
                job, EventType.SUGGESTION, suggestion.message, attempt=attempt.number, instance=inst.name,
                payload={"suggested_hang_interval": suggestion.interval, "line": suggestion.line[:500],
                         "watchdog_timeout": suggestion.timeout_seconds},
                key=f"watchdog:{job.pk}",
            )
    Job.objects.filter(pk=job.pk).update(monitor_state=state)
    job.monitor_state = state


__all__ = ["run_job", "sweep", "TickResult", "restart_job"]
