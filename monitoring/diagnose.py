"""The diagnosis shell: stack snapshots, C4D and stragglers for one job, stored
as Diagnosis rows, summarised in the monitor log and pushed to the job page.
The judgement is in the pure modules (stacks.find_culprits, c4d.analyze_
collectives, stragglers.find_stragglers); this module gathers their input from
the backend and the database and records what they say."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.c4d import C4DResult, C4DState, C4DVerdict, CollectiveRecord, hang_envs, with_stacks
from core.classify import Classification
from core.flags import C4DLogLevel, FaultToleranceConfig
from core.isolation import Action
from core.flight_recorder import (
    FLIGHT_RECORDER,
    SDK,
    RankTrace,
    Sources,
    choose_sources,
    judge_sources,
    read_trace,
)
from core.stacks import (
    DUMP_FAILED,
    NOT_PYTHON,
    ProcessStacks,
    StackSnapshot,
    dump_processes,
    find_python_processes,
    hang_classification,
    last_log_line,
    parse_py_spy_json,
    recorded_positions,
)
from jobs import actions, isolation
from jobs.backends.base import Backend, BackendError
from jobs.models import (
    Attempt,
    C4DReport,
    Diagnosis,
    DiagnosisKind,
    DiagnosisTrigger,
    EventLevel,
    EventType,
    Instance,
    InstanceStatus,
    Job,
)
from monitoring.publish import diagnosis_committed
from monitoring.state import MonitorState

log = logging.getLogger(__name__)

DUMP_TIMEOUT = 5.0
# How long a hang's diagnosis waits for the ranks' fresh Flight Recorder dumps: the hook
# answers within its flush period (1 s), plus the shared filesystem's delay on Slurm.
FRESH_DUMP_TIMEOUT = 3.0


def _now_ts(now: datetime | None) -> float:
    return (now or timezone.now()).timestamp()


def record_diagnosis(
    job: Job, attempt: Attempt, kind: str, summary: str, data: dict, trigger: DiagnosisTrigger
) -> Diagnosis:
    """Store a diagnosis; the job page gets it pushed after commit."""
    diagnosis = Diagnosis.objects.create(
        job=job, attempt=attempt.number, kind=kind, trigger=trigger, summary=summary, data=data
    )
    transaction.on_commit(lambda: _push(diagnosis.pk))
    return diagnosis


def _push(diagnosis_id: int) -> None:
    try:
        diagnosis_committed(diagnosis_id)
    except Exception:  # noqa: BLE001 - the page missing one push must not break a diagnosis
        log.exception("could not push diagnosis %s", diagnosis_id)


# --- stack snapshots ---------------------------------------------------------------------


def _dump_instance(backend: Backend, handle: dict, inst: Instance) -> list[ProcessStacks]:
    """Dumps of one instance's Python processes, by local PIDs or through the backend."""
    try:
        pids = backend.pids(handle, inst.name)
    except BackendError:
        pids = []
    if pids:
        python = find_python_processes(pids)
        if not python:
            return [
                ProcessStacks(
                    pid=pids[0],
                    instance=inst.name,
                    rank=inst.rank,
                    error_code=NOT_PYTHON,
                    error=f"no Python process runs under {inst.name} (pids {pids})",
                )
            ]
        return dump_processes([(inst.name, inst.rank, pid) for pid in python], timeout=DUMP_TIMEOUT)
    try:
        dumped = backend.dump_stacks(handle, inst.name)
    except BackendError as exc:
        return [ProcessStacks(pid=0, instance=inst.name, rank=inst.rank, error_code=DUMP_FAILED, error=exc.message)]
    out = []
    for proc in dumped:
        if proc.get("stacks") is None:
            out.append(
                ProcessStacks(
                    pid=int(proc.get("pid") or 0),
                    instance=inst.name,
                    rank=inst.rank,
                    error_code=DUMP_FAILED,
                    error=proc.get("error") or "no stacks",
                )
            )
        else:
            out.append(parse_py_spy_json(json.dumps(proc["stacks"]), int(proc["pid"]), inst.name, inst.rank))
    return out


def _open_collectives(records: dict[int, list[CollectiveRecord]]) -> dict[int, int]:
    """rank -> the sequence number of the collective it is inside, where C4D (the SDK's
    reports or PyTorch's Flight Recorder) has one."""
    out: dict[int, int] = {}
    for rank, recs in records.items():
        open_seqs = [r.seq for r in recs if r.exit is None]
        if open_seqs:
            out[rank] = max(open_seqs)
    return out


def snapshot_stacks(job: Job, attempt: Attempt, *, trigger: DiagnosisTrigger = DiagnosisTrigger.HANG) -> Diagnosis:
    """Dump every running instance's Python stacks, aggregate them, store and tell."""
    return _snapshot_stacks(job, attempt, trigger)[0]


