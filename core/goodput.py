"""The goodput ledger (SPEC 9): where a job's wall-clock time went, per attempt
and in total. Pure: plain timestamps in (epoch seconds), figures out.

Per attempt:
  detection      from the failure that ended the previous attempt (its root
                 instance's exit, or the hang's last output) to the restart decision;
  teardown       stopping the previous attempt (its stopping_at to ended_at);
  scheduling     queued to handed to the backend (queued_at to starting_at);
  start-up       handed to the backend to the first output (starting_at to running_at);
  first progress handed to the backend to the first progress (an SDK report, else
                 the first output);
  productive     from first progress to the end (or now) of an attempt that made
                 progress; an attempt without progress produced nothing.
Per job: ETTR, the effective training time ratio = productive / wall-clock time
from the first attempt's queueing to the job's end (or now).

Each second of the wall window is productive at most once, so ETTR stays in [0, 1]
whatever the stamps say: productive time is clipped to the window (a node's clock
may be behind or ahead of the console's), and time two attempts both claim (an
attempt whose end was stamped late or never, a warm restart's next attempt
training before the old one's stop) is the later attempt's, the restart that
superseded the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttemptTimes:
    number: int
    queued_at: float
    starting_at: float | None = None
    running_at: float | None = None
    first_progress_at: float | None = None
    stopping_at: float | None = None
    ended_at: float | None = None
    made_progress: bool = False
    succeeded: bool = False
    # The failure that ended the previous attempt, and when it was decided on.
    failed_at: float | None = None
    decided_at: float | None = None


@dataclass(frozen=True)
class AttemptGoodput:
    number: int
    detection: float | None
    teardown: float | None
    scheduling: float | None
    startup: float | None
    first_progress: float | None
    productive: float

    def to_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class JobGoodput:
    attempts: tuple[AttemptGoodput, ...]
    wall_clock: float
    productive: float

    @property
    def ettr(self) -> float | None:
        return round(self.productive / self.wall_clock, 4) if self.wall_clock > 0 else None

    def to_dict(self) -> dict:
        return {
            "wall_clock": round(self.wall_clock, 3),
            "productive": round(self.productive, 3),
            "ettr": self.ettr,
            "attempts": [a.to_dict() for a in self.attempts],
        }


def _span(start: float | None, end: float | None) -> float | None:
    return max(0.0, end - start) if start is not None and end is not None else None


def _first(*stamps: float | None) -> float | None:
    """The first stamp given; 0.0 is a stamp, not a missing one."""
    return next((s for s in stamps if s is not None), None)


def _covered(intervals: list[tuple[float, float]]) -> float:
    """The time covered by the union of the intervals: overlaps count once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        start = max(start, reach)
        if end > start:  # an interval that ends before it starts (stamps out of order) covers nothing
            total += end - start
            reach = end
    return total


def ledger(attempts: list[AttemptTimes], job_ended_at: float | None, now: float) -> JobGoodput:
    attempts = sorted(attempts, key=lambda a: a.number)
    start = attempts[0].queued_at if attempts else now
    stop = now if job_ended_at is None else job_ended_at
    wall = max(0.0, stop - start)
    rows = []
    claimed: list[tuple[float, float]] = []  # productive time of later attempts, within the wall window
    for i in reversed(range(len(attempts))):  # later attempts first: they own the time they share
        a, previous = attempts[i], attempts[i - 1] if i else None
        progress_at = _first(a.first_progress_at, a.running_at)
        trained = (
            a.made_progress
            or a.first_progress_at is not None
            or a.succeeded
            or (a.ended_at is None and a.running_at is not None)
        )
        productive = 0.0
        if trained and progress_at is not None:
            ended = _first(a.stopping_at, a.ended_at)
            before = _covered(claimed)
            claimed.append((max(progress_at, start), stop if ended is None else min(ended, stop)))
            productive = max(0.0, _covered(claimed) - before)
        rows.append(
            AttemptGoodput(
                number=a.number,
                detection=_span(a.failed_at, a.decided_at),
                teardown=_span(previous.stopping_at, previous.ended_at) if previous else None,
                scheduling=_span(a.queued_at, a.starting_at),
                startup=_span(a.starting_at, a.running_at),
                first_progress=_span(a.starting_at, progress_at),
                productive=productive,
            )
        )
    rows.reverse()
    # min: the union's pieces, each rounded, may sum an ulp past the window they lie in
    return JobGoodput(tuple(rows), wall, min(wall, _covered(claimed)))
