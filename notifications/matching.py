"""Which event rules an event matches: plain functions, no Django."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase


def job_name_matches(pattern: str, job_name: str) -> bool:
    """An empty pattern means every job; otherwise an fnmatch glob (* ? [seq]),
    case-insensitive, over the whole display name."""
    if not pattern:
        return True
    return fnmatchcase((job_name or "").lower(), pattern.strip().lower())


def rule_matches(event_types, pattern: str, event_type: str, job_name: str) -> bool:
    return event_type in set(event_types or ()) and job_name_matches(pattern, job_name)


@dataclass(frozen=True)
class PastEvent:
    ref: int  # the event's id, shown back unchanged
    event_type: str
    job_name: str


def backtest_rule(events: Iterable[PastEvent], event_types, pattern: str) -> list[PastEvent]:
    """The past events a proposed rule (its event types and job pattern) would have
    matched, in the order given: the very test the notifier applies to each new event."""
    types = set(event_types or ())
    return [e for e in events if rule_matches(types, pattern, e.event_type, e.job_name)]
