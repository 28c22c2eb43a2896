"""A job's goodput ledger from its rows: the one place that turns attempts,
restart records and instance exits into core.goodput's input, so the API
endpoint and the Reliability page report the same ETTR."""

from __future__ import annotations

from django.utils import timezone

from core.goodput import AttemptTimes, JobGoodput, ledger

from .models import Instance


def _ts(d):
    return d.timestamp() if d else None


def job_goodput(job, now=None) -> JobGoodput:
    now = now or timezone.now()
    records = {r.new_attempt: r for r in job.restart_records.filter(kind="job")}
    exits = {
        (i.attempt.number, i.name): i.exited_at
        for i in Instance.objects.filter(attempt__job=job).select_related("attempt")
    }
    times = []
    for a in job.attempts.order_by("number"):
        record = records.get(a.number)
        times.append(
            AttemptTimes(
                number=a.number,
                queued_at=a.queued_at.timestamp(),
                starting_at=_ts(a.starting_at),
                running_at=_ts(a.running_at),
                first_progress_at=_ts(a.first_progress_at),
                stopping_at=_ts(a.stopping_at),
                ended_at=_ts(a.ended_at),
                made_progress=a.made_progress,
                succeeded=a.status == "Succeeded",
                failed_at=_ts(exits.get((record.attempt, record.instance_name))) if record else None,
                decided_at=_ts(record.restart_time) if record else None,
            )
        )
    return ledger(times, _ts(job.finished_at), now.timestamp())
