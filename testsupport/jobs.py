"""Helpers for tests that start real jobs (imported by the test modules and conftest.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from jobs.backends.osuser import blocked_ancestor, resolve_run_as

REPO = Path(__file__).resolve().parents[1]


def let_jobs_reach(*paths) -> None:
    """Run as root (CI is), the real local backend runs each job as `nobody`, as in
    production. Such a job must pass through to the interpreter (pyenv's lives under
    /root, 0700), the repository and the test's own directory (pytest makes its tmp
    dirs 0700): add the search bit (o+x, never read) on the root-owned directories in
    the way. Nothing is listable or readable that was not before."""
    if os.geteuid() != 0:
        return
    who = resolve_run_as("")
    targets = [os.path.realpath(sys.executable), sys.prefix, sys.base_prefix, str(REPO), *paths]
    for target in targets:
        for _ in range(64):
            blocked = blocked_ancestor(str(target), who)
            if blocked is None or os.stat(blocked).st_uid != 0:
                break
            os.chmod(blocked, os.stat(blocked).st_mode | 0o001)


def job_writable(path):
    """A directory where a test's jobs may write (markers, PID files) as they would in
    /tmp: anyone may add files, only their owner may remove or rename them (sticky), so a
    job cannot move the test's own files, such as the backend's data dir, aside."""
    os.makedirs(path, exist_ok=True)
    if os.geteuid() == 0:
        let_jobs_reach(path)
        os.chmod(path, 0o1777)
    return path


def wait_for_log(job, instance, text, timeout=20.0):
    """Wait until the job's first attempt's `instance` has written `text` (its backend's
    log, as the page reads it); returns (backend, handle)."""
    from jobs import actions  # the app registry is ready by the time a test calls this

    backend = actions.get_backend_for(job)
    handle = job.attempts.get(number=1).backend_handle
    deadline = time.monotonic() + timeout
    while text.encode() not in backend.read_log(handle, instance):
        assert time.monotonic() < deadline, f"{instance} did not write {text!r}"
        time.sleep(0.1)
    return backend, handle


def stop_job_now(user, job) -> None:
    """Stop the job as `user` and finish the stop at once, as the worker would."""
    from jobs import actions

    actions.stop_job(user, job)
    actions.finish_stop(job.pk)
