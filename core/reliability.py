"""A workspace's reliability over a period (issue 15): restarts over time by
cause, counts by node and by error code, and bar geometry for inline SVG charts.
Pure: restart observations (epoch seconds) in, figures out. Goodput and node
standings are core.goodput's and core.reputation's; nothing here recomputes them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

# The period selector's choices: (span, bucket). Hours for a day, days beyond, so a
# chart has 24-30 bars, each still wide enough to read on a phone.
PERIODS: dict[str, tuple[int, int]] = {
    "24h": (24 * 3600, 3600),
    "7d": (7 * 86400, 86400),
    "30d": (30 * 86400, 86400),
}
DEFAULT_PERIOD = "7d"
UNKNOWN = "unknown"


def parse_period(value: str | None) -> tuple[str, str | None]:
    """The period key for a query value, and a message when the value was refused
    (the page falls back to the default and says so, rather than a bare 400)."""
    if value is None or value == "":
        return DEFAULT_PERIOD, None
    if value in PERIODS:
        return value, None
    accepted = ", ".join(PERIODS)
    return DEFAULT_PERIOD, f"period {value[:20]!r} is not one of {accepted}; showing {DEFAULT_PERIOD}."


@dataclass(frozen=True)
class RestartSeen:
    record_id: int
    job_id: int
    at: float
    error_code: str = ""
    family: str = ""
    node: str = ""

    @property
    def cause(self) -> str:
        """The cause a chart groups by: the failure family when the verdict had one
        (NCCL, OOM, ...), else the error code, so exit statuses still group."""
        return self.family or self.error_code or UNKNOWN


@dataclass(frozen=True)
class Bucket:
    start: float
    end: float
    by_cause: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_cause.values())


def in_period(restarts: list[RestartSeen], now: float, period: str) -> list[RestartSeen]:
    span, _ = PERIODS[period]
    return sorted((r for r in restarts if now - span < r.at <= now), key=lambda r: (r.at, r.record_id))


def buckets(restarts: list[RestartSeen], now: float, period: str) -> list[Bucket]:
    """Restarts in the period counted per bucket and cause, the oldest bucket first;
    the last bucket ends at now (buckets are aligned to now, not to the clock, so
    every bar covers a full bucket)."""
    span, size = PERIODS[period]
    count = span // size
    start = now - span
    per: list[Counter] = [Counter() for _ in range(count)]
    for r in in_period(restarts, now, period):
        i = min(count - 1, int((r.at - start) // size))
        per[i][r.cause] += 1
    return [Bucket(start + i * size, start + (i + 1) * size, dict(sorted(c.items()))) for i, c in enumerate(per)]


def count_by(restarts: list[RestartSeen], key: str) -> list[tuple[str, int]]:
    """(value, count) of an attribute ("node", "error_code", "cause"), the most
    frequent first, ties by name so the order is stable between reloads."""
    counts = Counter((getattr(r, key) or UNKNOWN) for r in restarts)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    value: int


def bars(values: list[int], width: float, height: float, gap: float = 1.0) -> list[Bar]:
    """Vertical bars for an SVG of width x height: bar heights proportional to the
    largest value (a zero is a zero-height bar, so the axis stays honest)."""
    if not values:
        return []
    top = max(values) or 1
    step = width / len(values)
    w = max(step - gap, 1.0)
    out = []
    for i, v in enumerate(values):
        h = round(height * v / top, 2)
        out.append(Bar(round(i * step, 2), round(height - h, 2), round(w, 2), h, v))
    return out


@dataclass(frozen=True)
class Segment:
    x: float
    y: float
    width: float
    height: float
    cause: str
    count: int
    colour: int  # index into the page's palette: the cause's rank, modulo its size


def stacked_bars(
    buckets_: list[Bucket], causes: list[str], width: float, height: float, gap: float = 1.0, palette: int = 8
) -> list[list[Segment]]:
    """Per bucket, one segment per cause stacked from the bottom in `causes` order (the
    most frequent at the bottom, where lengths compare best), scaled to the fullest
    bucket; a cause's colour is its rank in `causes` (modulo the palette's size), the same in
    every bar and the legend."""
    if not buckets_:
        return []
    top = max(b.total for b in buckets_) or 1
    step = width / len(buckets_)
    w = round(max(step - gap, 1.0), 2)
    out = []
    for i, b in enumerate(buckets_):
        y = float(height)
        column = []
        for rank, cause in enumerate(causes):
            n = b.by_cause.get(cause, 0)
            if not n:
                continue
            h = height * n / top
            y -= h
            column.append(Segment(round(i * step, 2), round(y, 2), w, round(h, 2), cause, n, rank % palette))
        out.append(column)
    return out
