"""The Celery tasks of notifications, where Celery's autodiscovery looks for them.
They are defined in notifications.dispatch beside what they run (thin wrappers),
so that queueing one there needs no import back into this module."""

from __future__ import annotations

from .dispatch import deliver, sweep_deliveries

__all__ = ["deliver", "sweep_deliveries"]
