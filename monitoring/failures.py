"""What the decision rules are told about a failure: each failed instance
classified from its exit and log tail (with the job's retryable keywords), and the
job's history (restarts so far, the same error again, progress since the last
restart). Reads only; the restarts module decides and acts on it."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from core.classify import Classification, FailureInput, classify_failure
from core.failcontext import FailureContext
from core.failpoint import FailurePoint, JobProgress, Phase, failure_point, job_progress, shows_progress
from core.reputation import WINDOW_SECONDS, NodeFaultSeen, standings
from core.logindex import quoted_line_offset
from core.policy import JobHistory, PreviousFailure
from jobs.backends.base import Backend, BackendError
from jobs.logs import InstanceLog
from jobs.models import Attempt, Instance, InstanceStatus, Job, NodeFault, RestartKind, RestartRecord

TAIL_BYTES = 64 * 1024
# Where a failed instance's own log names no step, the job's steps are read from its other
# instances' logs: this much of each, of this many (rank order).
PEER_TAIL_BYTES = 16 * 1024
PEERS_READ = 64
# What every backend writes into an instance's log when it restarts that instance alone
# (jobs.backends: local, memory and slurm's restart_instance), followed by its name.
RESTART_MARK = b"===== vigil: "
# Failures of other jobs on the same node this close to this one are one infrastructure event.
SAME_MINUTE = timedelta(seconds=60)


def epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def keywords_of(job: Job) -> tuple[str, ...]:
    """The job's own retryable keywords, the SDK's, then its workspace's (at most 100)."""
    seen: list[str] = []
    workspace = list(job.workspace.retryable_keywords or []) if job.workspace_id else []
    for k in list(job.retryable_keywords or []) + list(job.sdk_retryable_keywords or []) + workspace:
        if k and k not in seen:
            seen.append(k)
    return tuple(seen[:100])


def job_progress_of(attempt: Attempt, instances: list[Instance], backend: Backend) -> JobProgress:
    """How far the attempt trained by its instances' logs (core.failpoint.job_progress): the
    last step any of them logged. The first PEERS_READ instances in rank order (rank 0, which
    most jobs have print the steps, comes first), PEER_TAIL_BYTES of each."""
    tails = []
    for inst in sorted(instances, key=lambda i: (i.rank, i.name))[:PEERS_READ]:
        log = InstanceLog(backend, attempt.backend_handle, inst.name)
        try:
            tails.append(log.tail(PEER_TAIL_BYTES))
        except BackendError:
            continue
        finally:
            log.close()
    return job_progress(tails)


def classify_instance(
    job: Job, attempt: Attempt, inst: Instance, backend: Backend, peers: list[Instance] | None = None
) -> tuple[Classification, int | None, FailurePoint]:
    """Classify one failed instance from its exit and log tail; also returns the
    byte offset of the line the classifier used, when it can tell, and where it failed
    (the SDK's step when this attempt reported one, else the tail's last step line, else
    the last step line of the attempt's other instances, `peers`)."""
    log = InstanceLog(backend, attempt.backend_handle, inst.name)
    try:
        tail = log.tail(TAIL_BYTES)
    except BackendError:
        tail = b""
    exit_code = inst.exit_code
    if exit_code == 0 and inst.signal is None:
        exit_code = None  # a LOST instance with no exit code
    c = classify_failure(
        FailureInput(
            exit_code=exit_code,
            signal=inst.signal,
            log_tail=tail,
            backend_reason=inst.backend_reason or ("lost" if inst.status == InstanceStatus.LOST else ""),
            user_keywords=keywords_of(job),
        )
    )
    # Where in the log the line the message quotes starts (for 'jump to error'): only a
    # log whose size is known places its tail.
    size = log.size()
    sdk_step = None
    if attempt.first_progress_at is not None:  # the job's step is this attempt's only once it reported
        sdk_step = Job.objects.filter(pk=job.pk).values_list("last_progress_step", flat=True).first()
    point = point_with_peers(
        attempt, tail, c.evidence, backend, peers, sdk_step=sdk_step, sdk_progress=attempt.first_progress_at is not None
    )
    return c, (quoted_line_offset(tail, size, c.message) if size is not None else None), point


def point_with_peers(
    attempt: Attempt,
    tail: bytes,
    evidence: str,
    backend: Backend | None,
    peers: list[Instance] | None,
    sdk_step: int | None = None,
    sdk_progress: bool = False,
) -> FailurePoint:
    """Where an instance of the attempt failed (core.failpoint): the SDK's step, else its own
    log's last step line, else, when its log names no step (a DDP rank other than 0), the
    job's steps from the logs of the attempt's instances, `peers`."""
    point = failure_point(tail, evidence, sdk_step=sdk_step, sdk_progress=sdk_progress)
    if point.step is None and peers and backend is not None:
        job = job_progress_of(attempt, peers, backend)
        point = failure_point(tail, evidence, sdk_step=sdk_step, sdk_progress=sdk_progress, job=job)
    return point


def point_of(record: RestartRecord) -> FailurePoint | None:
    """The failure point a record kept; None for one written before points were."""
    if not record.failure_phase:
        return None
    return FailurePoint(
        step=record.failure_step,
        phase=Phase(record.failure_phase),
        evidence=record.evidence,
        epoch=record.failure_epoch,
    )


