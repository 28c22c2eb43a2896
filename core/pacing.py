"""How far the monitor stretches a steady job's quiet period when its sweep falls behind
(issue 17). Pure: the sweep (monitoring.tasks) measures, this decides.

A steady Running job is ticked at the earliest of its deadlines (hang, exit hang, the
periodic checks) and at most a quiet period after its last tick; that last tick only
looks for an exit nobody announced. When a shard has more jobs than its workers can
tick at that pace, every scheduled check runs late, a round outlasts the quiet period,
every job is due again at every round, and the shard never comes back: each round costs
a full tick of every job, hang deadlines included are late by a round (measured at
30,000 jobs on 2 cores: 33 s rounds for good). Stretching the quiet period sheds the
one kind of tick that is only a safety net, so the deadlines that matter keep their
time, and it shrinks back once the shard keeps up. What it costs is said where the
setting is: an unannounced exit may be found up to the stretched period later.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

GROWTH_FLOOR = 1.25  # a late shard's stretch grows at least this much a sweep
DECAY = 0.98  # a shard well on time gives back 2 % a sweep: 1/2 in ~35 sweeps (~17 s at 0.5 s)
PROBE = 0.995  # a shard just on time gives back 0.5 % a sweep: 1/2 in ~140 sweeps (~70 s)


def lateness(due_at: Iterable[float | None], now: float) -> float:
    """How late the middle of a sweep's scheduled checks is (seconds; 0 if it has none):
    the jobs it ticks now that were due at those times. Behind, the whole list is a
    backlog; on time, it is what fell due since the last sweep. The median, not the
    latest, so that one job whose tick keeps failing (due, and older, every sweep) does
    not hold its shard's period stretched. A job with no time (new, or woken by an
    event) says nothing about the pace."""
    late = [now - at for at in due_at if at is not None]
    return statistics.median(late) if late else 0.0


def allowed_lateness(cadence: float) -> float:
    """How late the middle of a sweep's due checks may be before its shard counts as
    behind: one sweep interval. On time, what fell due since the last sweep is half an
    interval late in the middle; a round of twice the interval is one. The pace is set
    for the hang deadlines (flagged within about a sweep, the point of the cadence),
    and what gives way for them is the quiet tick. The median already ignores a busy
    moment of a few jobs."""
    return cadence


def next_stretch(stretch: float, late: float, *, quiet: float, cadence: float, ceiling: float) -> float:
    """The factor on the quiet period (`quiet`, as configured) after a sweep that found
    its checks `late` seconds late. Behind: grow at once in proportion to how far (a
    round 30 s late on a 10 s period needs about 4x, not 1.25x a sweep for minutes), at
    most to `ceiling`. On time: shrink, slowly (a shorter period only shows its cost a
    period later), and more slowly still just on time, so that a stretch grown in a
    burst (every job new after a restart of the console) comes back down to what the
    shard needs instead of staying where the burst left it. Never under 1 (the
    configured period)."""
    allowed = allowed_lateness(cadence)
    ceiling = max(1.0, ceiling)
    if late > allowed:
        # In periods of the quiet period as now stretched: 30 s late on a 30 s period is 2x.
        grown = stretch * max(GROWTH_FLOOR, 1.0 + late / max(quiet * stretch, cadence))
        return min(ceiling, grown)
    return min(ceiling, max(1.0, stretch * (DECAY if late < allowed / 2 else PROBE)))