def _snapshot_stacks(job: Job, attempt: Attempt, trigger: DiagnosisTrigger) -> tuple[Diagnosis, StackSnapshot | None]:
    """snapshot_stacks, and the snapshot itself (None when none could be taken). The
    culprits combine the stacks with what the ranks' collective records say they did."""
    backend = actions.get_backend_for(job)
    handle = attempt.backend_handle
    running = list(attempt.instances.filter(status=InstanceStatus.RUNNING).order_by("rank"))
    dumps: list[ProcessStacks] = []
    data: dict[str, Any]
    snapshot = None
    if not backend.can_dump_stacks:
        summary = f"Stack snapshot not possible: the {backend.name} backend cannot dump stacks."
        data = {"processes": [], "stacks": [], "error": summary}
    elif not running:
        summary = "Stack snapshot not possible: no instance of this attempt is running."
        data = {"processes": [], "stacks": [], "error": summary}
    else:
        for inst in running:
            dumps.extend(_dump_instance(backend, handle, inst))
        found = c4d_input(job, attempt)
        records = found.records
        snapshot = StackSnapshot.of(
            dumps,
            sequences=_open_collectives(records),
            recorded=recorded_positions(records),
            source={FLIGHT_RECORDER: "PyTorch's Flight Recorder", SDK: "the SDK's reports"}.get(
                found.sources.hangs or "", ""
            ),
        )
        summary = snapshot.summary_text()
        data = snapshot.to_dict()
    with transaction.atomic():
        diagnosis = record_diagnosis(job, attempt, DiagnosisKind.STACKS, summary, data, trigger)
        culprits = data.get("culprits") or {}
        suspects = culprits.get("suspects") or []
        headline = summary.splitlines()[0] if summary else "Stack snapshot taken."
        if suspects:
            headline += f" First suspect: {suspects[0]['why']}"
        elif culprits.get("why"):
            headline += f" {culprits['why']}"
        actions.record_event(
            job,
            EventType.STACK_ANALYSIS,
            headline,
            level=EventLevel.WARNING if suspects else EventLevel.INFO,
            attempt=attempt.number,
            payload={"diagnosis": diagnosis.pk, "trigger": trigger, "suspects": len(suspects)},
        )
    return diagnosis, snapshot


# --- C4D ---------------------------------------------------------------------------------


def c4d_records(job: Job, attempt: Attempt) -> dict[int, list[dict]]:
    return {r.rank: r.records for r in C4DReport.objects.filter(job=job, attempt=attempt.number)}


@dataclass(frozen=True)
class C4DInput:
    """What C4D judges: the SDK's reports (the job imported the SDK, or the start-up hook
    injected it) and PyTorch's Flight Recorder dumps, kept apart; core.flight_recorder's
    choose_sources says which answers which question."""

    sdk: dict[int, list[CollectiveRecord]]
    traces: dict[int, RankTrace]  # the Flight Recorder's, per rank

    @property
    def sources(self) -> Sources:
        return choose_sources(self.sdk, self.traces)

    @property
    def records(self) -> dict[int, list[CollectiveRecord]]:
        """The records hangs are judged from: who is inside which collective."""
        if self.sources.hangs == FLIGHT_RECORDER:
            return {rank: list(t.records) for rank, t in self.traces.items()}
        return self.sdk

    def any_finished(self) -> bool:
        """A collective finished, by either source: every rank took part in it."""
        return any(
            r.exit is not None
            for recs in (*self.sdk.values(), *(t.records for t in self.traces.values()))
            for r in recs
        )


def c4d_input(job: Job, attempt: Attempt) -> C4DInput:
    """The ranks' SDK reports and the Flight Recorder dumps the backend collected; a report
    or a dump that cannot be read is skipped."""
    parsed = {}
    for rank, recs in c4d_records(job, attempt).items():
        try:
            parsed[rank] = [CollectiveRecord.from_dict(r) for r in recs]
        except ValueError:
            continue
    try:
        dumps = actions.get_backend_for(job).flight_recorder_dumps(attempt.backend_handle or {})
    except (BackendError, OSError) as exc:
        log.warning("job %s: Flight Recorder dumps unavailable: %s", job.pk, exc)
        dumps = {}
    traces = {}
    for rank, data in dumps.items():
        try:
            traces[rank] = read_trace(data)
        except ValueError as exc:  # the job wrote it: skip it, judge the other ranks' dumps
            log.warning("job %s rank %s: Flight Recorder dump skipped: %s", job.pk, rank, exc)
    return C4DInput({rank: recs for rank, recs in parsed.items() if recs}, traces)


