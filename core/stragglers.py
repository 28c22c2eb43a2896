"""Stragglers without code changes: per-rank step times read from the instances' logs.

Pure: log lines in, verdicts out. A step line is a line that starts with a
timestamp and names a step:

    2026-11-29T23:59:01.123456Z step=12 rank=1 loss=0.4312 step_time=0.051
    [2026-11-29 23:59:01,123] INFO Step 12/500 loss 0.43
    2026-11-29 23:59:01 iteration 12 lr 0.1

A rank's step time is the time between its consecutive step lines (divided by the
step difference when it logs every k steps). When every rank's lines also carry
`step_time=<seconds>`, that figure is used instead: in synchronous data-parallel
training every rank's wall-clock step is the slowest rank's, so only the rank's
own measure shows who is slow; timestamps suffice where ranks advance on their
own (asynchronous jobs, parameter servers, independent workers).

A straggler's median step time over the recent window is more than `ratio` times
the median of its peers' medians, and its steps are slow in at least
`consistency` of that window; it needs `min_steps` step times to be judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from statistics import median
from typing import Hashable, Iterable, Mapping

from core.flags import C4DLogLevel

_TIMESTAMP = re.compile(
    r"^\s*+(?:\[rank\d+\]:\s*+)?\[?"
    r"(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,9}))?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)?"
)
_STEP = re.compile(r"\b(?:step|iteration|iter)\b\s*+[=:#]?\s*+(?P<n>\d+)", re.IGNORECASE)
_STEP_TIME = re.compile(r"\bstep_time\s*+[=:]\s*+(?P<s>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


@dataclass(frozen=True)
class StepMark:
    step: int
    at: float  # epoch seconds (naive timestamps are read as UTC)
    step_time: float | None = None


@dataclass(frozen=True)
class StragglerVerdict:
    rank: Hashable  # the key the logs were given under (a rank or an instance)
    severity: C4DLogLevel
    median_s: float
    peers_median_s: float
    ratio: float
    samples: int
    slow_samples: int
    source: str  # "step_time" or "timestamps"
    message: str
    evidence: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "severity": str(self.severity),
            "median_s": self.median_s,
            "peers_median_s": self.peers_median_s,
            "ratio": self.ratio,
            "samples": self.samples,
            "slow_samples": self.slow_samples,
            "source": self.source,
            "message": self.message,
        }


def parse_step_line(line: str) -> StepMark | None:
    """A StepMark for a timestamped line naming a step, else None."""
    ts = _TIMESTAMP.match(line)
    if not ts:
        return None
    step = _STEP.search(line, ts.end())
    if not step:
        return None
    frac = (ts["frac"] or "0")[:6].ljust(6, "0")
    tz = ts["tz"] or "Z"
    tz = "+00:00" if tz == "Z" else (tz if ":" in tz else f"{tz[:3]}:{tz[3:]}")
    try:
        at = datetime.fromisoformat(f"{ts['date']}T{ts['time']}.{frac}{tz}")
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    st = _STEP_TIME.search(line, step.end())
    return StepMark(int(step["n"]), at.timestamp(), float(st["s"]) if st else None)


def step_marks(lines: Iterable[str | bytes]) -> list[StepMark]:
    marks = []
    for line in lines:
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        mark = parse_step_line(line)
        if mark is not None:
            marks.append(mark)
    return marks


def step_times(marks: list[StepMark], use_step_time: bool) -> list[float]:
    """Seconds per step, oldest first. A step number that goes back (a restart) starts over;
    a repeated step number (several lines per step) counts once."""
    if use_step_time:
        seen: set[int] = set()
        out = []
        for m in marks:
            if m.step_time is not None and m.step not in seen:
                seen.add(m.step)
                out.append(m.step_time)
        return out
    out = []
    prev: StepMark | None = None
    for m in marks:
        if prev is not None and m.step == prev.step:
            continue
        if prev is not None and m.step > prev.step and m.at >= prev.at:
            out.append((m.at - prev.at) / (m.step - prev.step))
        prev = m
    return out


def find_stragglers(
    logs: Mapping[Hashable, Iterable[str | bytes]],
    window: int = 20,
    ratio: float = 1.5,
    warn_ratio: float = 3.0,
    min_steps: int = 5,
    consistency: float = 0.6,
) -> list[StragglerVerdict]:
    """Ranks whose recent step times are consistently well above their peers'."""
    if ratio <= 1:
        raise ValueError(f"ratio: expected a number above 1, got {ratio!r}")
    if min_steps < 1:
        raise ValueError(f"min_steps: expected a positive integer, got {min_steps!r}")
    marks = {rank: step_marks(lines) for rank, lines in logs.items()}
    marks = {rank: m for rank, m in marks.items() if m}
    use_step_time = bool(marks) and all(any(x.step_time is not None for x in m) for m in marks.values())
    source = "step_time" if use_step_time else "timestamps"
    recent = {rank: step_times(m, use_step_time)[-window:] for rank, m in marks.items()}
    judged = {rank: t for rank, t in recent.items() if len(t) >= min_steps}
    if len(judged) < 2:
        return []
    medians = {rank: median(t) for rank, t in judged.items()}

    verdicts = []
    for rank, times in judged.items():
        peers = median(v for r, v in medians.items() if r != rank)
        mine = medians[rank]
        if peers <= 0 or mine <= ratio * peers:
            continue
        slow = sum(1 for t in times if t > ratio * peers)
        if slow < consistency * len(times):
            continue
        r = mine / peers
        who = f"Rank {rank}" if isinstance(rank, int) else str(rank)
        verdicts.append(
            StragglerVerdict(
                rank=rank,
                severity=C4DLogLevel.WARNING if r >= warn_ratio else C4DLogLevel.INFO,
                median_s=round(mine, 6),
                peers_median_s=round(peers, 6),
                ratio=round(r, 2),
                samples=len(times),
                slow_samples=slow,
                source=source,
                message=(
                    f"{who} is a straggler: its median step takes {mine:.3f} s against "
                    f"{peers:.3f} s for its peers ({r:.1f}x, slow in {slow} of its last "
                    f"{len(times)} steps, from {source.replace('_', ' ')})."
                ),
                evidence={"peers": sorted(map(str, (p for p in judged if p != rank)))},
            )
        )
    verdicts.sort(key=lambda v: -v.ratio)
    return verdicts
