"""The backend contract: what runs a job's instances and how the console talks to it.

A backend launches one attempt of a job (one instance per role replica), reports
each instance's state, stops instances, restarts one instance, serves logs and
knows its nodes. Concrete backends live beside this module (local.py, memory.py,
later slurm.py) and are chosen by dotted path in settings.JOB_BACKENDS.

Handles are plain JSON-serialisable dicts so that they can be stored on the
Attempt row and used by any process (console, Celery worker) after a restart.
"""

from __future__ import annotations

import dataclasses
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum


# A name that becomes a file, a directory, a Slurm job name or a Redis key part.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class BackendError(Exception):
    """A backend could not do what was asked.

    `retryable` says whether trying again later may work (a node or service that
    is briefly unavailable) or not (a bad request, an unknown instance, a missing
    capability).
    """

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.retryable = retryable

    def __str__(self) -> str:
        kind = "retryable" if self.retryable else "permanent"
        return f"{self.message} ({kind})"


class LaunchInProgress(BackendError):
    """Another live process is launching this very attempt right now: leave the
    attempt to it (it stores the handle); asking again later is fine."""

    def __init__(self, message: str):
        super().__init__(message, retryable=True)


class InstanceState(StrEnum):
    PENDING = "pending"  # asked for, its process not started yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # exited with code 0
    FAILED = "failed"  # exited non-zero or by a signal
    STOPPED = "stopped"  # ended because someone asked (stop / stop_instance)
    LOST = "lost"  # the backend no longer knows what happened (reason says why)

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.STOPPED, InstanceState.LOST})


@dataclass(frozen=True)
class InstanceLaunch:
    """One replica of one role in an attempt: `worker-0` is role Worker, index 0."""

    name: str
    role: str
    index: int
    rank: int
    command: str
    env: dict = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptLaunch:
    """Everything a backend needs to start attempt `attempt` of a job.

    `env` is the user's env plus the console's VIGIL_* variables (console URL,
    job id, token). The backend adds the framework's variables per instance
    (see frameworks.py); those win over anything in `env`.
    """

    job_id: str
    attempt: int
    job_type: str
    instances: tuple[InstanceLaunch, ...]
    env: dict = field(default_factory=dict)
    workdir: str | None = None
    avoid_nodes: tuple[str, ...] = ()
    # The workspace's OS user ("" = the backend's default) and Slurm account ("" = the backend's).
    run_as: str = ""
    account: str = ""
    # Which workspace the job belongs to ("" = unknown, e.g. a spec stored before it was
    # kept): the local backend refuses to run two workspaces' jobs as one OS user at once.
    workspace: str = ""
    # Warm restarts (issue 19): keep a parked interpreter per instance for the next
    # attempt, with these modules imported. Backends without them start cold.
    warm: bool = False
    warm_modules: tuple[str, ...] = ()
    # Replica groups (issue 30, torchft): 0 = none; N >= 2 splits the instances into N groups
    # with a Lighthouse for the attempt. Backends without a Lighthouse refuse N >= 2.
    replica_groups: int = 0
    lighthouse_heartbeat_timeout_ms: int = 5000

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "AttemptLaunch":
        d = dict(d)
        d["instances"] = tuple(InstanceLaunch(**i) for i in d["instances"])
        d["avoid_nodes"] = tuple(d.get("avoid_nodes") or ())
        d["warm_modules"] = tuple(d.get("warm_modules") or ())
        return cls(**d)

    def check(self) -> None:
        """What every backend needs before it names files, directories and scheduler jobs
        after this launch: safe, unique names and a command per instance (BackendError
        names the field)."""
        if not SAFE_NAME.match(str(self.job_id)):
            raise BackendError(f"job_id: {self.job_id!r} must be letters, digits, '_', '.', '-'")
        if not isinstance(self.attempt, int) or self.attempt < 1:
            raise BackendError(f"attempt: {self.attempt!r} must be an integer >= 1")
        if not self.instances:
            raise BackendError("instances: at least one instance is needed")
        names = [i.name for i in self.instances]
        for n in names:
            if not SAFE_NAME.match(n):
                raise BackendError(f"instances.name: {n!r} must be letters, digits, '_', '.', '-'")
        if len(set(names)) != len(names):
            raise BackendError("instances.name: names must be unique")
        for i in self.instances:
            if not isinstance(i.command, str) or not i.command.strip():
                raise BackendError(f"instances.command: {i.name} has no command")


