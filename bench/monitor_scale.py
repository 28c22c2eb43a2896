"""How long one monitor sweep takes as the number of running jobs grows (a benchmark, not a test).

Each job is a Sync PyTorchJob (1 Master + 7 Workers = 8 instances) with the seed's
fault-tolerance flags, running on the in-memory backend, every instance alive and
recently printing. One sweep (monitoring.tasks.sweep, the one production runs: it takes
each job's Redis lock, reads the jobs in bulk and ticks them) runs once in this
process, as one Celery worker does every second. Nothing fails, so the figure is
the monitor's own cost of watching: what every second of every running job pays.

The jobs, attempts and instances are bulk-created in a throwaway SQLite database in a
temporary VIGIL_DATA_DIR (never the dev database); the locks go to REDIS_URL, or to a
private Redis started for the run (console.devredis) when it is not set. For each size we time the first
sweep (it also scans each job's logs for watchdog hints, done every 30 s per job) and
the median of the next ones (steady state), and count SQL queries per job.
With --profile, cProfile shows where the steady-state time goes at the profiled size.

Run:  .venv/bin/python bench/monitor_scale.py [--sizes 100,1000,5000] [--sweeps 3] [--profile 1000]
Target: a steady-state sweep of 1,000 jobs under 1 s, growing linearly.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEED_SYNC = ("--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
             "--fault-tolerant-policy=ExitCodeAndErrorMsg")
WORKERS = 7


def when(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch is not None else None


def django_in_temp_dir() -> str:
    """Django on a fresh SQLite database in a temporary data dir; returns the dir."""
    tmp = tempfile.mkdtemp(prefix="vigil-bench-")
    os.environ["VIGIL_DATA_DIR"] = tmp
    os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    return tmp


def use_memory_backend():
    from django.conf import settings

    from jobs.backends import get_backend, reset_backends

    settings.JOB_BACKENDS = {"local": {"BACKEND": "jobs.backends.memory.MemoryBackend", "OPTIONS": {}}}
    reset_backends()
    return get_backend("local")


def create_running_jobs(count: int, backend, owner, workspace) -> None:
    """`count` running jobs of 8 live instances, as if launched a minute ago."""
    from core.flags import parse_flags
    from jobs import actions
    from jobs.models import Attempt, AttemptStatus, Instance, InstanceStatus, Job, JobStatus

    config = parse_flags(SEED_SYNC)
    now = datetime.now(timezone.utc)
    specs = [{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": WORKERS}]
    jobs = Job.objects.bulk_create([
        Job(workspace=workspace, created_by=owner, display_name=f"scale-{i}", job_type="PyTorchJob",
            job_specs=specs, user_command="python train.py", backend="local", fault_tolerance=True,
            error_monitoring_args=SEED_SYNC, ft_config=config.to_dict(), current_attempt=1,
            status=JobStatus.RUNNING, started_at=now)
        for i in range(count)
    ], batch_size=500)
    attempts = []
    for job in jobs:
        attempts.append(Attempt(job=job, number=1, status=AttemptStatus.RUNNING, queued_at=now, preparing_at=now,
                                starting_at=now, running_at=now))
    attempts = Attempt.objects.bulk_create(attempts, batch_size=500)
    instances = []
    t = time.time()
    for job, attempt in zip(jobs, attempts):
        spec = actions.attempt_launch_spec(job, attempt)
        handle = backend.launch(spec)
        attempt.backend_handle = handle
        for inst in spec.instances:
            backend.write_log(handle, inst.name, f"step=1 rank={inst.rank} loss=0.5\n", now=t)
        statuses = {s.name: s for s in backend.poll(handle)}
        for inst in spec.instances:
            s = statuses[inst.name]
            instances.append(Instance(attempt=attempt, role=inst.role, index=inst.index, name=inst.name, rank=inst.rank,
                                      node=s.node, status=InstanceStatus.RUNNING, started_at=when(s.started_at),
                                      last_output_at=when(s.last_output_at)))
    Attempt.objects.bulk_update(attempts, ["backend_handle"], batch_size=500)
    Instance.objects.bulk_create(instances, batch_size=1000)


def timed_sweep() -> tuple[float, int, int]:
    from django.db import connection

    from monitoring import tasks

    count = 0

    def counting(execute, sql, params, many, context):
        nonlocal count
        count += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counting):
        t0 = time.perf_counter()
        ticked = tasks.sweep()
        elapsed = time.perf_counter() - t0
    return elapsed, ticked, count


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--sweeps", type=int, default=3, help="steady-state sweeps per size (median reported)")
    parser.add_argument("--profile", type=int, default=1000, help="profile one steady sweep at this size (0: off)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    redis = None
    if not os.environ.get("REDIS_URL"):
        from console.devredis import PrivateRedis

        redis = PrivateRedis().start()
        os.environ["REDIS_URL"] = redis.url
    tmp = django_in_temp_dir()
    import django
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection

    from jobs.models import Job, JobStatus, Membership, Role, Workspace

    print("monitor sweep scale benchmark")
    print(f"  machine: {platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}, Django {django.get_version()}")
    print(f"  database: {connection.vendor} {settings.DATABASES['default']['NAME']} (throwaway)")
    print(f"  jobs: Sync PyTorchJob, 1 Master + {WORKERS} Workers, flags {SEED_SYNC!r}; in-memory backend")
    print(f"  one sweep = monitoring.tasks.sweep() in one process, locks in Redis {settings.REDIS_URL}; "
          f"first sweep, then median of {args.sweeps}")
    backend = use_memory_backend()
    owner = get_user_model().objects.create_user("bench", "bench@example.com", "bench-password-123")
    ws = Workspace.objects.create(name="Bench", slug="bench")
    Membership.objects.create(workspace=ws, user=owner, role=Role.OWNER)

    rows = []
    try:
        for size in sizes:
            Job.objects.all().delete()
            backend.reset()
            t0 = time.perf_counter()
            create_running_jobs(size, backend, owner, ws)
            setup = time.perf_counter() - t0
            first, ticked, first_q = timed_sweep()
            steady = [timed_sweep() for _ in range(args.sweeps)]
            med = statistics.median(s[0] for s in steady)
            q = steady[0][2]
            still = Job.objects.filter(status=JobStatus.RUNNING).count()
            assert ticked == size and still == size, (ticked, still)
            rows.append((size, first, med, q))
            print(f"  {size:>6} jobs ({size * (WORKERS + 1):>6} instances): first sweep {first:7.3f} s "
                  f"({first_q / size:.2f} queries/job), steady sweep {med:7.3f} s ({q / size:.2f} queries/job, {q} in all), "
                  f"{med / size * 1000:.2f} ms/job  [setup {setup:.1f} s]")
            if size == args.profile:
                prof = cProfile.Profile()
                prof.enable()
                from monitoring import tasks

                tasks.sweep()
                prof.disable()
                out = io.StringIO()
                stats = pstats.Stats(prof, stream=out).sort_stats("cumulative")
                stats.print_stats(r"tick\.py|restarts\.py|checks\.py|tasks\.py|actions\.py|memory\.py|query\.py:\d+\(__iter__|"
                                  r"sqlite3/base\.py|compiler\.py:\d+\(execute_sql|from_dict|parse_flags", 25)
                print(f"\n  profile of one steady sweep of {size} jobs (cumulative, filtered):")
                for line in out.getvalue().splitlines():
                    if line.strip() and not line.startswith(("   Ordered", "   List reduced")):
                        print("   " + line[:150])
                print()
        base = rows[0]
        print("\n  growth (steady sweep per job, relative to the smallest size):")
        for size, _, med, _ in rows:
            print(f"    {size:>6} jobs: {med / size * 1000:.2f} ms/job = {(med / size) / (base[2] / base[0]):.2f}x")
        at_1000 = next((med for size, _, med, _ in rows if size == 1000), None)
        if at_1000 is not None:
            print(f"\n  target: 1,000 jobs under 1 s -> {at_1000:.3f} s: {'MET' if at_1000 < 1.0 else 'MISSED'}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if redis is not None:
            redis.stop()


if __name__ == "__main__":
    main()
