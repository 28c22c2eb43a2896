"""The sharded sweep on the real Redis: every live job is in exactly one shard; one
worker at a time sweeps a shard (its lease); a killed worker's shard is swept by
another once the lease runs out; a late release never frees another worker's lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from jobs.models import Job, JobStatus
from monitoring import leases, tasks, tick

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]
# A worker sweeping a shard whose one job's tick never ends (a teardown grace, a hung
# backend call): the production sweep path with the tick and the reads stubbed out.
LONG_SWEEP = (
    "import sys, time, django; django.setup(); from monitoring import tasks, tick; "
    "tick.due_jobs = lambda shard, shards, due_at=None: [(1, None)]; tick.load_snapshots = lambda ids: {}; "
    "tick.run_job = lambda *a, **k: (print('sweeping', flush=True), time.sleep(120)); "
    "tasks.sweep(int(sys.argv[1]))"
)


@pytest.fixture
def stub_ticks(monkeypatch):
    """The shard's jobs are [1, 2]; each tick records itself and how many sweeps were inside at once."""
    inside, ticked = [0], []
    guard = threading.Lock()

    def run_job(job_id, now=None, *, snapshot=None, plans=None, tails=None, stretch=1.0):
        with guard:
            inside[0] += 1
            ticked.append((job_id, inside[0]))
        time.sleep(0.02)
        with guard:
            inside[0] -= 1

    monkeypatch.setattr(tick, "due_jobs", lambda shard, shards, due_at=None: [(1, None), (2, None)])
    monkeypatch.setattr(tick, "load_snapshots", lambda ids: {})
    monkeypatch.setattr(tick, "run_job", run_job)
    return ticked


def free_shard() -> int:
    """A shard number no other test (or leftover lease) uses."""
    return 10**6 + uuid.uuid4().int % 10**6


@pytest.mark.django_db(transaction=True)
def test_every_live_job_is_in_exactly_one_shard(alice, alice_ws, settings):
    settings.MONITOR_SHARDS = 4
    statuses = [JobStatus.RUNNING, JobStatus.QUEUING, JobStatus.RESTARTING, JobStatus.STOPPING, JobStatus.SUCCEEDED]
    for n in range(23):
        Job.objects.create(
            workspace=alice_ws,
            created_by=alice,
            display_name=f"shard-{n}",
            job_type="PyTorchJob",
            job_specs=[{"type": "Worker", "pod_count": 1}],
            user_command="true",
            backend="local",
            status=statuses[n % len(statuses)],
        )
    live = tick.live_job_ids()
    by_shard = [tick.live_job_ids(shard, 4) for shard in range(4)]
    assert sorted(j for ids in by_shard for j in ids) == sorted(live)  # each once, none lost
    assert all(j % 4 == shard for shard, ids in enumerate(by_shard) for j in ids)  # and stays there for life
    assert all(by_shard), "23 consecutive ids leave no shard empty"
    assert not Job.objects.filter(pk__in=live, status=JobStatus.SUCCEEDED).exists()


def test_two_workers_never_sweep_the_same_shard_at_once(stub_ticks):
    shard = free_shard()
    results: list[int | None] = []

    def worker():
        for _ in range(10):
            results.append(tasks.sweep(shard))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert max(inside for _, inside in stub_ticks) == 1, "two sweeps of one shard ran at once"
    assert None in results, "the second worker never found the shard taken"  # they did overlap in time
    assert len(stub_ticks) == 2 * sum(1 for r in results if r is not None)
    assert leases.Lease(leases.shard_key(shard)).acquire(), "a finished sweep left its lease behind"


def test_a_killed_workers_shard_is_swept_by_another_once_its_lease_runs_out(stub_ticks):
    shard = free_shard()
    env = dict(os.environ, REDIS_URL=settings.REDIS_URL, DJANGO_SETTINGS_MODULE="console.settings")
    holder = subprocess.Popen(
        [sys.executable, "-c", LONG_SWEEP, str(shard)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "sweeping"
        deadline = time.monotonic() + 2.5 * leases.LEASE_SECONDS
        while time.monotonic() < deadline:  # well past the lease's TTL: still renewed
            assert tasks.sweep(shard) is None, "another worker swept a shard still being swept"
            time.sleep(0.25)
        assert not stub_ticks
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        while tasks.sweep(shard) is None:
            assert time.monotonic() - killed < leases.LEASE_SECONDS + 2, "the dead worker's lease did not expire"
            time.sleep(0.05)
        taken_after = time.monotonic() - killed
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait(10)
    print(f"shard swept by another worker {taken_after:.1f} s after its worker was killed")
    assert [job for job, _ in stub_ticks] == [1, 2]
    assert taken_after <= leases.LEASE_SECONDS + 1.0  # its TTL, plus scheduling on a loaded machine


def test_an_expired_lease_is_not_released_or_renewed_by_its_old_holder():
    key = leases.shard_key(free_shard())
    old = leases.Lease(key, seconds=0.2)
    assert old.acquire()
    assert not leases.Lease(key).acquire()
    time.sleep(0.4)
    assert old.renew(), "a lease that ran out with nobody taking it is taken back by its holder's renewal"
    time.sleep(0.4)
    new = leases.Lease(key)
    assert new.acquire(), "the expired lease was not free"
    old.release()  # a worker that was paused past its TTL
    assert not old.renew()
    assert not leases.Lease(key).acquire(), "the old holder's release freed the new holder's lease"
    new.release()
    assert leases.Lease(key).acquire()
