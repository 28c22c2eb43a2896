"""Named fault points: crash tests kill a worker at an exact step, not by luck in timing.

A test (or bench/chaos.py) starts a worker with VIGIL_FAULT_POINT=<name> in its
environment; when that process reaches the step it dies at once, the way
`kill -9 -<worker pgid>` would leave it: no exception handler, `finally` or atexit
runs. Unset, as in production, `point()` is one environment lookup.

    VIGIL_FAULT_POINT=launch.after_claim          die the first time this step is reached
    VIGIL_FAULT_POINT=launch.after_shim_start.1   an indexed step: after the second shim
    VIGIL_FAULT_ONCE=/some/marker                 only if this file can still be created,
                                                  so a worker started again does not die
                                                  again; the file says that it fired

Standard library only: the local backend imports it and must not need Django.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "VIGIL_FAULT_POINT"
ONCE_ENV = "VIGIL_FAULT_ONCE"

# Every step a launch or a whole-job restart can be interrupted at, in order.
POINTS = (
    "restart.after_decision",  # the restart record and attempt n+1 are committed
    "restart.after_stop",  # attempt n is torn down, n+1 not launched yet
    "launch.after_db_claim",  # attempt moved Queuing -> Starting
    "launch.after_claim",  # the backend's attempt directory exists, nothing in it (F1)
    "launch.after_spec",  # every instance's spec.json is written
    "launch.after_attempt_json",  # the handle is on disk, no shim started (F2)
    "launch.after_shim_start",  # shim <index> was started (indexed)
    "launch.after_shim_ready",  # shim <index> said its rank runs (indexed)
    "launch.after_launched",  # the backend marked the launch complete, nothing stored yet
    "launch.after_handle_stored",  # the handle and instance rows are committed
)
# The steps of restarting one instance within its attempt (Async jobs).
INSTANCE_RESTART_POINTS = (
    "restart.instance_after_record",  # the exit is taken and the instance restart recorded
    "restart.instance_after_backend",  # the instance's next run started, nothing stored yet
)


def point(name: str, index: int | None = None) -> None:
    """Die here if the environment names this step (or this step with this index)."""
    wanted = os.environ.get(ENV)
    if not wanted or (wanted != name and (index is None or wanted != f"{name}.{index}")):
        return
    once = os.environ.get(ONCE_ENV)
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return
    sys.stderr.write(f"vigil fault point {wanted}: killing process {os.getpid()}\n")
    sys.stderr.flush()
    # A worker started in its own session dies with its whole group (its pool
    # children too), as `kill -9 -<pgid>` does; anything else dies alone.
    if os.getsid(0) == os.getpgrp():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def check(name: str) -> str:
    """A test names a point that exists (a typo would otherwise never fire)."""
    base, _, index = name.rpartition(".")
    known = POINTS + INSTANCE_RESTART_POINTS
    if name in known or (index.isdigit() and base in known):
        return name
    raise ValueError(f"unknown fault point {name!r}; known: {', '.join(known)}")
