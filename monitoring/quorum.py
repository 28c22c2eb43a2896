"""The quorum of a job's replica groups (issue 30), read from its Lighthouse on each tick.

Each new quorum (a new quorum id from the Lighthouse) is a status event of the job with the
groups in it, each group's step and which groups are recovering (restarted, or alive but
not yet in the quorum); the job page's "Replica groups" part lists them. A group restarted
more than settings.VIGIL_GROUP_REJOIN_SECONDS ago (default 300) that is still not in the
quorum fails the job, with that reason (core.lighthouse.rejoin_overdue decides).

The Lighthouse's address is the backend's own (the attempt's handle), on this machine's
backend host: nothing a user typed is fetched.
"""

from __future__ import annotations

import logging
import urllib.request
from datetime import datetime

from django.conf import settings

from core.lighthouse import QUORUM_EVENT, LighthouseStatus, parse_status, rejoin_overdue
from core.replicas import GroupLayout, kept_training
from jobs import actions
from jobs.models import Attempt, EventType, Instance, Job, JobStatus, RestartKind, RestartRecord

log = logging.getLogger(__name__)

FETCH_TIMEOUT_SECONDS = 1.0
DEFAULT_REJOIN_SECONDS = 300.0


def rejoin_limit() -> float:
    return float(getattr(settings, "VIGIL_GROUP_REJOIN_SECONDS", DEFAULT_REJOIN_SECONDS))


def fetch_status(url: str) -> LighthouseStatus | None:
    try:
        with urllib.request.urlopen(f"{url}/status", timeout=FETCH_TIMEOUT_SECONDS) as answer:
            return parse_status(answer.read(1 << 20))
    except (OSError, ValueError) as exc:
        log.debug("lighthouse %s: %s", url, exc)
        return None


def _groups_of_records(job: Job, attempt: Attempt, layout: GroupLayout) -> dict[int, float]:
    """Group -> the time of its last restart within this attempt."""
    ranks = dict(Instance.objects.filter(attempt=attempt).values_list("name", "rank"))
    out: dict[int, float] = {}
    for name, at in RestartRecord.objects.filter(
        job=job, kind=RestartKind.INSTANCE, attempt=attempt.number
    ).values_list("instance_name", "restart_time"):
        if name in ranks:
            group = layout.group_of(ranks[name])
            out[group] = max(out.get(group, 0.0), at.timestamp())
    return out


def describe(status: LighthouseStatus, groups: int, recovering: list[int]) -> str:
    members = ", ".join(f"{g} at step {status.step_of(g)}" for g in status.groups) or "none"
    text = f"Quorum {status.quorum_id}: {len(status.groups)} of {groups} groups training ({members})"
    if recovering:
        text += f"; recovering: group{'s' if len(recovering) > 1 else ''} {', '.join(map(str, recovering))}"
    return text + "."


def observe(job: Job, attempt: Attempt, now: datetime) -> tuple[str, str] | None:
    """Record a new quorum; fail the job when a restarted group did not rejoin in time.
    Returns ("fail_job", reason) when it failed the job, else None."""
    lighthouse = (attempt.backend_handle or {}).get("lighthouse") or {}
    groups = job.ft.replica_groups
    if not lighthouse.get("url") or groups < 2:
        return None
    count = Instance.objects.filter(attempt=attempt).count()
    if count < groups or count % groups:
        return None
    status = fetch_status(lighthouse["url"])
    if status is None or status.quorum_id is None:
        return None
    layout = GroupLayout(groups, count)
    restarted = _groups_of_records(job, attempt, layout)
    recovering = sorted(set(status.recovering()) | {g for g in restarted if g not in status.groups})
    payload = {"kind": QUORUM_EVENT, **status.to_dict(), "recovering": recovering, "at": now.timestamp()}
    actions.record_event(
        job,
        EventType.STATUS,
        describe(status, groups, recovering),
        attempt=attempt.number,
        key=f"quorum:{job.pk}:{attempt.number}:{status.quorum_id}",
        payload=payload,
    )
    overdue = rejoin_overdue(restarted, status, now.timestamp(), rejoin_limit())
    if not overdue or job.status != JobStatus.RUNNING:
        return None
    group, seconds = overdue[0]
    from monitoring.restarts import fail_and_stop  # the restarts module imports this one's callers

    reason = (
        f"Group {group} did not rejoin the quorum within {rejoin_limit():g} s of its restart "
        f"({seconds:.0f} s ago; quorum {status.quorum_id} has "
        f"{kept_training(groups, group) if len(status.groups) == groups - 1 else describe(status, groups, [])}), "
        f"so the job fails: read group {group}'s log for why it is not training."
    )
    fail_and_stop(
        job,
        attempt,
        reason,
        key=f"group-never-rejoined:{job.pk}:{attempt.number}:{group}",
        payload={"group": group, "seconds_since_restart": round(seconds, 1), "quorum": status.to_dict()},
    )
    return "fail_job", reason
