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
from .models import Attempt, Job, RestartRecord

TAIL_BYTES = 64 * 1024   # hundreds of step lines
LOG_ATTEMPTS = 5         # log fallback: the newest attempts only, one tail each
CHART_W, CHART_H = 320, 90


@dataclass(frozen=True)
class ProgressPanel:
    summary: core_progress.ProgressSummary | None
    chart: core_progress.LossChart | None
    source: str          # "report_progress" or "log"
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
    marks = [core_progress.RestartMark(r.new_attempt, r.family or r.error_code or "unknown", r.progress_step)
             for r in records if r.kind == "job" and r.new_attempt]
    summary = core_progress.summarize(points, now.timestamp(), total)
    return ProgressPanel(summary, core_progress.loss_chart(points, marks, CHART_W, CHART_H), source,
                         last_at=datetime.fromtimestamp(summary.last_at, tz=UTC) if summary else None)