@dataclass(frozen=True)
class PolledInstance:
    """One instance as the backend sees it now (what poll returns; the stored row and its
    status are jobs.models.Instance and InstanceStatus). Times are epoch seconds or None."""

    name: str
    role: str
    index: int
    state: InstanceState
    exit_code: int | None = None  # None while running, or when ended by a signal
    signal: int | None = None  # the signal that ended the process, if any
    started_at: float | None = None
    exited_at: float | None = None
    last_output_at: float | None = None  # last write to stdout/stderr
    node: str = ""
    reason: str = ""  # the backend's own words: "OOMKilled", "shim lost", ...
    pid: int | None = None
    start: str = ""  # "warm" (a parked interpreter ran it) or "cold"; "" when the backend does not say
    start_reason: str = ""  # why it started cold when warm restarts are on


@dataclass(frozen=True)
class Node:
    name: str
    slots: int
    schedulable: bool = True
    reason: str = ""  # why it is unschedulable (isolation reason), or ""


def read_log_file(path: str | None, offset: int = 0, limit: int | None = None) -> bytes:
    """Bytes of a log file from `offset` (b"" when it does not exist yet)."""
    if offset < 0:
        raise BackendError(f"offset: {offset} must be >= 0")
    if limit is not None and limit < 0:
        raise BackendError(f"limit: {limit} must be >= 0 or None")
    if path is None:  # the backend has no file for this log (yet)
        return b""
    try:
        with open(path, "rb") as f:
            # Past the end there is nothing to read; seeking there can fail outright
            # (ext4 refuses offsets beyond its largest file: EINVAL).
            if offset >= os.fstat(f.fileno()).st_size:
                return b""
            f.seek(offset)
            return f.read() if limit is None else f.read(limit)
    except (FileNotFoundError, TypeError):
        return b""


def tail_log_file(path: str | None, nbytes: int) -> bytes:
    """The last `nbytes` bytes of a log file (b"" when it does not exist yet)."""
    if nbytes < 0:
        raise BackendError(f"nbytes: {nbytes} must be >= 0")
    if path is None:
        return b""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - nbytes))
            return f.read(nbytes)
    except (FileNotFoundError, TypeError):
        return b""


