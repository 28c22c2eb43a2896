"""An event rule tried on the workspace's past events before it is kept (issue 26):
which of them it would have matched, by the notifier's own test
(notifications.matching), and so who would have been told. Reads only."""

from __future__ import annotations

from django.urls import reverse

from jobs.models import NOTIFIABLE_EVENT_TYPES, JobEvent, Workspace

from .matching import PastEvent, backtest_rule
from .models import Delivery

# The newest events are the ones a person can judge a rule by; an older past is not read.
MAX_EVENTS = 500


def rule_backtest(workspace: Workspace, cleaned: dict) -> dict:
    """`cleaned` is EventRuleForm's cleaned_data (the save's validation)."""
    events = list(
        JobEvent.objects.filter(job__workspace=workspace, type__in=[t.value for t in NOTIFIABLE_EVENT_TYPES])
        .select_related("job")
        .order_by("-created_at", "-id")[:MAX_EVENTS]
    )
    by_id = {e.pk: e for e in events}
    matched = backtest_rule(
        (PastEvent(e.pk, e.type, e.job.display_name) for e in events),
        cleaned.get("event_types") or (),
        cleaned.get("job_pattern") or "",
    )
    channels = sorted(cleaned.get("channels") or [], key=lambda c: (c.name, c.pk))
    told = set(
        Delivery.objects.filter(event_id__in=[m.ref for m in matched], channel__in=channels).values_list(
            "event_id", "channel_id"
        )
    )
    labels = dict((t.value, t.label) for t in NOTIFIABLE_EVENT_TYPES)
    rows: list[dict] = []
    for m in matched:
        e = by_id[m.ref]
        rows.append(
            {
                "event": e.pk,
                "type": e.type,
                "type_label": labels.get(e.type, e.type),
                "job": e.job_id,
                "job_name": e.job.display_name,
                "job_url": reverse("pages:job-detail", args=[workspace.slug, e.job_id]),
                "created_at": e.created_at.isoformat(),
                "message": e.message[:300],
                "channels": [c.name for c in channels],
                "already_sent_to": [c.name for c in channels if (e.pk, c.pk) in told],
            }
        )
    new = sum(len(channels) - len(r["already_sent_to"]) for r in rows)
    jobs = len({r["job"] for r in rows})
    names = ", ".join(c.name for c in channels) or "no channel"
    already = len(rows) * len(channels) - new
    sentence = (
        f"Would have matched {len(rows)} of the last {len(events)} events ({jobs} job{'' if jobs == 1 else 's'}): "
        f"{new} message{'' if new == 1 else 's'} to {names}"
        + (f", besides {already} that other rules sent there." if already else ".")
    )
    return {
        "summary": {
            "sentence": sentence,
            "events_considered": len(events),
            "matched": len(rows),
            "jobs": jobs,
            "new_messages": new,
        },
        "events": rows,
    }
