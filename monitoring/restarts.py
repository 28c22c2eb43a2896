"""Restarts: decide on a failure or a detected problem (through core.policy),
perform the decision exactly once, and complete what a dead worker left half-done.

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
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.classify import Classification, ErrorSource, FailureObservation, pick_root_cause
from core.failpoint import FailurePoint
from core.policy import Action, Decision, DetectedProblem, InstanceFailure, decide
from core.replicas import GroupLayout
from core.stacks import hang_classification
from infra import metrics
from jobs import actions, faults, isolation
from jobs.backends.base import Backend, BackendError
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
from monitoring.failures import attempt_made_progress, classify_instance, context_of, epoch, history_of

log = logging.getLogger(__name__)

# A failure that looks like a peer's symptom waits this long for the real cause
# to show up before it is decided on (SPEC 9: root cause first).
CASCADE_SETTLE_SECONDS = 1.0
# An attempt queued this long without being taken by a launch task is re-enqueued
# (settings.VIGIL_RELAUNCH_AFTER_SECONDS).
RELAUNCH_AFTER = timedelta(seconds=10)


class TickAction(StrEnum):
    """What one tick did to its job (the run_job task's result)."""

    NONE = "none"
    SUCCEEDED = "succeeded"
    STOPPED = "stopped"
    RESTART_JOB = Action.RESTART_JOB.value
    RESTART_INSTANCE = Action.RESTART_INSTANCE.value
    RESTART_GROUP = Action.RESTART_GROUP.value
    FAIL_JOB = Action.FAIL_JOB.value
    NOTHING = Action.NOTHING.value  # a decision was made: do nothing (recorded as an event)


Outcome = tuple[TickAction, str]  # what was done, and the decision's reason


def relaunch_after() -> timedelta:
    """How long a queued attempt may wait for its launch task before the sweep re-enqueues it."""
    return timedelta(seconds=float(getattr(settings, "VIGIL_RELAUNCH_AFTER_SECONDS", RELAUNCH_AFTER.total_seconds())))


# --- completing what a dead worker left half-done -------------------------------------


def recover(job: Job, now: datetime) -> None:
    """Finish what a dead worker left half-done: launch a queued attempt nobody
    took, and stop attempts older than the current one that still run."""
    current = Attempt.objects.filter(job=job, number=job.current_attempt)
    stuck = (
        current.filter(status=AttemptStatus.QUEUING, queued_at__lt=now - relaunch_after()).first()
        # A launch whose worker died inside backend.launch: take it over after the lease.
        or current.filter(
            status=AttemptStatus.STARTING, backend_handle={}, preparing_at__lt=now - actions.launch_lease()
        ).first()
    )
    if stuck is not None:
        actions.enqueue_launch(job.pk, stuck.number)
    for record in RestartRecord.objects.filter(
        job=job,
        kind=RestartKind.INSTANCE,
        attempt=job.current_attempt,
        result=RestartResult.PENDING,
        restart_time__lt=now - actions.launch_lease(),
    ):
        attempt = Attempt.objects.filter(job=job, number=record.attempt, status__in=LIVE_ATTEMPT_STATUSES).first()
        if attempt is not None and attempt.backend_handle:
            complete_instance_restart(job, attempt, record)  # its worker died half-way
    stop_orphaned_attempts(job, below=job.current_attempt)


def stop_orphaned_attempts(job: Job, below: int | None = None) -> None:
    """Stop the attempts below `below` still live, or (without it) any live attempt of a finished job."""
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
    actions.end_attempt(
        job,
        attempt,
        actions.get_backend_for(job),
        final=final,
        reason=attempt.reason or reason,
        grace=settings.VIGIL_RESTART_GRACE_SECONDS if grace is None else grace,
        retry=True,
    )


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
            result=result,
            completed_at=now,
            duration_seconds=took,
        ):
            if never:
                text = (
                    f"Restart {record.number} failed: {len(never)} of {len(instances)} instances of attempt "
                    f"{attempt.number} never started ({', '.join(never)})."
                )
            else:
                metrics.restart_completed("job", took)
                text = (
                    f"Restart {record.number} succeeded: all {len(instances)} instances of attempt "
                    f"{attempt.number} started {took:.1f} s after the decision."
                )
            actions.record_event(
                job,
                EventType.DECISION,
                text,
                attempt=attempt.number,
                level=EventLevel.WARNING if never else EventLevel.INFO,
                key=f"restart-done:{record.pk}",
            )


