"""Hang and exit-hang detection, and the suggested hang interval (SPEC section 5).

Pure: the caller passes what it knows about each instance and `now`; nothing here reads
a clock or sleeps. `plan_hang_check` also says when the next check can find something
(`next_check_at`), so a scheduler sleeps exactly that long instead of polling.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from core.classify import ErrorSource
from core.flags import ExecutionMode, FaultToleranceConfig
from core.policy import DetectedProblem

__all__ = [
    "SUSPENDED", "InstanceActivity", "HangVerdict", "ExitHangVerdict", "Suggestion", "HangCheck",
    "effective_hang_interval", "check_hang", "check_exit_hang", "next_check_at", "plan_hang_check",
    "suggest_hang_interval",
]

SUSPENDED = -1  # a runtime hang interval of -1 suspends hang detection (SPEC 5)
# The suggestion keeps this margin below the watchdog timeout: max(150 s, timeout / 6).
_MIN_MARGIN_SECONDS = 150


@dataclass(frozen=True)
class InstanceActivity:
    name: str                      # "worker-0"
    running: bool
    last_output_at: float | None   # last write to stdout/stderr in this attempt; None if never
    exit_code: int | None = None   # once exited
    exited_at: float | None = None


@dataclass(frozen=True)
class HangVerdict:
    silent_seconds: float        # how long the most recent writer has been silent
    interval: int                # the interval in force
    last_writer: str | None      # the running instance that wrote last; None if none ever wrote
    last_output_at: float        # when it wrote (the attempt's start if nobody wrote)
    silent_instances: tuple[str, ...]
    run_c4d: bool                # --enable-c4d-hang-detection: diagnose the ranks too
    message: str
    source: ErrorSource = ErrorSource.HANG

    def to_trigger(self) -> DetectedProblem:
        return DetectedProblem(self.source, self.message)


@dataclass(frozen=True)
class ExitHangVerdict:
    first_finished: str           # the first instance that exited 0
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
    timeout_seconds: int   # the collective timeout the watchdog line shows
    interval: int          # the suggested --job-hang-interval
    line: str              # the watchdog line it was read from
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
        isinstance(interval_override, bool) or not isinstance(interval_override, int)
        or (interval_override <= 0 and interval_override != SUSPENDED)
    ):
        raise ValueError(f"job_hang_interval: expected a positive integer of seconds or -1 to "
                         f"suspend, got {interval_override!r}")
    if config.job_execution_mode != ExecutionMode.SYNC or not config.enable_job_hang_detection:
        return None
    interval = config.job_hang_interval if interval_override is None else interval_override
    return None if interval == SUSPENDED else interval


def _latest_activity(running: Sequence[InstanceActivity], attempt_started_at: float) -> tuple[float, str | None]:
    latest, writer = attempt_started_at, None
    for inst in running:
        # Output older than the attempt belongs to an earlier attempt: count from the start.
        if inst.last_output_at is not None and inst.last_output_at > latest:
            latest, writer = inst.last_output_at, inst.name
    return latest, writer


def _running(instances: Sequence[InstanceActivity]) -> list[InstanceActivity]:
    return [i for i in instances if i.running]


def check_hang(
    config: FaultToleranceConfig,
    interval_override: int | None,
    instances: Sequence[InstanceActivity],
    attempt_started_at: float,
    now: float,
) -> HangVerdict | None:
    """A hang when every running instance has been silent for at least the interval."""
    interval = effective_hang_interval(config, interval_override)
    start = _check_now("attempt_started_at", attempt_started_at)
    now = _check_now("now", now)
    running = _running(instances)
    if interval is None or not running:
        return None
    latest, writer = _latest_activity(running, start)
    silent = now - latest
    if silent < interval:
        return None
    n = len(running)
    everyone = {1: "the only running instance has", 2: "both running instances have"}.get(
        n, f"all {n} running instances have")
    if writer is None:
        last = f"none has written anything since the attempt started {silent:.0f} s ago"
    else:
        last = f"{writer} wrote last, {silent:.0f} s ago"
    return HangVerdict(
        silent_seconds=silent, interval=interval, last_writer=writer, last_output_at=latest,
        silent_instances=tuple(i.name for i in running),
        run_c4d=config.enable_c4d_hang_detection,
        message=_sentence(f"{everyone} been silent for {silent:.0f} s, at least the hang interval "
                          f"of {interval} s; {last}."),
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _first_success(instances: Sequence[InstanceActivity]) -> InstanceActivity | None:
    done = [i for i in instances if not i.running and i.exit_code == 0 and i.exited_at is not None]
    return min(done, key=lambda i: (i.exited_at, i.name), default=None)


def check_exit_hang(
    config: FaultToleranceConfig, instances: Sequence[InstanceActivity], now: float,
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
    waited = now - first.exited_at
    interval = config.job_exit_hang_interval
    if waited < interval:
        return None
    names = tuple(i.name for i in running)
    return ExitHangVerdict(
        first_finished=first.name, finished_at=first.exited_at, waited_seconds=waited,
        interval=interval, still_running=names,
        message=f"{first.name} finished {waited:.0f} s ago but {', '.join(names)} "
                f"{'is' if len(names) == 1 else 'are'} still running, longer than the exit hang "
                f"interval of {interval} s.",
    )


def next_check_at(
    config: FaultToleranceConfig,
    interval_override: int | None,
    instances: Sequence[InstanceActivity],
    attempt_started_at: float,
) -> float | None:
    """The earliest moment a hang or an exit hang could be found if nothing else happens;
    None when neither check has anything to watch. New output or exits move it later."""
    due: list[float] = []
    running = _running(instances)
    interval = effective_hang_interval(config, interval_override)
    start = _check_now("attempt_started_at", attempt_started_at)
    if interval is not None and running:
        due.append(_latest_activity(running, start)[0] + interval)
    if config.job_execution_mode == ExecutionMode.SYNC and config.enable_job_exit_hang_detection and running:
        first = _first_success(instances)
        if first is not None:
            due.append(first.exited_at + config.job_exit_hang_interval)
    return min(due, default=None)


def plan_hang_check(
    config: FaultToleranceConfig,
    interval_override: int | None,
    instances: Sequence[InstanceActivity],
    attempt_started_at: float,
    now: float,
) -> HangCheck:
    """Both checks at `now`, and when to check next."""
    return HangCheck(
        hang=check_hang(config, interval_override, instances, attempt_started_at, now),
        exit_hang=check_exit_hang(config, instances, now),
        next_check_at=next_check_at(config, interval_override, instances, attempt_started_at),
    )


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
    line = log_text[start: end if end >= 0 else len(log_text)].strip()
    interval = _interval_below(seconds)
    return Suggestion(
        timeout_seconds=seconds, interval=interval, line=line,
        message=f"The log shows an NCCL watchdog timeout of {seconds} s. Set "
                f"--job-hang-interval={interval} so that hangs are detected and stacks are taken "
                f"before the watchdog ends the processes.",
    )
