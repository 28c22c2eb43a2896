"""The per-job monitor lock on the real Redis: renewed while a tick runs, so a long
tick keeps its job; short, so a killed worker's job is ticked by another within
seconds (issue 20: a 20 s lock left a dead worker's jobs unwatched)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from monitoring import tasks

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]
# A tick that holds the lock and never ends (a teardown grace, a hung backend call).
LONG_TICK = (
    "import sys, time, django; django.setup(); from monitoring.tasks import with_job_lock; "
    "with_job_lock(int(sys.argv[1]), lambda: (print('holding', flush=True), time.sleep(120)))"
)


def test_a_long_tick_keeps_its_lock_and_a_killed_workers_lock_frees_within_seconds():
    job_id = 10**9 + uuid.uuid4().int % 10**6  # no real job: only the lock matters
    env = dict(os.environ, REDIS_URL=settings.REDIS_URL, DJANGO_SETTINGS_MODULE="console.settings")
    holder = subprocess.Popen(
        [sys.executable, "-c", LONG_TICK, str(job_id)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        deadline = time.monotonic() + 2.5 * tasks.LOCK_SECONDS
        while time.monotonic() < deadline:  # well past the lock's TTL: still renewed
            assert tasks._try_lock(job_id) is None, "another worker got the lock of a tick still running"
            time.sleep(0.25)
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        while (lock := tasks._try_lock(job_id)) is None:
            assert time.monotonic() - killed < tasks.LOCK_SECONDS + 2, "the dead worker's lock did not expire"
            time.sleep(0.05)
        freed_after = time.monotonic() - killed
        lock.release()
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait(10)
    print(f"lock free {freed_after:.1f} s after its worker was killed")
    assert freed_after <= tasks.LOCK_SECONDS + 1.0  # its TTL, plus scheduling on a loaded machine