def really_started(inst: Instance) -> bool:
    """Did the backend ever start this instance? Lost or stopped ones count only with a start time."""
    if inst.status in (InstanceStatus.RUNNING, InstanceStatus.SUCCEEDED, InstanceStatus.FAILED):
        return True
    return inst.status != InstanceStatus.PENDING and inst.started_at is not None


# --- deciding --------------------------------------------------------------------------


def handle_failures(
    job: Job, attempt: Attempt, instances: list[Instance], failed: list[Instance], backend: Backend, now: datetime
) -> Outcome | None:
    """Classify the failed instances, pick the root cause, decide, apply."""
    # Keywords the SDK set moments before the crash must count: read them afresh.
    job.retryable_keywords, job.sdk_retryable_keywords, job.workspace.retryable_keywords = (
        Job.objects.filter(pk=job.pk)
        .values_list("retryable_keywords", "sdk_retryable_keywords", "workspace__retryable_keywords")
        .get()
    )
    observations = []
    offsets = {}
    points = {}
    for inst in failed:
        c, offset, points[inst.name] = classify_instance(job, attempt, inst, backend, peers=instances)
        offsets[inst.name] = offset
        observations.append(
            FailureObservation(
                instance=inst.name, role=inst.role, index=inst.index, exited_at=epoch(inst.exited_at), classification=c
            )
        )
    root, cascades = pick_root_cause(observations)
    still_running = any(i.status == InstanceStatus.RUNNING for i in instances)
    if (
        root.classification.cascade_like
        and still_running
        and root.exited_at is not None
        and now.timestamp() < root.exited_at + CASCADE_SETTLE_SECONDS
    ):
        return None  # the real cause may still be exiting; decide on a later tick
    root_inst = next(i for i in failed if i.name == root.instance)

    if not job.fault_tolerance:
        return fail_without_monitoring(job, attempt, root_inst, root.classification, cascades)

    history = history_of(job, attempt, instances, backend)
    decision = decide(
        job.ft,
        history,
        InstanceFailure(
            instance=root_inst.name,
            role=root_inst.role,
            index=root_inst.index,
            node=root_inst.node,
            classification=root.classification,
            point=points[root_inst.name],
            context=context_of(job, attempt, root_inst, history.previous_failure_on(root_inst.role, root_inst.index)),
            **group_of_failure(job, instances, root_inst),
        ),
    )
    exit_key = f"{attempt.number}:{root_inst.name}:{root_inst.restarts}"
    if decision.action in (Action.RESTART_GROUP, Action.RESTART_INSTANCE):
        # A group's other failures are its own cascade: restarted with it, never decided apart.
        # Async: the other failed instances are handled on their own later ticks.
        alone = decision.action == Action.RESTART_INSTANCE
        if not restart_instance(
            job,
            attempt,
            root_inst,
            root.classification,
            decision,
            offsets.get(root_inst.name),
            exit_key,
            point=points[root_inst.name],
            group=() if alone else group_members(job, instances, root_inst),
        ):
            return None
        metrics.failure_decided(root.classification, root_inst.exited_at, decision.action)
        return (TickAction.RESTART_INSTANCE if alone else TickAction.RESTART_GROUP), decision.reason
    # Only one worker acts on one exit.
    if not Instance.objects.filter(pk=root_inst.pk, handled_exit_key="").update(handled_exit_key=exit_key):
        return None
    metrics.failure_decided(root.classification, root_inst.exited_at, decision.action)
    # Sync (or a fail): the other failures of this attempt are cascades of the root.
    for o in cascades:
        if Instance.objects.filter(attempt=attempt, name=o.instance, handled_exit_key="").update(
            handled_exit_key=f"cascade-of:{exit_key}"
        ):
            metrics.instance_failed(o.classification)
    count_node_fault(job, root_inst, root.classification)
    cascade_info = [
        {"instance": o.instance, "error_code": o.classification.error_code, "message": o.classification.message}
        for o in cascades
    ]
    if decision.action == Action.RESTART_JOB:
        restart_job(
            job,
            attempt,
            instances,
            backend,
            decision.reason,
            ErrorSource(root.classification.source),
            root_inst=root_inst,
            classification=root.classification,
            cascades=cascade_info,
            log_offset=offsets.get(root_inst.name),
            point=points[root_inst.name],
            kind=decision.kind,
        )
        return TickAction.RESTART_JOB, decision.reason
    if decision.action == Action.FAIL_JOB:
        fail_and_stop(
            job,
            attempt,
            decision.reason,
            key=f"failed:{job.pk}:{exit_key}",
            payload={
                "rule": root.classification.rule,
                "error_code": root.classification.error_code,
                "error_source": str(root.classification.source),
                "instance": root_inst.name,
                "step": decision.step,
                "cascades": cascade_info,
                "log_offset": offsets.get(root_inst.name),
                "family": root.classification.family,
                "evidence": root.classification.evidence,
                "failure_step": points[root_inst.name].step,
                "failure_epoch": points[root_inst.name].epoch,
                "failure_phase": str(points[root_inst.name].phase),
                "kind": decision.kind,
                "cause": root.classification.cause,
                "next_step": root.classification.next_step,
            },
        )
        return TickAction.FAIL_JOB, decision.reason
    actions.record_event(
        job,
        EventType.DECISION,
        decision.reason,
        attempt=attempt.number,
        instance=root_inst.name,
        key=f"decision:{job.pk}:{exit_key}",
    )
    return TickAction.NOTHING, decision.reason


