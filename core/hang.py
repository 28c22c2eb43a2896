"""Hang and exit-hang detection, and the suggested hang interval (SPEC section 5).

Pure: the caller passes what it knows about the attempt (`WatchedAttempt`) and `now`; nothing here reads
a clock or sleeps. `plan_hang_check` also says when the next check can find something
(`next_check_at`), so a scheduler sleeps exactly that long instead of polling.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from core.classify import ErrorSource
from core.flags import MAX_INTERVAL_SECONDS, ExecutionMode, FaultToleranceConfig
from core.policy import DetectedProblem

__all__ = [
    "SUSPENDED",
    "InstanceActivity",
    "WatchedAttempt",
    "HangVerdict",
    "ExitHangVerdict",
    "Suggestion",
    "HangCheck",
    "effective_hang_interval",
    "check_hang",
    "check_exit_hang",
    "next_check_at",
    "next_look_at",
    "plan_hang_check",
    "suggest_hang_interval",
    "IntervalInForce",
    "interval_in_force",
    "HangStatus",
    "hang_status",
    "CadenceSuggestion",
    "step_times_from_log",
    "suggest_from_cadence",
    "suggestion_set",
]

SUSPENDED = -1  # a runtime hang interval of -1 suspends hang detection (SPEC 5)
# The suggestion keeps this margin below the watchdog timeout: max(150 s, timeout / 6).
_MIN_MARGIN_SECONDS = 150


@dataclass(frozen=True)
class InstanceActivity:
    name: str  # "worker-0"
    running: bool
    last_output_at: float | None  # last write to stdout/stderr in this attempt; None if never
    exit_code: int | None = None  # once exited
    exited_at: float | None = None


@dataclass(frozen=True)
class IntervalInForce:
    seconds: int
    startup: bool  # the start-up interval: the attempt has not made progress yet
    counted_from: float  # silence counts from no earlier than this (attempt start or interval change)


@dataclass(frozen=True)
class HangVerdict:
    silent_seconds: float  # how long the most recent writer has been silent
    interval: int  # the interval in force
    last_writer: str | None  # the running instance that wrote last; None if none ever wrote
    last_output_at: float  # when it wrote (the attempt's start if nobody wrote)
    silent_instances: tuple[str, ...]
    run_c4d: bool  # --enable-c4d-hang-detection: diagnose the ranks too
    message: str
    source: ErrorSource = ErrorSource.HANG
    startup: bool = False  # found before the attempt's first progress

    def to_trigger(self) -> DetectedProblem:
        return DetectedProblem(self.source, self.message)


@dataclass(frozen=True)
class ExitHangVerdict:
    first_finished: str  # the first instance that exited 0
    finished_at: float
    waited_seconds: float
    interval: int
    still_running: tuple[str, ...]
    message: str
    source: ErrorSource = ErrorSource.EXIT_HANG

    def to_trigger(self) -> DetectedProblem:
        return DetectedProblem(self.source, self.message)


@dataclass(frozen=True)
class Suggestion:
    timeout_seconds: int  # the collective timeout the watchdog line shows
    interval: int  # the suggested --job-hang-interval
    line: str  # the watchdog line it was read from
    message: str


@dataclass(frozen=True)
class HangCheck:
    hang: HangVerdict | None
    exit_hang: ExitHangVerdict | None
    next_check_at: float | None  # when a check can next find a hang; None: nothing to watch


def _check_config(config: FaultToleranceConfig) -> None:
    if not isinstance(config, FaultToleranceConfig):
        raise ValueError(f"config: expected a FaultToleranceConfig, got {type(config).__name__}")


def _check_now(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name}: expected epoch seconds as a number, got {value!r}")
    return float(value)


def effective_hang_interval(config: FaultToleranceConfig, interval_override: int | None) -> int | None:
    """The hang interval in force, or None when hang detection does not apply now.

    None when the job is not Sync, hang detection is off, or the training code suspended
    it with a runtime interval of -1. A runtime override replaces the configured interval.
    """
    _check_config(config)
    if interval_override is not None and (
        isinstance(interval_override, bool)
        or not isinstance(interval_override, int)
        or (interval_override <= 0 and interval_override != SUSPENDED)
    ):
        raise ValueError(
            f"job_hang_interval: expected a positive integer of seconds or -1 to suspend, got {interval_override!r}"
        )
    if config.job_execution_mode != ExecutionMode.SYNC or not config.enable_job_hang_detection:
        return None
    interval = config.job_hang_interval if interval_override is None else interval_override
    return None if interval == SUSPENDED else interval


def _optional_time(name: str, value: object) -> float | None:
    return None if value is None else _check_now(name, value)


@dataclass(frozen=True)
class WatchedAttempt:
    """What the hang checks look at in the current attempt, apart from the moment they
    look (`now`, a parameter of each check): the job's flags and runtime interval, the
    attempt's start and first progress, and its instances. Checked when built, so a bad
    value is refused by its name before any check runs."""

    config: FaultToleranceConfig
    interval_override: int | None  # the runtime hang interval (SDK or a person); -1 suspends
    instances: Sequence[InstanceActivity]
    attempt_started_at: float
    first_progress_at: float | None  # None: the attempt is still starting up
    override_set_at: float | None = None  # when the runtime interval was set

    def __post_init__(self) -> None:
        effective_hang_interval(self.config, self.interval_override)
        object.__setattr__(self, "instances", tuple(self.instances))
        object.__setattr__(self, "attempt_started_at", _check_now("attempt_started_at", self.attempt_started_at))
        object.__setattr__(self, "first_progress_at", _optional_time("first_progress_at", self.first_progress_at))
        object.__setattr__(self, "override_set_at", _optional_time("override_set_at", self.override_set_at))


def interval_in_force(watched: WatchedAttempt) -> IntervalInForce | None:
    """The silence that makes a hang now, and from when it is counted; None when hang
    detection does not apply (see `effective_hang_interval`).

    Until the attempt's first progress (SDK report_progress, a step line in a log, a C4D
    collective) the start-up interval applies: importing, joining the rendezvous and
    loading a checkpoint are not a stall. A runtime interval that the training code or a
    person set during this attempt replaces it (the code knows what it is doing), except
    the flag's own value, which is what the SDK's `hang_detect` restores when its scope
    ends. A runtime interval from an earlier attempt does not: every attempt starts up.
    """
    config, interval_override = watched.config, watched.interval_override
    interval = effective_hang_interval(config, interval_override)
    start, progress, set_at = watched.attempt_started_at, watched.first_progress_at, watched.override_set_at
    if interval is None:
        return None
    # A changed interval counts silence from the change, not from before it.
    counted_from = start if set_at is None else max(start, set_at)
    chosen_now = (
        interval_override is not None
        and set_at is not None
        and set_at >= start
        and interval_override != config.job_hang_interval
    )
    if progress is None and not chosen_now:
        return IntervalInForce(config.startup_interval, True, counted_from)
    return IntervalInForce(interval, False, counted_from)


def _latest_activity(running: Sequence[InstanceActivity], attempt_started_at: float) -> tuple[float, str | None]:
    latest, writer = attempt_started_at, None
    for inst in running:
        # Output older than the attempt belongs to an earlier attempt: count from the start.
        if inst.last_output_at is not None and inst.last_output_at > latest:
            latest, writer = inst.last_output_at, inst.name
    return latest, writer


def _running(instances: Sequence[InstanceActivity]) -> list[InstanceActivity]:
    return [i for i in instances if i.running]


def check_hang(watched: WatchedAttempt, now: float) -> HangVerdict | None:
    """A hang when every running instance has been silent for at least the interval in
    force (`interval_in_force`: the start-up interval until the first progress)."""
    force = interval_in_force(watched)
    now = _check_now("now", now)
    running = _running(watched.instances)
    if force is None or not running:
        return None
    interval = force.seconds
    latest, writer = _latest_activity(running, force.counted_from)
    silent = now - latest
    if silent < interval:
        return None
    n = len(running)
    everyone = {1: "the only running instance has", 2: "both running instances have"}.get(
        n, f"all {n} running instances have"
    )
    which = "start-up interval (the attempt has made no progress yet)" if force.startup else "hang interval"
    if writer is None:
        last = f"none has written anything since the attempt started {silent:.0f} s ago"
    else:
        last = f"{writer} wrote last, {silent:.0f} s ago"
    return HangVerdict(
        silent_seconds=silent,
        interval=interval,
        last_writer=writer,
        last_output_at=latest,
        silent_instances=tuple(i.name for i in running),
        run_c4d=watched.config.enable_c4d_hang_detection,
        startup=force.startup,
        message=_sentence(f"{everyone} been silent for {silent:.0f} s, at least the {which} of {interval} s; {last}."),
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _first_success(instances: Sequence[InstanceActivity]) -> tuple[float, str] | None:
    """(when, who) of the first instance that exited 0; the name breaks a tie."""
    done = [(i.exited_at, i.name) for i in instances if not i.running and i.exit_code == 0 and i.exited_at is not None]
    return min(done, default=None)


def check_exit_hang(
    config: FaultToleranceConfig,
    instances: Sequence[InstanceActivity],
    now: float,
) -> ExitHangVerdict | None:
    """An exit hang when the job has not finished within the interval after the first
    instance exited 0 (Sync jobs with exit-hang detection on)."""
    _check_config(config)
    now = _check_now("now", now)
    if config.job_execution_mode != ExecutionMode.SYNC or not config.enable_job_exit_hang_detection:
        return None
    first = _first_success(instances)
    running = _running(instances)
    if first is None or not running:
        return None
    finished_at, finished = first
    waited = now - finished_at
    interval = config.job_exit_hang_interval
    if waited < interval:
        return None
    names = tuple(i.name for i in running)
    return ExitHangVerdict(
        first_finished=finished,
        finished_at=finished_at,
        waited_seconds=waited,
        interval=interval,
        still_running=names,
        message=f"{finished} finished {waited:.0f} s ago but {', '.join(names)} "
        f"{'is' if len(names) == 1 else 'are'} still running, longer than the exit hang "
        f"interval of {interval} s.",
    )


def next_check_at(watched: WatchedAttempt) -> float | None:
    """The earliest moment a hang or an exit hang could be found if nothing else happens;
    None when neither check has anything to watch. New output, exits or the first
    progress (which ends the start-up interval) move it."""
    due: list[float] = []
    config = watched.config
    running = _running(watched.instances)
    force = interval_in_force(watched)
    if force is not None and running:
        due.append(_latest_activity(running, force.counted_from)[0] + force.seconds)
    if config.job_execution_mode == ExecutionMode.SYNC and config.enable_job_exit_hang_detection and running:
        first = _first_success(watched.instances)
        if first is not None:
            due.append(first[0] + config.job_exit_hang_interval)
    return min(due, default=None)


def next_look_at(watched: WatchedAttempt, now: float) -> float | None:
    """When a monitor that sees nothing new in between must look again: `next_check_at`,
    and during start-up also the end of the hang interval (if still ahead). Progress
    can show up in a log without anyone telling the monitor (a step line); from then the
    shorter hang interval applies, so a monitor that slept until the start-up deadline
    would flag that hang late."""
    now = _check_now("now", now)
    due = next_check_at(watched)
    interval = effective_hang_interval(watched.config, watched.interval_override)
    running = _running(watched.instances)
    if watched.first_progress_at is None and interval is not None and running:
        force = interval_in_force(watched)
        if force is not None and force.startup:
            at = _latest_activity(running, force.counted_from)[0] + interval
            if at > now:
                due = at if due is None else min(due, at)
    return due


def plan_hang_check(watched: WatchedAttempt, now: float) -> HangCheck:
    """Both checks at `now`, and when to check next."""
    return HangCheck(
        hang=check_hang(watched, now),
        exit_hang=check_exit_hang(watched.config, watched.instances, now),
        next_check_at=next_check_at(watched),
    )


@dataclass(frozen=True)
class HangStatus:
    """What the job page shows about hang detection right now."""

    interval: int
    startup: bool
    silent_seconds: float
    text: str  # "waiting for first progress: silent 2 of 10 min"


def _duration(seconds: float, unit: str, *, whole: bool) -> str:
    value = seconds / 60 if unit == "min" else seconds
    # Silence counts up in whole units; an interval such as 150 s shows as 2.5 min.
    return f"{math.floor(value):d}" if whole else f"{round(value, 1):g}"


def hang_status(watched: WatchedAttempt, now: float) -> HangStatus | None:
    """The interval in force and how much of it the current silence has used, in the
    same terms `check_hang` decides on; None when hang detection does not apply or
    nothing runs."""
    force = interval_in_force(watched)
    now = _check_now("now", now)
    running = _running(watched.instances)
    if force is None or not running:
        return None
    silent = max(0.0, now - _latest_activity(running, force.counted_from)[0])
    # Minutes once the interval is two minutes or more, so the numbers stay readable.
    unit = "min" if force.seconds >= 120 else "s"
    used = f"silent {_duration(silent, unit, whole=True)} of {_duration(force.seconds, unit, whole=False)} {unit}"
    text = f"waiting for first progress: {used}" if force.startup else f"making progress: {used}"
    return HangStatus(interval=force.seconds, startup=force.startup, silent_seconds=silent, text=text)


# "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE,
#  NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600535 milliseconds before timing out."
# (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp). Bounded lazy gap: linear.
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout:[^\n]{0,1000}?Timeout\(ms\)=(\d{1,12})")


def _interval_below(timeout_seconds: int) -> int:
    interval = math.floor(timeout_seconds - max(_MIN_MARGIN_SECONDS, timeout_seconds / 6))
    # For timeouts of 150 s or less the margin would eat the whole timeout: take half.
    return interval if interval >= 1 else max(1, timeout_seconds // 2)


def suggest_hang_interval(log_text: str | bytes) -> Suggestion | None:
    """A hang interval below the shortest NCCL watchdog timeout the log shows, so that stack
    snapshots are taken before the watchdog kills the process: timeout - max(150 s, timeout/6)
    (600 s -> 450 s, 1800 s -> 1500 s)."""
    if isinstance(log_text, (bytes, bytearray)):
        log_text = bytes(log_text).decode("utf-8", "replace")
    elif not isinstance(log_text, str):
        raise ValueError(f"log_text: expected str or bytes, got {type(log_text).__name__}")
    best: tuple[int, re.Match[str]] | None = None
    for m in _WATCHDOG.finditer(log_text):
        seconds = int(m.group(1)) // 1000
        if seconds >= 1 and (best is None or seconds < best[0]):
            best = (seconds, m)
    if best is None:
        return None
    seconds, m = best
    start = log_text.rfind("\n", 0, m.start()) + 1
    end = log_text.find("\n", m.end())
    line = log_text[start : end if end >= 0 else len(log_text)].strip()
    interval = _interval_below(seconds)
    return Suggestion(
        timeout_seconds=seconds,
        interval=interval,
        line=line,
        message=f"The log shows an NCCL watchdog timeout of {seconds} s. Set "
        f"--job-hang-interval={interval} so that hangs are detected and stacks are taken "
        f"before the watchdog ends the processes.",
    )


# --- the suggestion from the step cadence ------------------------------------------------

# A step line with a timestamp: "2026-11-29T23:59:01.123456Z step=12 ...", python logging's
# "2026-11-29 23:59:01,123 ... iteration 12". Epochs are not steps. Bounded gaps: linear.
_STAMPED_STEP = re.compile(
    r"(?P<date>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})[T ](?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<frac>\d{1,9}))?[^\n]{0,200}?\b(?:step|iter(?:ation)?)\b\s{0,3}[=:#]?\s{0,3}(?P<step>\d{1,12})",
    re.IGNORECASE,
)
CADENCE_FACTOR = 10  # suggest 10 x the p99 step time
CADENCE_MIN_STEPS = 10  # fewer step times say too little about the tail
# Checkpoint saves and evaluations between steps run minutes; a shorter interval would
# call them hangs. The top is the flag's own limit.
CADENCE_FLOOR_SECONDS = 120


@dataclass(frozen=True)
class CadenceSuggestion:
    steps: int  # step times observed
    p99_step_seconds: float
    median_step_seconds: float
    interval: int  # the suggested --job-hang-interval
    message: str


def step_times_from_log(log_text: str | bytes) -> list[tuple[float, int]]:
    """(epoch seconds, step) of every timestamped step line, in log order. Timestamps
    without a zone are read as UTC: only their differences are used."""
    if isinstance(log_text, (bytes, bytearray)):
        log_text = bytes(log_text).decode("utf-8", "replace")
    elif not isinstance(log_text, str):
        raise ValueError(f"log_text: expected str or bytes, got {type(log_text).__name__}")
    out: list[tuple[float, int]] = []
    for m in _STAMPED_STEP.finditer(log_text):
        try:
            day = datetime(
                int(m["date"]),
                int(m["month"]),
                int(m["day"]),
                int(m["h"]),
                int(m["m"]),
                int(m["s"]),
                tzinfo=timezone.utc,
            )
        except ValueError:  # 2026-13-45: not a timestamp
            continue
        frac = float("0." + m["frac"]) if m["frac"] else 0.0
        out.append((day.timestamp() + frac, int(m["step"])))
    return out


def _nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def suggest_from_cadence(samples: Sequence[tuple[float, int]]) -> CadenceSuggestion | None:
    """A hang interval of 10 x the p99 step time (nearest rank), at least 2 min and at
    most 30 days, from (time, step) observations (timestamped log lines or
    report_progress calls). Between two observations each step took (dt / steps); a
    step number that does not grow (a restart, a repeated report) starts afresh."""
    durations: list[float] = []
    for (t0, s0), (t1, s1) in zip(samples, samples[1:]):
        if s1 > s0 and t1 >= t0:
            durations.extend([(t1 - t0) / (s1 - s0)] * min(s1 - s0, 1000))
    if len(durations) < CADENCE_MIN_STEPS:
        return None
    durations.sort()
    p99 = _nearest_rank(durations, 0.99)
    median = _nearest_rank(durations, 0.5)
    raw = math.ceil(CADENCE_FACTOR * p99)
    interval = min(MAX_INTERVAL_SECONDS, max(CADENCE_FLOOR_SECONDS, raw))
    bound = (
        f", raised to the floor of {CADENCE_FLOOR_SECONDS} s (checkpoints and evaluations between steps take minutes)"
        if raw < CADENCE_FLOOR_SECONDS
        else ", cut to the 30-day limit"
        if raw > MAX_INTERVAL_SECONDS
        else ""
    )
    return CadenceSuggestion(
        steps=len(durations),
        p99_step_seconds=p99,
        median_step_seconds=median,
        interval=interval,
        message=f"{len(durations)} steps took {median:.3g} s (median) and {p99:.3g} s (p99); "
        f"{CADENCE_FACTOR} x the p99 step time is {raw} s{bound}: set "
        f"--job-hang-interval={interval}.",
    )


def suggestion_set(interval_in_force: int | None, cadence: int | None, watchdog: int | None) -> str | None:
    """Which suggestion the interval the user set is: "cadence", "watchdog", or None."""
    if interval_in_force is None:
        return None
    if cadence is not None and interval_in_force == cadence:
        return "cadence"
    if watchdog is not None and interval_in_force == watchdog:
        return "watchdog"
    return None