def run_c4d(
    job: Job,
    attempt: Attempt,
    config: FaultToleranceConfig,
    now: datetime | None = None,
    *,
    state: MonitorState | None = None,
    trigger: DiagnosisTrigger = DiagnosisTrigger.PERIODIC,
    silent_s: float | None = None,
    in_collective: dict[int, str] | None = None,
) -> C4DResult | None:
    """Classify ranks from their collective reports; record what the log level shows.
    Returns the C4DResult (its `errors` are for the monitor to act on), or None when
    another worker saved the job's monitor state first (it is running this check).
    The check a hang runs passes how long every rank has been silent (`silent_s`,
    core.c4d.hang_envs) and which ranks' stacks are inside a collective."""
    state = state if state is not None else MonitorState.load(job)
    c4d_state = C4DState.from_dict(state.c4d if state.c4d_attempt == attempt.number else None)
    instances = list(attempt.instances.all())
    found = c4d_input(job, attempt)
    envs = config.c4d_common_envs if silent_s is None else hang_envs(config.c4d_common_envs, silent_s)
    result, sources = judge_sources(found.sdk, found.traces, envs, _now_ts(now), c4d_state, world_size=len(instances))
    if in_collective:
        result = with_stacks(result, in_collective)
    state.c4d, state.c4d_attempt = result.state.to_dict(), attempt.number
    if not state.save(job):
        return None
    shown = result.shown(config.c4d_log_level)
    if shown:
        by_rank = {i.rank: i for i in instances}
        verdicts = [
            {
                **v.to_dict(),
                "instance": by_rank[v.rank].name if v.rank in by_rank else "",
                "node": by_rank[v.rank].node if v.rank in by_rank else "",
            }
            for v in shown
        ]
        summary = "\n".join(f"[{v.severity}] {v.kind}: {v.message}" for v in shown)
        with transaction.atomic():
            diagnosis = record_diagnosis(
                job,
                attempt,
                DiagnosisKind.C4D,
                summary,
                {
                    "verdicts": verdicts,
                    "source": "+".join(sorted({v["evidence"]["source"] for v in verdicts})),
                    "sources": {"hangs": sources.hangs, "slowness": sources.slowness},
                },
                trigger,
            )
            for v, d in zip(shown, verdicts):
                level = {C4DLogLevel.ERROR: EventLevel.ERROR, C4DLogLevel.WARNING: EventLevel.WARNING}.get(
                    v.severity, EventLevel.INFO
                )
                actions.record_event(
                    job,
                    EventType.C4D,
                    f"C4D {v.severity}: {v.kind} — {v.message}",
                    level=level,
                    attempt=attempt.number,
                    instance=d["instance"],
                    payload={"diagnosis": diagnosis.pk, **d},
                    key=f"c4d:{job.pk}:{attempt.number}:{v.rank}:{v.kind}:{v.severity}",
                )
    return result


def isolate_for(job: Job, attempt: Attempt, verdict: C4DVerdict) -> isolation.Outcome | None:
    """A C4D Error named a rank: its node is isolated, proposed for isolation or noted
    as core.isolation decides (jobs.isolation applies it). The verdict is built from
    what the job wrote, so on its own it never takes a shared node out of service."""
    if verdict.rank is None:
        return None
    inst = attempt.instances.filter(rank=verdict.rank).first()
    if inst is None or not inst.node:
        return None
    return isolation.on_c4d_error(job, attempt.number, inst.node, verdict.rank, str(verdict.kind))


# --- hooks the monitor calls ---------------------------------------------------------------


@dataclass(frozen=True)
class HangFinding:
    """What the hang's restart record says beyond the hang itself (SPEC 6)."""

    classification: Classification  # cause and next step from the snapshot; evidence: last log line
    instance: Instance | None  # the first suspect
    log_offset: int | None  # where its last log line starts
    verdicts: tuple[dict, ...] = ()  # C4D's, with instance and node


def _last_line(backend: Backend, handle: dict, inst: Instance) -> tuple[str, int | None]:
    try:
        tail = backend.tail_log(handle, inst.name, 8192)
        path = backend.log_path(handle, inst.name)
        size = os.path.getsize(path) if path else None
    except (BackendError, OSError):
        return "", None
    line, start = last_log_line(tail)
    return line, (size - len(tail) + start if size is not None and start >= 0 else None)


