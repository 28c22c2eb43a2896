"""Which event rules an event matches: plain functions, no Django."""

from __future__ import annotations

from fnmatch import fnmatchcase


def job_name_matches(pattern: str, job_name: str) -> bool:
    """An empty pattern means every job; otherwise an fnmatch glob (* ? [seq]),
    case-insensitive, over the whole display name."""
    if not pattern:
        return True
    return fnmatchcase((job_name or "").lower(), pattern.strip().lower())


def rule_matches(event_types, pattern: str, event_type: str, job_name: str) -> bool:
    return event_type in set(event_types or ()) and job_name_matches(pattern, job_name)
