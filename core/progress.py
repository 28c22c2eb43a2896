"""Training progress a person can see on the job page (issue 15): step N of M,
steps/s, the time since the last progress, and a small loss chart with restarts
marked at the step the new attempt resumed from. Pure: progress points (from
report_progress, else from the step lines core.stragglers already recognises)
in, figures and chart geometry out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from core.stragglers import parse_step_line

# "step 12/500", "Step 12 of 500", "iteration 12/500": the total when a line says it.
_TOTAL = re.compile(r"\b(?:step|iteration|iter)\b\s*+[=:#]?\s*+\d++\s*+(?:/|\bof\b)\s*+(?P<m>\d+)", re.IGNORECASE)
# "loss=0.43", "loss: 0.43", "loss 0.43", "Loss 4.3e-01" (not "val_loss", not "loss_scale").
_LOSS = re.compile(r"(?<![\w.])loss\s*+[=:]?\s*+(?P<v>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\b", re.IGNORECASE)
RATE_WINDOW = 60.0  # steps/s over the last minute of reports: recent speed, not the run's average


@dataclass(frozen=True)
class ProgressPoint:
    attempt: int
    at: float  # epoch seconds
    step: int
    loss: float | None = None


def point_from_sample(attempt: int, sample: Sequence) -> tuple[ProgressPoint, int | None]:
    """A point and the total (M, when reported) from one of Attempt.progress_samples:
    [t, step] or [t, step, loss] or [t, step, loss, total]."""
    loss = sample[2] if len(sample) > 2 else None
    total = sample[3] if len(sample) > 3 else None
    return (
        ProgressPoint(attempt, float(sample[0]), int(sample[1]), None if loss is None else float(loss)),
        None if total is None else int(total),
    )


def points_from_log(attempt: int, lines: Iterable[str | bytes]) -> tuple[list[ProgressPoint], int | None]:
    """Points from the timestamped step lines of a log (where the job has no SDK), the
    largest step per line kept once (ranks that print the same step are one point), and
    the last total a line named."""
    out: list[ProgressPoint] = []
    total = None
    for line in lines:
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        mark = parse_step_line(line)
        if mark is None:
            continue
        m = _TOTAL.search(line)
        if m:
            total = int(m["m"])
        if out and mark.step <= out[-1].step:
            continue
        loss = _LOSS.search(line)
        out.append(ProgressPoint(attempt, mark.at, mark.step, float(loss["v"]) if loss else None))
    return out, total


@dataclass(frozen=True)
class ProgressSummary:
    step: int
    total: int | None
    steps_per_s: float | None
    since_last: float
    last_at: float
    attempt: int


def summarize(
    points: Sequence[ProgressPoint], now: float, total: int | None = None, window: float = RATE_WINDOW
) -> ProgressSummary | None:
    """Where training is: the newest point's step, the rate over the last `window`
    seconds of the newest attempt (a restart's rewind is not negative speed), and how
    long ago the newest point was."""
    if not points:
        return None
    last = max(points, key=lambda p: (p.at, p.step))
    mine = sorted((p for p in points if p.attempt == last.attempt and last.at - p.at <= window), key=lambda p: p.at)
    rate = None
    if len(mine) >= 2 and mine[-1].at > mine[0].at:
        rate = round((mine[-1].step - mine[0].step) / (mine[-1].at - mine[0].at), 3)
    return ProgressSummary(last.step, total, rate, max(0.0, now - last.at), last.at, last.attempt)


@dataclass(frozen=True)
class RestartMark:
    new_attempt: int
    cause: str
    failed_at_step: int | None = None  # the step the SDK had reported when it failed


@dataclass(frozen=True)
class ChartMarker:
    x: float
    step: int
    cause: str
    failed_at_step: int | None

    @property
    def steps_lost(self) -> int | None:
        """Steps done again: from the step resumed from to the step it had reached."""
        return max(0, self.failed_at_step - self.step) if self.failed_at_step is not None else None


@dataclass(frozen=True)
class LossChart:
    lines: tuple[str, ...]  # SVG polyline points ("x,y x,y ..."), one line per attempt
    markers: tuple[ChartMarker, ...]
    min_loss: float
    max_loss: float
    first_step: int
    last_step: int


def loss_chart(
    points: Sequence[ProgressPoint], restarts: Sequence[RestartMark], width: float, height: float
) -> LossChart | None:
    """Loss against step, the x axis from the first to the last step seen, the y axis
    from the smallest to the largest loss (top is the largest). A restart is marked at
    the first step its new attempt reported, the step it resumed from."""
    with_loss = sorted((p for p in points if p.loss is not None), key=lambda p: (p.attempt, p.at))
    if len(with_loss) < 2:
        return None
    steps = [p.step for p in points]
    lo_s, hi_s = min(steps), max(steps)
    lo_l, hi_l = (
        min(p.loss for p in with_loss if p.loss is not None),
        max(p.loss for p in with_loss if p.loss is not None),
    )

    def x(step: int) -> float:
        return round(width * (step - lo_s) / (hi_s - lo_s), 2) if hi_s > lo_s else 0.0

    def y(loss: float) -> float:
        return round(height * (hi_l - loss) / (hi_l - lo_l), 2) if hi_l > lo_l else round(height / 2, 2)

    # One line per attempt: a restart rewinds to its checkpoint, and a line drawn back
    # across the chart would hide the steps done twice.
    by_attempt: dict[int, list[str]] = {}
    for p in with_loss:
        if p.loss is not None:
            by_attempt.setdefault(p.attempt, []).append(f"{x(p.step)},{y(p.loss)}")
    first_of: dict[int, int] = {}
    for p in sorted(points, key=lambda p: p.at):
        first_of.setdefault(p.attempt, p.step)
    markers = tuple(
        ChartMarker(x(first_of[r.new_attempt]), first_of[r.new_attempt], r.cause, r.failed_at_step)
        for r in restarts
        if r.new_attempt in first_of
    )
    return LossChart(tuple(" ".join(v) for _, v in sorted(by_attempt.items())), markers, lo_l, hi_l, lo_s, hi_s)


SPARK_POINTS = 32  # a job-list row draws at most this many points, whatever the job reported


@dataclass(frozen=True)
class Sparkline:
    points: str  # SVG polyline points, oldest report left
    first_loss: float
    last_loss: float
    step: int  # the newest report's step
    total: int | None
    trend: str  # "falling", "rising" or "flat": said in words, not by the line's slope alone

    @property
    def words(self) -> str:
        of = f" of {self.total}" if self.total else ""
        return f"Loss {self.trend} from {self.first_loss:.3g} to {self.last_loss:.3g}, step {self.step}{of}"


def sparkline(
    points: Sequence[ProgressPoint],
    width: float,
    height: float,
    total: int | None = None,
    max_points: int = SPARK_POINTS,
) -> Sparkline | None:
    """Loss in report order (a restart's rewind is just the next point), thinned to
    `max_points` evenly spread ones, the newest always kept; the trend compares the
    first and the last loss (within 2% of the larger is flat)."""
    with_loss = sorted((p for p in points if p.loss is not None), key=lambda p: (p.at, p.step))
    if len(with_loss) < 2:
        return None
    n = len(with_loss)
    if n > max_points:
        with_loss = [with_loss[round(i * (n - 1) / (max_points - 1))] for i in range(max_points)]
    losses = [p.loss for p in with_loss if p.loss is not None]
    lo, hi = min(losses), max(losses)
    last_x = len(losses) - 1

    def y(loss: float) -> float:
        return round(height * (hi - loss) / (hi - lo), 2) if hi > lo else round(height / 2, 2)

    line = " ".join(f"{round(width * i / last_x, 2)},{y(v)}" for i, v in enumerate(losses))
    first, last = losses[0], losses[-1]
    if abs(last - first) <= 0.02 * max(abs(first), abs(last)):
        trend = "flat"
    else:
        trend = "falling" if last < first else "rising"
    newest = max(points, key=lambda p: (p.at, p.step))
    return Sparkline(line, first, last, newest.step, total, trend)