def fail_without_monitoring(
    job: Job, attempt: Attempt, inst: Instance, c: Classification, cascades: Sequence[FailureObservation]
) -> Outcome:
    """Fault tolerance off: the first failure fails the job, with its cause."""
    if not Instance.objects.filter(pk=inst.pk, handled_exit_key="").update(
        handled_exit_key=f"nofault:{attempt.number}"
    ):
        return TickAction.NONE, ""
    metrics.failure_decided(c, inst.exited_at, Action.FAIL_JOB)
    what = f"exit code {inst.exit_code}" if inst.signal is None else f"signal {inst.signal}"
    # The catalog's next step assumes the monitor is on; say what applies instead.
    advice = "Turn on automatic fault tolerance to have failures like this one retried." if c.retryable else c.next_step
    reason = (
        f"{inst.name} failed ({what}): {c.message}. {c.cause} "
        f"Automatic fault tolerance is off for this job, so it was not restarted. {advice}"
    )
    fail_and_stop(
        job,
        attempt,
        reason,
        key=f"failed:{job.pk}:{attempt.number}",
        payload={
            "rule": c.rule,
            "error_code": c.error_code,
            "instance": inst.name,
            "error_source": str(c.source),
            "family": c.family,
            "evidence": c.evidence,
            "cascades": [o.instance for o in cascades],
        },
    )
    return TickAction.FAIL_JOB, reason


