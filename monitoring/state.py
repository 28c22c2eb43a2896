"""The monitor's small memory of one job (`Job.monitor_state`): when each periodic
check last ran, the watchdog hint already given, the C4D counts of the current
attempt. One load, one save; the save is a compare-and-set on
`Job.monitor_state_version`, so when two workers tick the same job (a lost Redis
lock) only one of them writes, and the other skips the periodic check it claimed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from django.db import connection
from django.db.models import F

from jobs.models import Job
from monitoring import bulk


@dataclass
class MonitorState:
    c4d_at: float = 0.0  # when C4D last classified the ranks (epoch seconds)
    c4d: dict[str, Any] | None = None  # core.c4d.C4DState of c4d_attempt, as a dict
    c4d_attempt: int | None = None
    log_scan_at: float | None = None  # when the logs were last scanned for watchdog hints
    watchdog_suggested: int | None = None  # the hang interval a watchdog hint suggested
    stragglers_at: float = 0.0  # when the straggler check last ran
    # When the logs of progress_scan_attempt were last read for a first step line
    # (checks.first_progress_of): logs not written since hold none.
    progress_scan_at: float | None = None
    progress_scan_attempt: int | None = None
    # The Job.monitor_state_version this state was read at; not stored in the blob.
    version: int = field(default=0, compare=False)

    @classmethod
    def load(cls, job: Job) -> MonitorState:
        """The state as of the job row the caller holds (unknown keys are dropped)."""
        raw = job.monitor_state or {}
        known = {f.name for f in fields(cls)} - {"version"}
        return cls(**{k: v for k, v in raw.items() if k in known}, version=job.monitor_state_version)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["version"]
        return data

    def save(self, job: Job) -> bool:
        """Write this state if nobody wrote since it was loaded; True if this call did.
        The job object follows, so the next load in this tick sees what was written."""
        data = self.to_dict()
        written = Job.objects.filter(pk=job.pk, monitor_state_version=self.version).update(
            monitor_state=data, monitor_state_version=F("monitor_state_version") + 1
        )
        if written:
            self.version += 1
            job.monitor_state, job.monitor_state_version = data, self.version
        return bool(written)

    @staticmethod
    def save_many(pairs: Sequence[tuple[MonitorState, Job]]) -> set[int]:
        """Each state's save (the same compare-and-set on the version it was read at) in one
        statement, for a sweep's chunk: one commit instead of one per job (on PostgreSQL
        each was a commit waited for; profiled, half of a first round's time). Returns the
        ids of the jobs written (RETURNING: the rows this statement won); those job
        objects follow, as save's do."""
        if not pairs:
            return set()
        state_field = Job._meta.get_field("monitor_state")
        data = [state.to_dict() for state, _ in pairs]
        q = connection.ops.quote_name
        won = bulk.update_jobs(
            "monitor_state",
            [(job.pk, state_field.get_db_prep_save(blob, connection)) for (_, job), blob in zip(pairs, data)],
            ("id", "monitor_state_version"),
            [(job.pk, state.version) for state, job in pairs],
            also=f"{q('monitor_state_version')} = {q('monitor_state_version')} + 1",
            returning=True,
        )
        assert isinstance(won, set)
        for (state, job), blob in zip(pairs, data):
            if job.pk in won:
                state.version += 1
                job.monitor_state, job.monitor_state_version = blob, state.version
        return won
