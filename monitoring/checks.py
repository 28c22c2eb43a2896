"""The checks a tick runs over a running job besides its exits: hang and exit hang
(Sync jobs with the detections on), C4D, watchdog hints in the logs, and
stragglers. Periodic ones remember when they last ran in MonitorState; its
compare-and-set save is also the claim, so two workers never run the same
period's check twice. A problem found goes to restarts.on_problem."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from core import hang
from core.isolation import Action
from core.flags import C4DLogLevel, ExecutionMode, FaultToleranceConfig
from core.classify import ErrorSource
from core.failpoint import shows_progress
from core.stragglers import StragglerVerdict, find_stragglers
from jobs import actions
from jobs.backends.base import Backend, BackendError
from jobs.logs import InstanceLog
from jobs.models import (
    Attempt,
    DiagnosisKind,
    DiagnosisTrigger,
    EventLevel,
    EventType,
    Instance,
    InstanceStatus,
    Job,
)
from monitoring import diagnose
from monitoring.failures import TAIL_BYTES, epoch
from monitoring.restarts import Outcome, on_problem
from monitoring.state import MonitorState

# How often the slower checks (watchdog hints in logs) run per job.
LOG_SCAN_EVERY = timedelta(seconds=30)
STRAGGLER_EVERY = 30.0  # seconds between straggler checks of one job
STRAGGLER_TAIL = 64 * 1024


def check_problems(
    job: Job, config: FaultToleranceConfig, attempt: Attempt, instances: list[Instance], backend: Backend, now: datetime
) -> Outcome | None:
    """Hang and exit hang (Sync jobs with the detections on)."""
    if config.job_execution_mode != ExecutionMode.SYNC:
        return None
    activity = [
        hang.InstanceActivity(
            name=i.name,
            running=i.status == InstanceStatus.RUNNING,
            last_output_at=epoch(i.last_output_at),
            exit_code=i.exit_code,
            exited_at=epoch(i.exited_at),
        )
        for i in instances
    ]
    started = epoch(attempt.starting_at) or epoch(attempt.queued_at) or now.timestamp()
    progress = (
        first_progress_of(job, config, attempt, instances, backend, now)
        if hang.effective_hang_interval(config, job.hang_interval_override) is not None
        else None
    )
    watched = hang.WatchedAttempt(
        config,
        job.hang_interval_override,
        activity,
        started,
        first_progress_at=progress,
        override_set_at=epoch(job.hang_interval_set_at),
    )
    verdict = hang.check_hang(watched, now.timestamp())
    if verdict is not None:
        return on_problem(job, attempt, instances, ErrorSource.HANG, EventType.HANG, verdict.message, now)
    exit_verdict = hang.check_exit_hang(config, activity, now.timestamp())
    if exit_verdict is not None:
        return on_problem(
            job, attempt, instances, ErrorSource.EXIT_HANG, EventType.EXIT_HANG, exit_verdict.message, now
        )
    return None


def first_progress_of(
    job: Job, config: FaultToleranceConfig, attempt: Attempt, instances: list[Instance], backend: Backend, now: datetime
) -> float | None:
    """When the attempt first made progress (the end of its start-up interval), as the
    restart-loop breaker counts progress: the SDK's report_progress, a step line in a
    log, and with C4D on the first collective that finished (SDK or Flight Recorder). Found once and kept in
    Attempt.first_progress_at; until then only logs written since the last look are read."""
    if attempt.first_progress_at is not None:
        return attempt.first_progress_at.timestamp()
    found: datetime | None = None
    # The first collective that finished, from the SDK's reports or PyTorch's Flight
    # Recorder dumps: every rank took part, so every rank is past its start-up. (One
    # entered is not enough: the first rank up waits in DDP's first broadcast while the
    # others still import torch, silent, and that is start-up, not a stall.)
    if config.enable_c4d_hang_detection and diagnose.c4d_input(job, attempt).any_finished():
        found = now
    state = MonitorState.load(job)
    looked = state.progress_scan_at if state.progress_scan_attempt == attempt.number else None
    read_any = False
    for inst in instances if found is None else ():
        # A log's mtime not after the last look: everything in it was read then.
        if inst.last_output_at is None or (looked is not None and inst.last_output_at.timestamp() <= looked):
            continue
        try:
            tail = InstanceLog(backend, attempt.backend_handle, inst.name).tail(TAIL_BYTES)
        except BackendError:
            continue
        read_any = True
        if shows_progress(tail):
            found = min(inst.last_output_at, now)  # the line was written by its log's last write
            break
    if found is None:
        if read_any:
            state.progress_scan_at, state.progress_scan_attempt = now.timestamp(), attempt.number
            state.save(job)  # lost to another worker: the next tick reads those logs again
        return None
    Attempt.objects.filter(pk=attempt.pk, first_progress_at__isnull=True).update(first_progress_at=found)
    attempt.first_progress_at = found
    return found.timestamp()


def check_c4d(
    job: Job, config: FaultToleranceConfig, attempt: Attempt, instances: list[Instance], now: datetime
) -> Outcome | None:
    """Every C4D_CONN_BW_CHECK_PERIOD: classify ranks; an Error restarts the job and
    names the rank's node for isolation (core.isolation: isolated only when other
    submitters' jobs corroborate it, else proposed to staff); Warnings and Info are
    only shown."""
    if not config.enable_c4d_hang_detection:
        return None
    state = MonitorState.load(job)
    if now.timestamp() - state.c4d_at < config.c4d_common_envs.conn_bw_check_period:
        return None
    state.c4d_at = now.timestamp()
    result = diagnose.run_c4d(job, attempt, config, now, state=state)
    if result is None or not result.errors:
        return None
    outcomes = [o for o in (diagnose.isolate_for(job, attempt, v) for v in result.errors) if o]
    message = " ".join(v.message for v in result.errors)
    isolated = [o.node for o in outcomes if o.action == Action.ISOLATE]
    proposed = [o.node for o in outcomes if o.action == Action.PROPOSE]
    if isolated:
        message += f" Isolated node(s): {', '.join(isolated)}."
    if proposed:
        message += f" Proposed for isolation (staff decide): {', '.join(proposed)}."
    return on_problem(job, attempt, instances, ErrorSource.C4D, EventType.C4D, message, now)


@dataclass
class PeriodicClaim:
    """This period's due checks of one job, and the state whose save claims them."""

    job: Job
    state: MonitorState  # as loaded, with the claimed checks' times set to now
    scan: bool
    stragglers: bool


