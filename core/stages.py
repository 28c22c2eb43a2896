"""An attempt's stages (queued, preparing, starting, running, stopping) from its
stamps, never running backwards.

The stamps come from different clocks and moments: running_at is the first
output an instance's shim saw (another node's clock, and a process can print
before the console stamps that its launch returned), the others are the
console's own. `monotonic` raises each present stamp to the latest one before
it (and `durations` the end to the last stamp), so every stage lasts zero or
more seconds; the console stores stamps through it (jobs.actions,
monitoring.tick) and the API computes durations from it, so rows stored before
this was enforced read right too. Pure."""

from __future__ import annotations

from datetime import datetime

STAGES = ("queued", "preparing", "starting", "running", "stopping")


def clamp(stamp: datetime, earliest: datetime | None = None, latest: datetime | None = None) -> datetime:
    """stamp, but not before earliest nor after latest (either may be None)."""
    if earliest is not None and stamp < earliest:
        stamp = earliest
    if latest is not None and stamp > latest:
        stamp = latest
    return stamp


def monotonic(stamps: dict[str, datetime | None]) -> dict[str, datetime | None]:
    """The stage stamps (keyed by STAGES; missing ones None), each raised to the
    latest present stamp before it."""
    out: dict[str, datetime | None] = {}
    floor = None
    for stage in STAGES:
        stamp = stamps.get(stage)
        if stamp is not None:
            stamp = floor = clamp(stamp, floor)
        out[stage] = stamp
    return out


def durations(stamps: dict[str, datetime | None], ended: datetime | None) -> dict[str, float | None]:
    """Seconds spent in each stage, None while it has not ended (or never began):
    queued until preparing, preparing until starting, starting until running,
    running until stopping (or the end), stopping until the end. Never negative."""
    m = monotonic(stamps)
    present = [t for t in m.values() if t is not None]
    if ended is not None and present:
        ended = max(ended, *present)

    def span(start, end):
        return round((end - start).total_seconds(), 3) if start and end else None

    return {
        "queued": span(m["queued"], m["preparing"]),
        "preparing": span(m["preparing"], m["starting"]),
        "starting": span(m["starting"], m["running"]),
        "running": span(m["running"], m["stopping"] or ended),
        "stopping": span(m["stopping"], ended),
    }