def on_problem(
    job: Job,
    attempt: Attempt,
    instances: list[Instance],
    source: ErrorSource,
    event_type: str,
    message: str,
    now: datetime,
) -> Outcome:
    """A hang, exit hang or C4D Error: record it once, diagnose a hang, decide, apply."""
    key = f"{event_type}:{job.pk}:{attempt.number}:problem"
    event = actions.record_event(job, event_type, message, level=EventLevel.ERROR, attempt=attempt.number, key=key)
    if event is None:
        return TickAction.NONE, ""  # another worker is already handling this attempt's hang
    metrics.hang_detected(metrics.cause_of(None, source))
    found = diagnose_hang(job, attempt, instances, message) if source == ErrorSource.HANG else None
    backend = actions.get_backend_for(job)
    decision = decide(job.ft, history_of(job, attempt, instances), DetectedProblem(source, message))
    if decision.action == Action.RESTART_JOB:
        # A hang's record names its first suspect, the cause, the next step and its last line.
        restart_job(
            job,
            attempt,
            instances,
            backend,
            decision.reason,
            source,
            message=message,
            classification=found.classification if found else None,
            root_inst=found.instance if found else None,
            log_offset=found.log_offset if found else None,
        )
        return TickAction.RESTART_JOB, decision.reason
    if decision.action == Action.FAIL_JOB:
        fail_and_stop(job, attempt, decision.reason, key=f"failed:{job.pk}:{key}", payload={"source": str(source)})
        return TickAction.FAIL_JOB, decision.reason
    actions.record_event(job, EventType.DECISION, decision.reason, attempt=attempt.number, key=f"decision:{key}")
    return TickAction.NOTHING, decision.reason


def diagnose_hang(
    job: Job, attempt: Attempt, instances: list[Instance], message: str = ""
) -> diagnose.HangFinding | None:
    """Stack snapshot (and C4D) before any restart, when the backend allows it. Without a
    suspect from the stacks, a rank on a node that no longer answers the cluster is the
    suspect: its peers only wait for it (a partition, a node dying)."""
    try:
        found = diagnose.on_hang(job, attempt, instances, message)
    except Exception:  # noqa: BLE001 - a failed diagnosis must not block the restart
        log.exception("hang diagnosis of job %s failed", job.pk)
        found = None
    if found is not None and found.instance is not None:
        return found
    lost = isolation.on_a_silent_node(job, instances)
    if lost is None:
        return found
    inst, why = lost
    actions.record_event(
        job,
        EventType.DECISION,
        f"The hang's suspect is {inst.name}: its node {inst.node} does not answer the cluster ({why}); "
        "the next attempt avoids it.",
        level=EventLevel.WARNING,
        attempt=attempt.number,
        instance=inst.name,
        payload={"node": inst.node, "why": why},
        key=f"hang-suspect-node:{job.pk}:{attempt.number}",
    )
    classification = found.classification if found else hang_classification(message, None, "")
    return diagnose.HangFinding(classification, inst, None)


def fail_and_stop(job: Job, attempt: Attempt, reason: str, *, key: str, payload: dict) -> None:
    """Fail the job (once) with this reason and stop its attempt."""
    if actions.fail_job(job, reason, key=key, payload=payload):
        Attempt.objects.filter(pk=attempt.pk).update(reason=reason[:2000])
        attempt.reason = reason
        stop_attempt(job, attempt, reason="failed")


def count_node_fault(job: Job, inst: Instance, c: Classification) -> None:
    """Count the fault against its node (node reputation)."""
    if inst.node:
        NodeFault.objects.create(
            node=inst.node, backend=job.backend, job=job, error_code=c.error_code, retryable=c.retryable
        )
        if c.retryable:
            # A record that now crosses the threshold drains the node before the next attempt
            # is placed, so that attempt already avoids it.
            isolation.on_node_fault(job, inst.node)


# --- replica groups (issue 30) -----------------------------------------------------------


def _layout(job: Job, instances: Sequence[Instance]) -> GroupLayout | None:
    groups = job.ft.replica_groups if job.fault_tolerance else 0
    if groups < 2 or not instances or len(instances) % groups:
        return None
    return GroupLayout(groups, len(instances))


def group_of_failure(job: Job, instances: Sequence[Instance], inst: Instance) -> dict:
    """InstanceFailure's group fields for a job with replica groups ({} without)."""
    layout = _layout(job, instances)
    if layout is None:
        return {}
    by_rank = {i.rank: i for i in instances}
    return {
        "group": layout.group_of(inst.rank),
        "counterparts": tuple((by_rank[r].role, by_rank[r].index) for r in layout.counterparts(inst.rank)),
    }


