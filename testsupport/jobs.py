"""Helpers for tests that start real jobs (imported by the test modules and conftest.py)."""

from __future__ import annotations

import os
import sys
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
