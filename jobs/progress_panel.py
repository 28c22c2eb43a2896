"""The job page's progress panel (issue 15): step N of M, steps/s, the time since
the last progress and a loss chart with restarts marked. From report_progress
(Attempt.progress_samples) when the job reports; where it never did, from the
step lines of the log tails (lowest rank first). The figures are core.progress's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from core import progress as core_progress

from . import actions
from .logs import readable_tails
from .models import Attempt, Instance, Job, JobStatus, RestartRecord

TAIL_BYTES = 64 * 1024  # hundreds of step lines
LOG_ATTEMPTS = 5  # log fallback: the newest attempts only, one tail each
CHART_W, CHART_H = 320, 90


@dataclass(frozen=True)
class ProgressPanel:
    summary: core_progress.ProgressSummary | None
    chart: core_progress.LossChart | None
    source: str  # "report_progress" or "log"
    last_at: datetime | None = None  # the newest progress, for the page's ticking "ago"
    chart_w: int = CHART_W
    chart_h: int = CHART_H


def _from_samples(attempts: list[Attempt]) -> tuple[list[core_progress.ProgressPoint], int | None]:
    points, total = [], None
    for a in attempts:
        for sample in a.progress_samples or []:
            point, t = core_progress.point_from_sample(a.number, sample)
            points.append(point)
            total = t if t is not None else total
    return points, total


def _from_logs(job: Job, attempts: list[Attempt]) -> tuple[list[core_progress.ProgressPoint], int | None]:
    try:
        backend = actions.get_backend_for(job)
    except Exception:  # noqa: BLE001 - a backend gone from settings: no progress from logs, the page still shows
        return [], None
    points: list[core_progress.ProgressPoint] = []
    total = None
    for a in attempts[-LOG_ATTEMPTS:]:
        if not a.backend_handle:
            continue
        names = [i.name for i in a.instances.order_by("rank", "role", "index")[:4]]
        for _, tail in readable_tails(backend, a.backend_handle, names, TAIL_BYTES):
            found, t = core_progress.points_from_log(a.number, tail.splitlines())
            if found:
                points += found
                total = t if t is not None else total
                break
    return points, total


def progress_panel(job: Job, attempts: list[Attempt], records: list[RestartRecord], now) -> ProgressPanel:
    points, total = _from_samples(attempts)
    source = "report_progress"
    if not points:
        points, total = _from_logs(job, attempts)
        source = "log"
    marks = [
        core_progress.RestartMark(r.new_attempt, r.family or r.error_code or "unknown", r.progress_step)
        for r in records
        if r.kind == "job" and r.new_attempt
    ]
    summary = core_progress.summarize(points, now.timestamp(), total)
    return ProgressPanel(
        summary,
        core_progress.loss_chart(points, marks, CHART_W, CHART_H),
        source,
        last_at=datetime.fromtimestamp(summary.last_at, tz=UTC) if summary else None,
    )


# --- the job list's sparklines ----------------------------------------------------------

SPARK_W, SPARK_H = 64, 16
LIST_TAIL_BYTES = 16 * 1024  # log fallback: one tail of the current attempt's rank 0, smaller than the panel's


def list_sparklines(jobs) -> dict[int, tuple[core_progress.Sparkline, str]]:
    """{job id: (sparkline, "report_progress" or "log")} for the listed jobs, in two
    queries whatever their number:
    the attempts' report_progress samples, and for the jobs that never reported the
    current attempt's rank-0 instance, whose log tail (one per job) gives step lines."""
    jobs = [j for j in jobs if j.status not in (JobStatus.CREATING, JobStatus.QUEUING)]
    by_job: dict[int, Job] = {j.pk: j for j in jobs}
    points: dict[int, list[core_progress.ProgressPoint]] = {}
    totals: dict[int, int | None] = {}
    handles: dict[int, tuple[int, dict]] = {}  # job id -> (attempt id, backend handle) of the current attempt
    rows = (
        Attempt.objects.filter(job_id__in=list(by_job))
        .order_by("job_id", "number")
        .values_list("pk", "job_id", "number", "progress_samples", "backend_handle")
    )
    for attempt_id, job_id, number, samples, handle in rows:
        for sample in samples or []:
            point, t = core_progress.point_from_sample(number, sample)
            points.setdefault(job_id, []).append(point)
            totals[job_id] = t if t is not None else totals.get(job_id)
        if number == by_job[job_id].current_attempt and handle:
            handles[job_id] = (attempt_id, handle)
    silent = {h[0]: job_id for job_id, h in handles.items() if job_id not in points}
    first_rank: dict[int, str] = {}
    for attempt_id, name in (
        Instance.objects.filter(attempt_id__in=list(silent), rank=0)
        .order_by("attempt_id", "role", "index")
        .values_list("attempt_id", "name")
    ):
        first_rank.setdefault(attempt_id, name)
    for attempt_id, name in first_rank.items():
        job = by_job[silent[attempt_id]]
        try:
            backend = actions.get_backend_for(job)
        except Exception:  # noqa: BLE001 - a backend gone from settings: no sparkline, the list still shows
            continue
        for _, tail in readable_tails(backend, handles[job.pk][1], [name], LIST_TAIL_BYTES):
            found, t = core_progress.points_from_log(job.current_attempt, tail.splitlines())
            points[job.pk], totals[job.pk] = found, t
    out = {}
    for job_id, found in points.items():
        line = core_progress.sparkline(found, SPARK_W, SPARK_H, totals.get(job_id))
        if line is not None:
            out[job_id] = (line, "log" if handles.get(job_id, (None,))[0] in silent else "report_progress")
    return out