def ask_for_fresh_dumps(job: Job, attempt: Attempt) -> dict[str, list[int]]:
    """The ranks' Flight Recorder dumps taken now, where the backend can ask for them (on
    Slurm through the attempt's shared directory, from every node): the hang's stacks and
    C4D then judge the moment of the hang, not up to a flush period before it. Returns
    instance -> the ranks that answered; an instance that did not keeps its last dump."""
    try:
        found = actions.get_backend_for(job).request_flight_recorder_dumps(
            attempt.backend_handle or {}, FRESH_DUMP_TIMEOUT
        )
    except (BackendError, OSError) as exc:
        log.warning("job %s: no fresh Flight Recorder dumps: %s", job.pk, exc)
        return {}
    silent = sorted(name for name, ranks in found.items() if not ranks)
    if silent:
        log.info(
            "job %s: no fresh Flight Recorder dump from %s in %.0f s", job.pk, ", ".join(silent), FRESH_DUMP_TIMEOUT
        )
    return found


def _silence(instances: list[Instance], job: Job, now: datetime) -> float:
    """How long every running instance has been silent: what hang detection saw."""
    last = [i.last_output_at for i in instances if i.status == InstanceStatus.RUNNING and i.last_output_at]
    return (now - max(last)).total_seconds() if last else float(job.ft.job_hang_interval)


def _c4d_on_hang(
    job: Job, attempt: Attempt, instances: list[Instance], snapshot: StackSnapshot | None, now: datetime
) -> tuple[list[dict], list[str]]:
    """C4D before the hang's restart, whatever the check period: the verdicts shown (each
    with its instance and node) and what the isolation decision did for the Errors."""
    in_collective = snapshot.in_collective() if snapshot is not None else None
    result = None
    for _ in range(2):  # a periodic check saved the monitor state meanwhile: judge again
        result = run_c4d(
            job,
            attempt,
            job.ft,
            now,
            trigger=DiagnosisTrigger.HANG,
            silent_s=_silence(instances, job, now),
            in_collective=in_collective,
        )
        if result is not None:
            break
    if result is None:
        return [], []
    by_rank = {i.rank: i for i in attempt.instances.all()}
    verdicts = [
        {
            **v.to_dict(),
            "instance": by_rank[v.rank].name if v.rank in by_rank else "",
            "node": by_rank[v.rank].node if v.rank in by_rank else "",
        }
        for v in result.verdicts
    ]
    done = []
    for v in result.errors:
        outcome = isolate_for(job, attempt, v)
        if outcome is None:
            continue
        if outcome.action == Action.ISOLATE:
            done.append(f"Node {outcome.node} isolated.")
        elif outcome.action == Action.PROPOSE:
            done.append(f"Node {outcome.node} proposed for isolation (staff decide): {outcome.evidence}")
        else:
            done.append(f"Node {outcome.node} noted, not isolated: {outcome.evidence}")
    return verdicts, done


def _with_verdict(c: Classification, verdicts: list[dict], isolated: list[str]) -> Classification:
    """The hang's restart record carries C4D's verdict (kind, rank, instance, node) and
    what was isolated or proposed, next to the stack snapshot's cause."""
    if not verdicts:
        return c
    named = [
        f"C4D {v['severity']} {v['kind']} for rank {v['rank']}"
        + (f" ({v['instance']} on node {v['node']})" if v["instance"] else "")
        + f": {v['message']}"
        if v["rank"] is not None
        else f"C4D {v['severity']} {v['kind']}: {v['message']}"
        for v in verdicts[:4]
    ]
    return replace(
        c,
        cause=" ".join([c.cause, *named]),
        next_step=" ".join([c.next_step, *isolated]).strip(),
    )


def on_hang(job: Job, attempt: Attempt, instances: list[Instance], message: str = "") -> HangFinding:
    """Before a hang restart: the stacks and, when C4D is on, a fresh Flight Recorder dump
    and C4D's verdict while the ranks still hang, and what the restart record says."""
    now = timezone.now()
    backend = actions.get_backend_for(job)
    if job.ft.enable_c4d_hang_detection:
        ask_for_fresh_dumps(job, attempt)
    diagnosis, snapshot = _snapshot_stacks(job, attempt, DiagnosisTrigger.HANG)
    verdicts: list[dict] = []
    isolated: list[str] = []
    if job.ft.enable_c4d_hang_detection:
        verdicts, isolated = _c4d_on_hang(job, attempt, instances, snapshot, now)
    culprits = (diagnosis.data or {}).get("culprits")
    suspects = (culprits or {}).get("suspects") or []
    # The verdict names a rank from what the ranks did; else the stacks' first suspect.
    named = next((v["instance"] for v in verdicts if v["rank"] is not None and v["instance"]), None)
    first = named or (suspects[0].get("instance") if suspects else None)
    suspect = next((i for i in instances if first and i.name == first), None)
    line, offset = "", None
    if suspect is not None:
        line, offset = _last_line(backend, attempt.backend_handle, suspect)
    found = _with_verdict(hang_classification(message, culprits, line), verdicts, isolated)
    return HangFinding(found, suspect, offset, tuple(verdicts))