def group_members(job: Job, instances: Sequence[Instance], inst: Instance) -> list[str]:
    """The names of the instances in `inst`'s replica group, in rank order ([inst.name] without groups)."""
    layout = _layout(job, instances)
    if layout is None:
        return [inst.name]
    by_rank = {i.rank: i for i in instances}
    return [by_rank[r].name for r in layout.members(layout.group_of(inst.rank))]


# --- performing --------------------------------------------------------------------------


def _progress_step(job: Job) -> int | None:
    """The step the SDK last reported, read afresh (it moves while the tick runs)."""
    return Job.objects.filter(pk=job.pk).values_list("last_progress_step", flat=True).first()


def _point_fields(point: FailurePoint | None) -> dict:
    """A record's failure point (a hang's record has none)."""
    if point is None:
        return {}
    return {"failure_step": point.step, "failure_epoch": point.epoch, "failure_phase": str(point.phase)}


def restart_instance(
    job: Job,
    attempt: Attempt,
    inst: Instance,
    c: Classification,
    decision: Decision,
    log_offset: int | None,
    exit_key: str,
    point: FailurePoint | None = None,
    group: Sequence[str] = (),
) -> bool:
    """Async: restart one instance within its attempt. The exit is taken (only one worker
    acts on one exit) and the restart recorded in one transaction, so a worker dying
    right after leaves a pending record that recover() completes, never an exit that
    nobody restarts. False if another worker took this exit first. With replica groups,
    `group` is the failed instance's group: its other members' exits are taken in the same
    transaction and the whole group restarts (complete_instance_restart)."""
    number = RestartRecord.objects.filter(job=job, kind=RestartKind.INSTANCE).count() + 1
    with transaction.atomic():
        if not Instance.objects.filter(pk=inst.pk, handled_exit_key="").update(handled_exit_key=exit_key):
            return False
        Instance.objects.filter(attempt=attempt, name__in=[n for n in group if n != inst.name]).filter(
            handled_exit_key=""
        ).update(handled_exit_key=f"group-of:{exit_key}")
        record = RestartRecord.objects.create(
            job=job,
            number=number,
            kind=RestartKind.INSTANCE,
            attempt=attempt.number,
            new_attempt=attempt.number,
            node_name=inst.node,
            instance_name=inst.name,
            error_code=c.error_code,
            error_message=c.message,
            error_source=c.source,
            rule=c.rule,
            reason=decision.reason,
            cause=c.cause,
            next_step=c.next_step,
            family=c.family,
            evidence=c.evidence,
            progress_step=_progress_step(job),
            **_point_fields(point),
            verdict_kind=decision.kind,
            log_offset=log_offset,
            idempotency_key=f"instance:{job.pk}:{attempt.number}:{inst.name}:{inst.restarts}",
        )
        actions.record_event(
            job,
            EventType.RESTART,
            decision.reason,
            level=EventLevel.WARNING,
            attempt=attempt.number,
            instance=inst.name,
            key=f"restart:{record.idempotency_key}",
            payload={
                "kind": "instance",
                "rule": c.rule,
                "error_code": c.error_code,
                "record": record.pk,
                **({"group": list(group)} if len(group) > 1 or decision.action == Action.RESTART_GROUP else {}),
            },
        )
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
    instances = list(Instance.objects.filter(attempt=attempt))
    failed = next((i for i in instances if i.name == name), None)
    names = group_members(job, instances, failed) if failed is not None else [name]
    polled = {s.name: s for s in actions._safe_poll(backend, handle)}
    decided = record.restart_time.timestamp()

    def restarted(n: str) -> bool:
        # Its next run started after the decision (or, for the failed one, its run is live or
        # ended since): a worker that died half-way already asked the backend.
        status = polled.get(n)
        if status is None:
            return False
        if status.started_at is not None and status.started_at > decided:
            return True
        return n == name and (not status.state.finished or (status.exited_at or 0) > decided)

    todo = [n for n in names if not restarted(n)]
    if todo:
        try:
            for n in todo:
                handle = backend.restart_instance(handle, n)
        except BackendError as exc:
            if RestartRecord.objects.filter(pk=record.pk, result=RestartResult.PENDING).update(
                result=RestartResult.FAILED, completed_at=timezone.now()
            ):
                fail_and_stop(
                    job,
                    attempt,
                    f"Could not restart {name}: {exc.message}",
                    key=f"instance-restart-failed:{record.pk}",
                    payload={"instance": name},
                )
            return
        faults.point("restart.instance_after_backend")
    took = time.monotonic() - started
    with transaction.atomic():
        if not RestartRecord.objects.filter(pk=record.pk, result=RestartResult.PENDING).update(
            result=RestartResult.SUCCEEDED, completed_at=timezone.now(), duration_seconds=took
        ):
            return  # completed by another worker
        Attempt.objects.filter(pk=attempt.pk).update(backend_handle=handle)
        Instance.objects.filter(attempt=attempt, name__in=names).update(
            status=InstanceStatus.RUNNING,
            exit_code=None,
            signal=None,
            exited_at=None,
            backend_reason="",
            restarts=F("restarts") + 1,
            handled_exit_key="",
            started_at=timezone.now(),
        )
        Job.objects.filter(pk=job.pk).update(restart_count=F("restart_count") + 1)
    metrics.restart_completed("instance", took)


