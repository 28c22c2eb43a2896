"""The job page's "Replica groups" part (issue 30): the quorums of the current attempt as
the monitor recorded them from the job's Lighthouse (monitoring/quorum.py), oldest first."""

from __future__ import annotations

from datetime import datetime, timezone

from core.lighthouse import QUORUM_EVENT

from .models import EventType, Job

MAX_ROWS = 50


def quorum_panel(job: Job, attempt_number: int | None) -> dict | None:
    """None for a job without replica groups; else its groups and its quorums over time."""
    if not (job.fault_tolerance and job.ft.replica_groups >= 2):
        return None
    rows = []
    if attempt_number is not None:
        events = job.events.filter(type=EventType.STATUS, attempt=attempt_number).order_by("-id")[: MAX_ROWS * 4]
        for e in reversed(list(events)):
            p = e.payload or {}
            if p.get("kind") != QUORUM_EVENT:
                continue
            steps = p.get("steps") or {}
            rows.append(
                {
                    "at": datetime.fromtimestamp(p["at"], timezone.utc) if p.get("at") else e.created_at,
                    "quorum_id": p.get("quorum_id"),
                    "groups": p.get("groups") or [],
                    "steps": [(g, steps.get(str(g))) for g in p.get("groups") or []],
                    "recovering": p.get("recovering") or [],
                }
            )
    return {"groups": job.ft.replica_groups, "rows": rows[-MAX_ROWS:], "latest": rows[-1] if rows else None}
