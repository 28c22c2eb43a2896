"""Lifetimes a person may choose for a personal API token (the tokens page).

A short fixed list rather than a free date: a token that lives for years by a
typo is the thing to avoid, and "never" stays an explicit, visible choice."""

from __future__ import annotations

from datetime import datetime, timedelta

# (form value, label); the value is the lifetime in days, "never" for none
EXPIRY_CHOICES: tuple[tuple[str, str], ...] = (
    ("7", "7 days"),
    ("30", "30 days"),
    ("90", "90 days"),
    ("never", "Never"),
)
DEFAULT_EXPIRY = "30"


def expiry_from(choice: str, now: datetime) -> datetime | None:
    """When a token made at `now` with `choice` stops working (None: never).
    ValueError for anything not in EXPIRY_CHOICES."""
    if choice not in dict(EXPIRY_CHOICES):
        raise ValueError(f"choose one of {', '.join(label for _, label in EXPIRY_CHOICES)}")
    if choice == "never":
        return None
    return now + timedelta(days=int(choice))