class Backend(ABC):
    """Base class of all backends. Subclasses implement the abstract methods.

    Capability flags say what the monitor may ask for beyond the basics.
    """

    can_dump_stacks: bool = False  # pids() returns local PIDs that py-spy can read
    can_isolate_nodes: bool = False  # isolate_node()/restore_node() work
    can_run_replica_groups: bool = False  # AttemptLaunch.replica_groups >= 2: a Lighthouse per attempt (issue 30)
    name: str = ""  # its key in settings.JOB_BACKENDS

    def __init__(self, name: str = "", **options):
        self.name = name
        self.options = options

    # -- attempts ---------------------------------------------------------
    @abstractmethod
    def launch(self, spec: AttemptLaunch) -> dict:
        """Start every instance of the attempt; return a JSON-serialisable handle."""

    def abandon_launch(self, job_id, attempt: int) -> None:
        """An attempt that may have been half-launched by a process that died is given up
        (the job was stopped or moved on): end whatever of it started. No-op by default."""

    @abstractmethod
    def poll(self, handle: dict) -> list[PolledInstance]:
        """The current status of every instance of the attempt."""

    @abstractmethod
    def stop(self, handle: dict, grace: float | None = None) -> None:
        """Stop every instance: SIGTERM (or equivalent), then kill after `grace` seconds."""

    @abstractmethod
    def stop_instance(self, handle: dict, name: str, grace: float | None = None) -> None:
        """Stop one instance as stop() does."""

    @abstractmethod
    def restart_instance(self, handle: dict, name: str) -> dict:
        """Start that instance afresh within the same attempt; return the (updated) handle."""

    # -- logs -------------------------------------------------------------
    @abstractmethod
    def read_log(self, handle: dict, name: str, offset: int = 0, limit: int | None = None) -> bytes:
        """Bytes of the instance's combined stdout/stderr log from `offset`."""

    @abstractmethod
    def tail_log(self, handle: dict, name: str, nbytes: int) -> bytes:
        """The last `nbytes` bytes of the instance's log (fewer if it is shorter)."""

    def log_path(self, handle: dict, name: str) -> str | None:
        """A local path of the log if there is one (for streaming), else None."""
        return None

    # -- nodes ------------------------------------------------------------
    @abstractmethod
    def list_nodes(self) -> list[Node]:
        """The nodes this backend can place instances on."""

    def isolate_node(self, name: str, reason: str) -> None:
        """Stop scheduling new instances on `name`."""
        raise BackendError(f"backend {self.name or type(self).__name__} cannot isolate nodes")

    def restore_node(self, name: str) -> None:
        """Make an isolated node schedulable again."""
        raise BackendError(f"backend {self.name or type(self).__name__} cannot isolate nodes")

    # -- diagnostics -------------------------------------------------------
    def pids(self, handle: dict, name: str) -> list[int]:
        """PIDs of the instance's processes on this machine (for stack dumps)."""
        raise BackendError(f"backend {self.name or type(self).__name__} cannot list local PIDs")

    def flight_recorder_dumps(self, handle: dict) -> dict[int, bytes]:
        """rank -> the newest PyTorch Flight Recorder dump of the attempt's ranks, where the
        backend collects them (C4D without code changes); {} where it does not."""
        return {}

    def request_flight_recorder_dumps(self, handle: dict, timeout: float = 3.0) -> dict[str, list[int]]:
        """Ask the running instances for a fresh Flight Recorder dump and wait at most
        `timeout` s: instance -> the ranks that answered ([]: none in time). {} where the
        backend cannot ask (flight_recorder_dumps then has the latest periodic dumps)."""
        return {}

    def dump_stacks(self, handle: dict, name: str, timeout: float = 30.0) -> list[dict]:
        """py-spy dumps of the instance's Python processes taken where they run, for
        an instance pids() cannot reach from here: [{"pid", "stacks"}] or
        [{"pid", "error"}] per process."""
        raise BackendError(f"the {self.name} backend cannot reach {name}'s processes")

    # -- re-adoption and exits -----------------------------------------------
    def handle_for(self, job_id, attempt: int) -> dict:
        """The handle of an attempt this backend launched, found again without the
        caller's copy (a console that lost it)."""
        raise BackendError(
            f"backend {self.name or type(self).__name__} cannot find attempt {attempt} of job {job_id} again"
        )

    @property
    def exit_channel(self) -> str | None:
        """The Redis channel instance exits are announced on, or None when they are not."""
        return None

    def discard_standby(self, job_id) -> list[int]:
        """End the parked interpreters kept for a job's next attempt (warm restarts): the
        job is over. Returns the PIDs ended; backends that park nothing have none."""
        return []

    def standby(self, job_id) -> list[dict]:
        """The parked interpreters kept for a job's next attempt, each {"instance",
        "attempt", "pid", "parked" (imports done), "rss" (bytes, or None)}; none by default."""
        return []

    def stop_everything(self, grace: float = 0.5) -> list[int]:
        """Stop every instance of every attempt this backend holds (test teardown,
        decommissioning); returns the PIDs it had to kill outright."""
        raise BackendError(f"backend {self.name or type(self).__name__} cannot stop everything")

    # -- helpers for subclasses ------------------------------------------
    @staticmethod
    def instance_names(handle: dict) -> list[str]:
        return [i["name"] for i in handle.get("instances", ())]

    @staticmethod
    def check_instance(handle: dict, name: str) -> dict:
        for inst in handle.get("instances", ()):
            if inst["name"] == name:
                return inst
        known = ", ".join(Backend.instance_names(handle)) or "none"
        raise BackendError(f"instance {name!r} is not part of this attempt (known: {known})")