def previous_failure_of(
    job: Job, attempt: Attempt, instances: list[Instance], backend: Backend
) -> PreviousFailure | None:
    """The root cause of the whole-job restart that started this attempt, for the
    repeated-failure guard; None when this attempt was not started by a failure."""
    last = (
        RestartRecord.objects.filter(job=job, root_cause=True).exclude(rule="").order_by("-restart_time", "-pk").first()
    )
    if last is None or last.kind != RestartKind.JOB or last.new_attempt != attempt.number:
        return None
    role_index = last.instance_name.rsplit("-", 1)
    if len(role_index) != 2 or not role_index[1].isdigit():
        return None
    inst = next((i for i in instances if i.name == last.instance_name), None)
    step_now = Job.objects.filter(pk=job.pk).values_list("last_progress_step", flat=True).first()
    return PreviousFailure(
        rule=last.rule,
        role=inst.role if inst else role_index[0].capitalize(),
        index=int(role_index[1]),
        step=last.progress_step,
        step_now=step_now,
        progress_since=attempt_made_progress(job, attempt, instances, backend),
        point=point_of(last),
        node=last.node_name,
    )


def instance_failures_of(
    job: Job, attempt: Attempt, instances: list[Instance], backend: Backend
) -> tuple[PreviousFailure, ...]:
    """Async: for each instance restarted alone within this attempt, the failure that
    restarted it last and whether its run since made progress, for the repeated-failure guard."""
    latest: dict[str, RestartRecord] = {}
    for record in (
        RestartRecord.objects.filter(job=job, root_cause=True, kind=RestartKind.INSTANCE, attempt=attempt.number)
        .exclude(rule="")
        .order_by("restart_time", "pk")
    ):
        latest[record.instance_name] = record
    if not latest:
        return ()
    step_now = Job.objects.filter(pk=job.pk).values_list("last_progress_step", flat=True).first()
    failures = []
    for inst in instances:
        last = latest.get(inst.name)
        if last is not None:
            failures.append(
                PreviousFailure(
                    rule=last.rule,
                    role=inst.role,
                    index=inst.index,
                    step=last.progress_step,
                    step_now=step_now,
                    progress_since=run_made_progress(attempt, inst, backend),
                    point=point_of(last),
                    node=last.node_name,
                )
            )
    return tuple(failures)


def run_made_progress(attempt: Attempt, inst: Instance, backend: Backend) -> bool:
    """Did the instance's run since its last restart alone show a step/epoch line? A tail
    that no longer reaches the restart's mark (the run printed more than the tail holds),
    or one that cannot be read, counts as progress, so the guard only fires on evidence."""
    try:
        tail = InstanceLog(backend, attempt.backend_handle, inst.name).tail(TAIL_BYTES)
    except BackendError:
        return True
    mark = tail.rfind(RESTART_MARK + inst.name.encode() + b" restarted")
    return mark < 0 or shows_progress(tail[mark:])


def history_of(job: Job, attempt: Attempt, instances: list[Instance], backend: Backend | None = None) -> JobHistory:
    """What the decision rules need to know of the job's past (the previous failure only given a backend)."""
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
        instance_failures=instance_failures_of(job, attempt, instances, backend) if backend is not None else (),
    )


def restarts_without_progress(job: Job) -> int:
    """Whole-job restarts in a row (most recent first) whose attempt made no progress."""
    count = 0
    for made_progress in (
        Attempt.objects.filter(job=job, number__lt=job.current_attempt)
        .order_by("-number")
        .values_list("made_progress", flat=True)
    ):
        if made_progress:
            break
        count += 1
    return min(count, RestartRecord.objects.filter(job=job, kind=RestartKind.JOB).count())


def attempt_made_progress(job: Job, attempt: Attempt, instances: list[Instance], backend: Backend) -> bool:
    """Did the attempt train: the SDK reported progress, or a log shows it (core.failpoint.shows_progress)."""
    if attempt.first_progress_at is not None:
        return True
    for inst in instances:
        try:
            tail = InstanceLog(backend, attempt.backend_handle, inst.name).tail(TAIL_BYTES)
        except BackendError:
            continue
        if shows_progress(tail):
            return True
    return False


def context_of(job: Job, attempt: Attempt, inst: Instance, previous: PreviousFailure | None) -> FailureContext:
    """What the log tail lacks (core.failcontext): the attempt, the node now and last time,
    the node's record across jobs, and other jobs failing on it within the same minute."""
    if not inst.node:
        return FailureContext(attempt=attempt.number, previous_node=previous.node if previous else "")
    at = inst.exited_at or timezone.now()
    others = (
        Instance.objects.filter(
            node=inst.node,
            status__in=(InstanceStatus.FAILED, InstanceStatus.LOST),
            exited_at__gte=at - SAME_MINUTE,
            exited_at__lte=at + SAME_MINUTE,
        )
        .exclude(attempt__job_id=job.pk)
        .values("attempt__job_id")
        .distinct()
        .count()
    )
    since = timezone.now() - timedelta(seconds=WINDOW_SECONDS)
    seen = [
        NodeFaultSeen(inst.node, job_id, code, retryable, created.timestamp())
        for job_id, code, retryable, created in NodeFault.objects.filter(
            node=inst.node, created_at__gte=since
        ).values_list("job_id", "error_code", "retryable", "created_at")[:1000]
    ]
    standing = standings(seen, timezone.now().timestamp()).get(inst.node)
    return FailureContext(
        attempt=attempt.number,
        node=inst.node,
        previous_node=previous.node if previous else "",
        node_flagged=bool(standing and standing.proposed_for_isolation),
        node_record=standing.evidence if standing and standing.proposed_for_isolation else "",
        other_jobs_failing=others,
    )
