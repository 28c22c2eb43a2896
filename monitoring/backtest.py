"""A retryable keyword tried on a workspace's past failures before it is kept (issue 26):
the shell around core.backtest. It gathers each past failure the monitor decided on (the
root cause of a whole-job restart, or the failure that failed the job), re-reads its log
tail from the backend (what the classifier read then; the records keep only the line
that decided), and says what followed a restart. Reads only: nothing is saved.

Not replayed: restarts of one instance alone (Async), whose instance row and log carry
the runs after the restart too, and hangs, which no keyword decides.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from django.urls import reverse

from core.backtest import (
    Did,
    FailureReplay,
    NextAttempt,
    PastFailure,
    backtest_keywords,
    summarize,
)
from core.classify import Classification, FailureInput
from core.failpoint import FailurePoint, failure_point
from jobs import actions
from jobs.backends.base import BackendError
from jobs.logs import InstanceLog
from jobs.models import (
    Attempt,
    AttemptStatus,
    EventType,
    Instance,
    InstanceStatus,
    Job,
    JobEvent,
    RestartKind,
    RestartRecord,
    Workspace,
)
from monitoring.failures import TAIL_BYTES, keywords_of, point_with_peers

# The newest failures are the ones a person remembers; an older past is not read.
MAX_FAILURES = 200
_PROBLEM_SOURCES = ("Hang", "ExitHang", "C4D")


@dataclass
class _Failure:
    job: Job
    attempt: int
    instance: str
    did: Did
    rule: str
    evidence: str
    step: int | None  # the SDK's step the record kept, when it did
    restart_record: int | None = None


def _tail(backend, handle: dict, name: str) -> bytes | None:
    """The log tail as the classifier reads it; None when the log is gone."""
    if backend is None or not handle:
        return None
    log = InstanceLog(backend, handle, name)
    try:
        if log.path is not None and not os.path.exists(log.path):
            return None
        return log.tail(TAIL_BYTES)
    except BackendError:
        return None
    finally:
        log.close()


def _point(
    attempt: Attempt | None,
    tail: bytes | None,
    step: int | None = None,
    evidence: str = "",
    backend=None,
    peers: list[Instance] | None = None,
) -> FailurePoint:
    """Where an attempt failed (or how far it trained): core.failpoint's point, from the SDK's
    progress, else its log's step lines, else its other instances' (`peers`), as the monitor
    reads it for the guard."""
    if attempt is None:
        return failure_point(b"", evidence)
    samples = [int(s[1]) for s in attempt.progress_samples or [] if len(s) > 1]
    if step is None and samples:
        step = max(samples)
    progress = bool(attempt.made_progress or attempt.first_progress_at)
    return point_with_peers(attempt, tail or b"", evidence, backend, peers, sdk_step=step, sdk_progress=progress)


def _failures(jobs: list[Job]) -> list[_Failure]:
    by_id = {j.pk: j for j in jobs}
    out = [
        _Failure(
            by_id[r.job_id],
            r.attempt,
            r.instance_name,
            Did.RESTARTED,
            r.rule,
            r.evidence,
            r.progress_step,
            r.pk,
        )
        for r in RestartRecord.objects.filter(job__in=jobs, root_cause=True, kind=RestartKind.JOB)
        .exclude(error_source__in=_PROBLEM_SOURCES)
        .exclude(instance_name="")
        .order_by("-restart_time", "-pk")[:MAX_FAILURES]
    ]
    for e in JobEvent.objects.filter(job__in=jobs, type=EventType.JOB_FAILED, attempt__isnull=False).order_by(
        "-created_at", "-pk"
    )[:MAX_FAILURES]:
        p = e.payload or {}
        if p.get("instance") and p.get("rule") and p.get("error_source") not in _PROBLEM_SOURCES:
            out.append(
                _Failure(
                    by_id[e.job_id],
                    e.attempt or 0,
                    p["instance"],
                    Did.FAILED,
                    p["rule"],
                    p.get("evidence") or "",
                    None,
                )
            )
    return out


def _inputs(failures: list[_Failure]) -> tuple[list[PastFailure], dict[str, _Failure]]:
    """core.backtest's inputs, read from the records, the attempts and the backend's logs."""
    jobs = {f.job.pk: f.job for f in failures}
    attempts: dict[tuple[int, int], Attempt] = {
        (a.job_id, a.number): a for a in Attempt.objects.filter(job_id__in=jobs).order_by("number")
    }
    instances: dict[tuple[int, int, str], Instance] = {
        (i.attempt.job_id, i.attempt.number, i.name): i
        for i in Instance.objects.filter(attempt__job_id__in=jobs).select_related("attempt")
    }
    backends = {}
    for job in jobs.values():
        try:
            backends[job.pk] = actions.get_backend_for(job)
        except Exception:  # noqa: BLE001 - a backend gone from settings: its logs are gone too
            backends[job.pk] = None
    failed_at = {(f.job.pk, f.attempt): f for f in failures}
    restarted_from: dict[int, list[int]] = {}  # every whole-job restart, hangs' too: the budget counts them
    for job_id, number in RestartRecord.objects.filter(job_id__in=jobs, kind=RestartKind.JOB).values_list(
        "job_id", "attempt"
    ):
        restarted_from.setdefault(job_id, []).append(number)
    inputs, refs = [], {}
    for f in failures:
        job, attempt = f.job, attempts.get((f.job.pk, f.attempt))
        inst = instances.get((job.pk, f.attempt, f.instance))
        if attempt is None or inst is None:
            continue
        tail = _tail(backends[job.pk], attempt.backend_handle, inst.name)
        exit_code = None if inst.exit_code == 0 and inst.signal is None else inst.exit_code
        failure = (
            None
            if tail is None
            else FailureInput(
                exit_code=exit_code,
                signal=inst.signal,
                log_tail=tail,
                backend_reason=inst.backend_reason or ("lost" if inst.status == InstanceStatus.LOST else ""),
            )
        )
        siblings = [i for k, i in instances.items() if k[:2] == (job.pk, f.attempt)]
        workers = [i for i in siblings if i.role == "Worker"]
        earlier = [a for (j, n), a in attempts.items() if j == job.pk and n < f.attempt]
        restarts_before = sum(1 for n in restarted_from.get(job.pk, ()) if n < f.attempt)
        stalled = 0
        for a in sorted(earlier, key=lambda a: -a.number):
            if a.made_progress:
                break
            stalled += 1
        after = None
        following = attempts.get((job.pk, f.attempt + 1))
        if f.did is Did.RESTARTED and following is not None:
            its_failure = failed_at.get((job.pk, f.attempt + 1))
            name = its_failure.instance if its_failure else inst.name
            after = NextAttempt(
                point=_point(
                    following,
                    _tail(backends[job.pk], following.backend_handle, name),
                    evidence=its_failure.evidence if its_failure else "",
                    backend=backends[job.pk] if following.backend_handle else None,
                    peers=[i for k, i in instances.items() if k[:2] == (job.pk, f.attempt + 1)],
                ),
                succeeded=following.status == AttemptStatus.SUCCEEDED,
                failed=its_failure is not None,
                rule=its_failure.rule if its_failure else "",
                evidence=its_failure.evidence if its_failure else "",
            )
        ref = f"{job.pk}:{f.attempt}:{inst.name}"
        refs[ref] = f
        inputs.append(
            PastFailure(
                ref=ref,
                job=job.pk,
                attempt=f.attempt,
                instance=inst.name,
                role=inst.role,
                index=inst.index,
                failure=failure,
                keywords=keywords_of(job),
                config=job.ft if job.fault_tolerance else None,
                did=f.did,
                rule=f.rule,
                evidence=f.evidence,
                point=_point(
                    attempt, tail, f.step, f.evidence, backends[job.pk] if attempt.backend_handle else None, siblings
                ),
                next_attempt=after,
                node=inst.node,
                job_restarts_before=restarts_before,
                restarts_without_progress_before=min(stalled, restarts_before),
                failed_workers=sum(1 for i in workers if i.status in (InstanceStatus.FAILED, InstanceStatus.LOST)),
                total_workers=len(workers),
            )
        )
    return inputs, refs


def _verdict(c: Classification | None) -> dict | None:
    if c is None:
        return None
    return {
        "retryable": c.retryable,
        "rule": c.rule,
        "error_code": c.error_code,
        "message": c.message,
        "evidence": c.evidence,
    }


def _row(r: FailureReplay, f: _Failure) -> dict:
    ws = f.job.workspace.slug
    job_url = reverse("pages:job-detail", args=[ws, f.job.pk])
    return {
        "job": f.job.pk,
        "job_name": f.job.display_name,
        "job_url": job_url,
        "attempt": r.attempt,
        "instance": r.instance,
        "restart_record_url": reverse("pages:restart", args=[ws, f.job.pk, f.restart_record])
        if f.restart_record
        else None,
        "log_url": f"{job_url}?attempt={r.attempt}&instance={r.instance}",
        "did": str(r.did),
        "would_do": str(r.would_do) if r.would_do else None,
        "change": str(r.change),
        "matched": r.matched,
        "verdict_then": _verdict(r.verdict_then),
        "verdict_with": _verdict(r.verdict_with),
        "proved": str(r.proved),
        "right": r.right,
        "log_gone": r.verdict_with is None,
    }


def keyword_backtest(job: Job, keyword: str, scope: str) -> dict:
    """What `keyword`, made retryable for the job or its whole workspace, would have
    changed on their past failures: the figures and one row per failure, newest first."""
    workspace: Workspace = job.workspace
    jobs = [job] if scope == "job" else list(Job.objects.filter(workspace=workspace).select_related("workspace"))
    failures = _failures(jobs)
    failures.sort(key=lambda f: (f.job.pk, f.attempt), reverse=True)
    inputs, refs = _inputs(failures[:MAX_FAILURES])
    replays = backtest_keywords(inputs, [keyword])
    summary = summarize(replays)
    return {
        "keyword": keyword,
        "scope": scope,
        "summary": {
            "sentence": summary.sentence,
            "failures": summary.failures,
            "matched": summary.matched,
            "would_restart_jobs": summary.restart_instead_of_fail_jobs,
            "would_restart_proved_transient": summary.restart_instead_of_fail_proved_transient,
            "would_restart_proved_deterministic": summary.restart_instead_of_fail_proved_deterministic,
            "would_fail_jobs": summary.fail_instead_of_restart_jobs,
            "would_fail_later_trained": summary.fail_instead_of_restart_later_trained,
            "logs_gone": summary.logs_gone,
        },
        "failures": [_row(r, refs[r.ref]) for r in replays],
    }
