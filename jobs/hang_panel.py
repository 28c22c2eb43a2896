"""The job page's hang-detection lines (SPEC section 5): the interval in force and how
much of it the current silence has used ("waiting for first progress: silent 2 of 10
min"), the interval the user set, and the two suggestions beside it: from the step
cadence of the log or of report_progress (core.hang.suggest_from_cadence) and from an NCCL watchdog timeout
(the monitor's suggestion event). The decisions are core.hang's; this reads the rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core import hang
from core.flags import FlagError

from . import actions
from .logs import readable_tails
from .models import Attempt, EventType, Instance, InstanceStatus, Job

# The log tail the cadence is read from: 64 KiB holds hundreds of step lines.
CADENCE_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class HangPanel:
    status: hang.HangStatus | None
    set_seconds: int | None  # the hang interval the user set (flag or at run time)
    set_at_run_time: bool
    suspended: bool
    startup_seconds: int
    cadence: hang.CadenceSuggestion | None
    cadence_instance: str
    watchdog_seconds: int | None
    watchdog_message: str
    which: str | None  # "cadence", "watchdog" or None: the one the user set


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _cadence(job: Job, attempt: Attempt, instances: list[Instance]) -> tuple[hang.CadenceSuggestion | None, str]:
    """From the first instance (lowest rank) whose log has enough timestamped step lines,
    else from report_progress."""
    if not attempt.backend_handle:
        return _reported_cadence(attempt)
    try:
        backend = actions.get_backend_for(job)
    except Exception:  # noqa: BLE001 - a backend gone from settings: no log suggestion, the page still shows
        return _reported_cadence(attempt)
    # rank 0 is enough when it logs steps; a few more if it does not
    for name, tail in readable_tails(
        backend, attempt.backend_handle, [i.name for i in instances[:4]], CADENCE_TAIL_BYTES
    ):
        suggestion = hang.suggest_from_cadence(hang.step_times_from_log(tail))
        if suggestion is not None:
            return suggestion, name
    return _reported_cadence(attempt)


def _reported_cadence(attempt: Attempt) -> tuple[hang.CadenceSuggestion | None, str]:
    """From the training code's report_progress calls, where no log has timestamped step
    lines: each report's time and step (kept on the attempt by the SDK's progress view)."""
    samples = [(float(s[0]), int(s[1])) for s in (attempt.progress_samples or [])]  # [t, step, loss?, total?]
    suggestion = hang.suggest_from_cadence(samples)
    return (suggestion, "report_progress") if suggestion is not None else (None, "")


def _last_outputs(job: Job, attempt: Attempt, instances: list[Instance]) -> dict[str, float | None]:
    """Each instance's last output as the backend sees it now: the monitor writes a
    steady job's rows only at its scheduled ticks (monitoring.schedule), up to
    MONITOR_QUIET_SECONDS apart, and the silence shown must not lag by that much."""
    outputs = {i.name: _epoch(i.last_output_at) for i in instances}
    if not attempt.backend_handle:
        return outputs
    try:
        polled = actions.get_backend_for(job).poll(attempt.backend_handle)
    except Exception:  # noqa: BLE001 - a backend that does not answer: the monitor's view
        return outputs
    for p in polled:
        if p.name in outputs and p.last_output_at is not None:
            outputs[p.name] = max(outputs[p.name] or 0.0, p.last_output_at)
    return outputs


def hang_panel(job: Job, attempt: Attempt | None, instances: list[Instance], now: datetime) -> HangPanel | None:
    """None when the job has no hang detection to show."""
    if not job.fault_tolerance or attempt is None:
        return None
    try:
        config = job.ft
    except FlagError:
        return None
    if hang.effective_hang_interval(config, None) is None:
        return None
    override = job.hang_interval_override
    suspended = override == hang.SUSPENDED
    set_seconds = None if suspended else (override if override is not None else config.job_hang_interval)
    status = None
    if not job.finished:
        outputs = _last_outputs(job, attempt, instances)
        activity = [
            hang.InstanceActivity(i.name, i.status == InstanceStatus.RUNNING, outputs[i.name]) for i in instances
        ]
        started = _epoch(attempt.starting_at) or _epoch(attempt.queued_at) or now.timestamp()
        watched = hang.WatchedAttempt(
            config,
            override,
            activity,
            started,
            first_progress_at=_epoch(attempt.first_progress_at),
            override_set_at=_epoch(job.hang_interval_set_at),
        )
        status = hang.hang_status(watched, now.timestamp())
    cadence, cadence_instance = _cadence(job, attempt, instances)
    watchdog = next(
        (
            (p, m)
            for p, m in job.events.filter(type=EventType.SUGGESTION)
            .order_by("-id")
            .values_list("payload", "message")[:20]
            if isinstance(p, dict) and isinstance(p.get("suggested_hang_interval"), int)
        ),
        None,
    )
    watchdog_seconds = watchdog[0]["suggested_hang_interval"] if watchdog else None
    return HangPanel(
        status=status,
        set_seconds=set_seconds,
        set_at_run_time=override is not None and not suspended,
        suspended=suspended,
        startup_seconds=config.startup_interval,
        cadence=cadence,
        cadence_instance=cadence_instance,
        watchdog_seconds=watchdog_seconds,
        watchdog_message=watchdog[1] if watchdog else "",
        which=hang.suggestion_set(set_seconds, cadence.interval if cadence else None, watchdog_seconds),
    )
