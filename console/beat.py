"""The beat's schedule store, written for the console's eyes only.

Celery's PersistentScheduler opens its shelve with the default mode, so under the usual
022 umask `var/celerybeat-schedule*` came out 0644 next to a data dir whose every other
file is 0600 (console/datadir.py), and a job on this machine could read what the console
schedules and when. This scheduler creates the files 0600 and makes those of an existing
install 0600 at start; settings.CELERY_BEAT_SCHEDULER names it, so both the Procfile's
embedded beat (`worker --beat`) and deploy's vigil-beat unit use it without a flag.
"""

from __future__ import annotations

import dbm
import shelve
from typing import Any

from celery.beat import PersistentScheduler

from .datadir import secure_beat_schedule


class _OwnerOnlyShelve:
    """What PersistentScheduler calls `persistence`: shelve.open, with mode 0600 given to dbm."""

    @staticmethod
    def open(filename: str, flag: Any = "c", protocol: int | None = None, writeback: bool = False) -> shelve.Shelf:
        store: Any = dbm.open(filename, flag, 0o600)  # shelve.open does the same, with mode 0666
        return shelve.Shelf(store, protocol, writeback)


class OwnerOnlyScheduler(PersistentScheduler):
    persistence = _OwnerOnlyShelve

    def setup_schedule(self) -> None:
        secure_beat_schedule(self.schedule_filename, self.known_suffixes)
        super().setup_schedule()
        # dbm.dumb writes its .dir again at every sync (with the mode above); this covers the
        # backends that create a file only at the first write.
        secure_beat_schedule(self.schedule_filename, self.known_suffixes)