def restart_job(
    job: Job,
    attempt: Attempt,
    instances: list[Instance],
    backend: Backend,
    reason: str,
    source: ErrorSource,
    *,
    root_inst: Instance | None = None,
    classification: Classification | None = None,
    cascades: Sequence[dict] = (),
    log_offset: int | None = None,
    message: str = "",
    point: FailurePoint | None = None,
    kind: str = "",
) -> bool:
    """Whole-job restart: attempt n -> n+1, exactly once. The restart count goes up with
    F() like an instance restart's, so one finishing meanwhile is not overwritten."""
    n = attempt.number
    now = timezone.now()
    progress = attempt_made_progress(job, attempt, instances, backend)
    c = classification
    with transaction.atomic():
        moved = Job.objects.filter(
            pk=job.pk, current_attempt=n, status__in=[JobStatus.RUNNING, JobStatus.QUEUING], stop_requested=False
        ).update(
            status=JobStatus.RESTARTING,
            current_attempt=n + 1,
            restart_count=F("restart_count") + 1,
            reason=reason,
            updated_at=now,
        )
        if not moved:
            return False
        number = RestartRecord.objects.filter(job=job, kind=RestartKind.JOB).count() + 1
        RestartRecord.objects.create(
            job=job,
            number=number,
            kind=RestartKind.JOB,
            attempt=n,
            new_attempt=n + 1,
            restart_time=now,
            node_name=root_inst.node if root_inst else "",
            instance_name=root_inst.name if root_inst else "",
            error_code=c.error_code if c else source.upper(),
            error_message=c.message if c else message or reason,
            error_source=source,
            rule=c.rule if c else source.lower(),
            reason=reason,
            cause=c.cause if c else "",
            next_step=c.next_step if c else "",
            cascades=list(cascades),
            family=c.family if c else "",
            evidence=c.evidence if c else "",
            progress_step=_progress_step(job),
            **_point_fields(point),
            verdict_kind=kind,
            log_offset=log_offset,
            idempotency_key=f"job:{job.pk}:{n}",
        )
        Attempt.objects.filter(pk=attempt.pk).update(made_progress=progress, reason=reason[:2000])
        Attempt.objects.create(job=job, number=n + 1, detected_failure_at=now)
        actions.record_event(
            job,
            EventType.RESTART,
            reason,
            level=EventLevel.WARNING,
            attempt=n,
            instance=root_inst.name if root_inst else "",
            key=f"restart:job:{job.pk}:{n}",
            payload={
                "kind": "job",
                "new_attempt": n + 1,
                "source": str(source),
                "rule": c.rule if c else "",
                "error_code": c.error_code if c else "",
                "cascades": list(cascades),
                "progress": progress,
            },
        )
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