def periodic_due(
    job: Job, now: datetime, *, log_scan: bool, stragglers: bool = True, stretch: float = 1.0
) -> PeriodicClaim | None:
    """The log scan and straggler check due now (those asked for), or None; nothing
    written. `stretch` lengthens their periods while the job's shard is behind
    (core.pacing): they are diagnoses, not the hang deadline, so they give way."""
    state = MonitorState.load(job)
    ts = now.timestamp()
    scan = log_scan and not (state.log_scan_at and ts - state.log_scan_at < LOG_SCAN_EVERY.total_seconds() * stretch)
    stragglers = stragglers and ts - state.stragglers_at >= STRAGGLER_EVERY * stretch
    if not (scan or stragglers):
        return None
    if scan:
        state.log_scan_at = ts
    if stragglers:
        state.stragglers_at = ts
    return PeriodicClaim(job, state, scan, stragglers)


def claim_periodic(job: Job, now: datetime, *, log_scan: bool, stragglers: bool = True) -> tuple[bool, bool]:
    """Claim this period's log scan and straggler check (those asked for and due) in one
    compare-and-set save, so a tick that runs both writes once: (log scan claimed,
    stragglers claimed). Lost to another worker, neither is (it runs them this period).
    A sweep claims its chunk's in one statement instead (MonitorState.save_many)."""
    claim = periodic_due(job, now, log_scan=log_scan, stragglers=stragglers)
    if claim is None or not claim.state.save(job):
        return False, False
    return claim.scan, claim.stragglers


def scan_logs_for_hints(
    job: Job, attempt: Attempt, instances: list[Instance], backend: Backend, now: datetime, claimed: bool | None = None
) -> None:
    """Every LOG_SCAN_EVERY: a watchdog timeout in a log suggests a hang interval.
    `claimed` says whether claim_periodic claimed this period's scan; None: claim here."""
    if claimed is None:
        claimed = claim_periodic(job, now, log_scan=True, stragglers=False)[0]
    if not claimed:
        return  # not due, or another worker scans this period
    state = MonitorState.load(job)
    for inst in instances:
        if state.watchdog_suggested:
            break
        try:
            tail = InstanceLog(backend, attempt.backend_handle, inst.name).tail(TAIL_BYTES)
        except BackendError:
            continue
        suggestion = hang.suggest_hang_interval(tail.decode("utf-8", "replace"))
        if suggestion is not None:
            state.watchdog_suggested = suggestion.interval
            state.save(job)
            actions.record_event(
                job,
                EventType.SUGGESTION,
                suggestion.message,
                attempt=attempt.number,
                instance=inst.name,
                payload={
                    "suggested_hang_interval": suggestion.interval,
                    "line": suggestion.line[:500],
                    "watchdog_timeout": suggestion.timeout_seconds,
                },
                key=f"watchdog:{job.pk}",
            )


def check_stragglers(
    job: Job, attempt: Attempt, instances: list[Instance], backend: Backend, now: datetime, claimed: bool | None = None
) -> list[StragglerVerdict]:
    """Slow ranks from their log timestamps, no SDK needed; at most every STRAGGLER_EVERY s.
    `claimed` says whether claim_periodic claimed this period's check; None: claim here."""
    if claimed is None:
        claimed = claim_periodic(job, now, log_scan=False)[1]
    if not claimed:
        return []  # not due, or another worker checks this period
    logs: dict[Hashable, list[str]] = {}
    for inst in instances:
        if inst.status != InstanceStatus.RUNNING:
            continue
        try:
            tail = InstanceLog(backend, attempt.backend_handle, inst.name).tail(STRAGGLER_TAIL)
        except BackendError:
            continue
        logs[inst.name] = tail.decode("utf-8", "replace").splitlines()[1:]  # the first may be cut
    if len(logs) < 2:
        return []
    verdicts = find_stragglers(logs)
    if verdicts:
        summary = "\n".join(v.message for v in verdicts)
        with transaction.atomic():
            diagnosis = diagnose.record_diagnosis(
                job,
                attempt,
                DiagnosisKind.STRAGGLER,
                summary,
                {"verdicts": [v.to_dict() for v in verdicts]},
                DiagnosisTrigger.PERIODIC,
            )
            for v in verdicts:
                actions.record_event(
                    job,
                    EventType.STRAGGLER,
                    v.message,
                    level=EventLevel.WARNING if v.severity == C4DLogLevel.WARNING else EventLevel.INFO,
                    attempt=attempt.number,
                    instance=str(v.rank),
                    payload={"diagnosis": diagnosis.pk, **v.to_dict()},
                    key=f"straggler:{job.pk}:{attempt.number}:{v.rank}",
                )
    return verdicts
