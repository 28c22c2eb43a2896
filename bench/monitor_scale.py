"""How long the production monitor sweep takes, and how soon an exit is decided on, as the
number of running jobs and worker processes grows (a benchmark, not a test).

Each job is a Sync PyTorchJob (1 Master + 7 Workers = 8 instances; --instances N for
1 Master + N-1 Workers) with the seed's
fault-tolerance flags, running on the in-memory backend, every instance alive and
recently printing. What runs is what production runs: `monitoring.tasks.sweep(shard)`,
one call per shard (VIGIL_MONITOR_SHARDS, the production default unless --shards),
each under the shard's Redis lease, in 1, 2 or 4 forked worker processes that take
shard tasks from one queue as Celery workers do. A "beat" here enqueues every shard
each round, at most every VIGIL_MONITOR_SWEEP_SECONDS; the round's wall time (all
shards done) is the sweep time. Every worker process holds a copy of the in-memory
cluster; an exit is injected into every copy (the cluster is one), and an attempt
one worker launched is running in the others too (ClusterView).

Every run (size, worker processes) starts from a fresh set of running jobs.
Phases per size and worker count: a first round (every job is new, so every job is
ticked: it also scans logs for watchdog hints and checks stragglers, both every 30 s
per job, and schedules each job's next tick, monitoring.schedule), steady rounds for
longer than the quiet period (VIGIL_MONITOR_QUIET_SECONDS; median and max round time,
and per job per round the ticks, SQL queries and Redis round trips, averaged over the
phase, so the scheduled ticks are paid for), then rounds with exits injected (SIGKILL
of one instance of a random running job, about 20 per round at random moments) until
--exits decisions: the decision latency is the RestartRecord's restart_time (the
deciding tick's clock) minus the moment of injection, p50 and p99. The bench stands in
for the exit listener: its heartbeat is kept fresh, and each worker process wakes the
job of an exit it learns of (jobs.actions.wake_monitor) as the listener does on the
shim's announcement; there is no run_job task, so the latency is the sweep's (in
production the listener's run_job usually decides first).

The data is bulk-created in a throwaway SQLite database in a temporary VIGIL_DATA_DIR,
or with --postgres in a throwaway PostgreSQL database (vigil_bench_scale_<pid>,
dropped after); Redis is REDIS_URL or a private one (console.devredis).

Run:  .venv/bin/python bench/monitor_scale.py [--sizes 1000,10000] [--workers 1,2,4] [--postgres]
Targets (issue 17): 10,000 jobs with 2 workers on PostgreSQL: steady sweep < 0.5 s, p99 < 1 s.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import platform
import queue
import random
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
WORKERS = 7  # per job, beside its Master (--instances)
PG_DB = f"vigil_bench_scale_{os.getpid()}"  # two runs at once never share (or drop) one


def when(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch is not None else None


def django_on(postgres: str | None) -> str:
    """Django on a fresh database (SQLite in a temporary data dir, or a fresh PostgreSQL
    database at `postgres`); returns the temporary dir."""
    tmp = tempfile.mkdtemp(prefix="vigil-bench-")
    os.environ["VIGIL_DATA_DIR"] = tmp
    os.environ.pop("DATABASE_URL", None)
    if postgres:
        import psycopg

        with psycopg.connect(f"{postgres}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {PG_DB}")
            conn.execute(f"CREATE DATABASE {PG_DB}")
        os.environ["DATABASE_URL"] = f"{postgres}/{PG_DB}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    return tmp


def drop_postgres(postgres: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(f"{postgres}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
def use_memory_backend():
    from django.conf import settings

    from jobs.backends import get_backend, reset_backends

    settings.JOB_BACKENDS = {"local": {"BACKEND": "__main__.ClusterView", "OPTIONS": {}}}
    reset_backends()
    return get_backend("local")


def create_running_jobs(count: int, backend, owner, workspace) -> None:
    """`count` running jobs of 8 live instances, as if launched a minute ago."""
    from core.flags import parse_flags
    from jobs import actions
    from jobs.models import Attempt, AttemptStatus, Instance, InstanceStatus, Job, JobStatus

    config = parse_flags(SEED_SYNC)
    start = Job.objects.count()
    now = datetime.now(timezone.utc)
    specs = [{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": WORKERS}]
    jobs = Job.objects.bulk_create([
        Job(workspace=workspace, created_by=owner, display_name=f"scale-{start + i}", job_type="PyTorchJob",
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


def cluster_view():
    """The in-memory backend as one cluster seen from several worker processes: an
    attempt another process launched after the fork is running here too."""
    from jobs import actions
    from jobs.backends.memory import MemoryBackend
    from jobs.models import Attempt

    class ClusterView(MemoryBackend):
        @property
        def exit_channel(self) -> str | None:
            from django.conf import settings

            return settings.VIGIL_EXIT_CHANNEL  # its exits are announced (drain_exits)

        def poll(self, handle):
            drain_exits(self)  # an exit is on disk before it is announced
            return super().poll(handle)

        def _attempt(self, handle):
            if (handle["job_id"], handle["attempt"]) not in self.attempts:
                attempt = Attempt.objects.select_related("job").get(job_id=handle["job_id"], number=handle["attempt"])
                self.launch(actions.attempt_launch_spec(attempt.job, attempt))
            return super()._attempt(handle)

    return ClusterView


class Counts:
    """SQL queries and Redis round trips made in this process."""

    sql = 0
    redis = 0

    @classmethod
    def install(cls) -> None:
        import redis.client
        from django.db import connection

        def counting(execute, sql, params, many, context):
            cls.sql += 1
            return execute(sql, params, many, context)

        connection.execute_wrappers.append(counting)
        plain, piped = redis.client.Redis.execute_command, redis.client.Pipeline.execute

        def execute_command(self, *args, **options):
            cls.redis += 1
            return plain(self, *args, **options)

        def execute(self, *args, **options):
            cls.redis += 1
            return piped(self, *args, **options)

        redis.client.Redis.execute_command = execute_command  # Pipeline buffers in its own override
        redis.client.Pipeline.execute = execute


EXITS_Q = None  # this worker process's queue of injected exits


def drain_exits(backend) -> None:
    """Exits injected meanwhile: this copy of the cluster sees them, and the job is woken
    as the exit listener wakes it on the shim's announcement (jobs.actions.wake_monitor).
    Every worker wakes the job once it knows of the exit, so a tick in a worker whose
    copy was behind cannot leave it scheduled past the exit."""
    from jobs import actions

    while EXITS_Q is not None:
        try:
            job_id, handle, name = EXITS_Q.get_nowait()
        except queue.Empty:
            return
        try:
            backend.finish(handle, name, exit_code=None, signal=9)
        except Exception:  # noqa: BLE001 - an attempt already replaced here
            pass
        actions.wake_monitor(job_id)


def worker(tasks_q, results_q, exits_q) -> None:
    """One worker process: take a shard, sweep it (the production task), report."""
    from django.db import connection

    from jobs.backends import get_backend
    from monitoring import tasks

    global EXITS_Q
    connection.close()  # never share the parent's socket
    Counts.install()
    backend = get_backend("local")
    EXITS_Q = exits_q
    while True:
        shard = tasks_q.get()
        if shard is None:
            return
        drain_exits(backend)
        sql, red, t0 = Counts.sql, Counts.redis, time.perf_counter()
        ticked = tasks.sweep(shard)
        results_q.put((shard, ticked, time.perf_counter() - t0, Counts.sql - sql, Counts.redis - red))


class Pool:
    def __init__(self, processes: int) -> None:
        from django.db import connections

        connections.close_all()
        ctx = multiprocessing.get_context("fork")
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        self.exits = [ctx.Queue() for _ in range(processes)]
        self.procs = [ctx.Process(target=worker, args=(self.tasks, self.results, q), daemon=True) for q in self.exits]
        for p in self.procs:
            p.start()

    def inject(self, job_id: int, handle: dict, name: str) -> None:
        for q in self.exits:
            q.put((job_id, handle, name))

    def round(self, shards: int, during=None) -> tuple[float, int, int, int]:
        """Every shard swept once; wall time, jobs ticked, queries, Redis round trips."""
        from infra import health

        health.record(health.EXITS)  # the exit listener's heartbeat: its announcements are emulated
        t0 = time.perf_counter()
        for shard in range(shards):
            self.tasks.put(shard)
        done, ticked, sql, red = 0, 0, 0, 0
        while done < shards:
            try:
                _, n, _, q, r = self.results.get(timeout=0.01)
            except queue.Empty:
                if during is not None:
                    during()
                continue
            done, ticked, sql, red = done + 1, ticked + (n or 0), sql + q, red + r
        return time.perf_counter() - t0, ticked, sql, red

    def close(self) -> None:
        for _ in self.procs:
            self.tasks.put(None)
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.kill()


def measure(size: int, processes: int, args, cadence: float, shards: int) -> dict:
    from jobs.models import Attempt, Job, JobStatus, RestartRecord

    pool = Pool(processes)
    try:
        first = pool.round(shards)
        steady = []
        # Steady rounds for longer than the longest quiet period, so that every job's
        # scheduled ticks (and the periodic checks due in that window) are paid for.
        until = time.perf_counter() + args.steady_seconds
        while len(steady) < args.sweeps or time.perf_counter() < until:
            started = time.perf_counter()
            steady.append(pool.round(shards))
            time.sleep(max(0.0, cadence - (time.perf_counter() - started)))
        # The first round ticks every job (all new); a job not ticked by it was left by a
        # shard whose lease ran out mid-sweep (its worker starved past the lease).
        short = size - first[1]
        sweep = statistics.median(s[0] for s in steady)
        # Exits at random moments, about three per round, into jobs not yet hit.
        rng = random.Random(size * 10 + processes)
        candidates = list(Job.objects.filter(status=JobStatus.RUNNING, current_attempt=1).values_list("pk", flat=True))
        rng.shuffle(candidates)
        handles = dict(Attempt.objects.filter(job_id__in=candidates[:args.exits * 2], number=1)
                       .values_list("job_id", "backend_handle"))
        injected: dict[int, float] = {}
        gap = max(sweep, cadence) / 20  # about 20 per round: the run stays a few rounds long at any size
        next_at = [time.time() + rng.uniform(0, gap)]

        def maybe_inject() -> None:
            if len(injected) < args.exits and time.time() >= next_at[0]:
                job_id = candidates[len(injected)]
                injected[job_id] = time.time()
                pool.inject(job_id, handles[job_id], f"worker-{rng.randrange(WORKERS)}")
                next_at[0] = time.time() + rng.uniform(0, 2 * gap)

        deadline = time.time() + 60 + 10 * max(sweep, cadence) * args.exits / 20
        decided: dict[int, float] = {}
        while len(decided) < args.exits and time.time() < deadline:
            started = time.perf_counter()
            pool.round(shards, during=maybe_inject)
            maybe_inject()
            for job_id, at in RestartRecord.objects.filter(job_id__in=list(injected)).values_list("job_id", "restart_time"):
                decided.setdefault(job_id, at.timestamp())
            while time.perf_counter() - started < cadence:
                maybe_inject()
                time.sleep(0.005)
        latencies = sorted(decided[j] - injected[j] for j in decided)
        failed = Job.objects.filter(pk__in=list(injected), status=JobStatus.FAILED).count()
    finally:
        pool.close()
    pct = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else float("nan")  # noqa: E731
    rounds = len(steady)
    return {"short": short, "first": first[0], "sweep": sweep, "sweep_max": max(s[0] for s in steady),
            "rounds": rounds, "ticks": sum(s[1] for s in steady) / rounds / size,
            "sql": sum(s[2] for s in steady) / rounds / size, "redis": sum(s[3] for s in steady) / rounds / size,
            "first_sql": first[2] / size,
            "injected": len(injected), "decided": len(decided), "failed": failed,
            "p50": pct(0.50), "p99": pct(0.99), "max": latencies[-1] if latencies else float("nan")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts")
    parser.add_argument("--sweeps", type=int, default=3, help="steady-state rounds per run (median reported)")
    parser.add_argument("--exits", type=int, default=50, help="injected instance exits per run")
    parser.add_argument("--instances", type=int, default=WORKERS + 1, help="instances per job (1 Master, the rest Workers)")
    parser.add_argument("--shards", type=int, default=0, help="VIGIL_MONITOR_SHARDS (0: the production default)")
    parser.add_argument("--quiet", type=float, default=None,
                        help="VIGIL_MONITOR_QUIET_SECONDS (default: the production default; 0 ticks every job every sweep)")
    parser.add_argument("--steady-seconds", type=float, default=None,
                        help="how long the steady phase runs (default: the quiet period plus 2 s)")
    parser.add_argument("--postgres", nargs="?", const="postgres://postgres@127.0.0.1:5432", default=None,
                        help="PostgreSQL server URL (without database) instead of SQLite")
    args = parser.parse_args()
    if args.instances < 2:
        parser.error("--instances: at least 2 (a Master and a Worker)")
    globals()["WORKERS"] = args.instances - 1
    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(w) for w in args.workers.split(",")]
    if args.shards:
        os.environ["VIGIL_MONITOR_SHARDS"] = str(args.shards)
    if args.quiet is not None:
        os.environ["VIGIL_MONITOR_QUIET_SECONDS"] = str(args.quiet)

    redis = None
    if not os.environ.get("REDIS_URL"):
        from console.devredis import PrivateRedis

        redis = PrivateRedis().start()
        os.environ["REDIS_URL"] = redis.url
    tmp = django_on(args.postgres)
    globals()["ClusterView"] = cluster_view()
    import django
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection

    from jobs.models import Job, Membership, Role, Workspace

    shards, cadence = settings.MONITOR_SHARDS, settings.MONITOR_SWEEP_SECONDS
    if args.steady_seconds is None:
        args.steady_seconds = settings.MONITOR_QUIET_SECONDS + 2
    print("monitor sweep scale benchmark (production path: monitoring.tasks.sweep(shard) under shard leases)")
    print(f"  machine: {platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at start, python {platform.python_version()}, "
          f"Django {django.get_version()}")
    print(f"  database: {connection.vendor} {settings.DATABASES['default']['NAME']} (throwaway); "
          f"Redis {settings.REDIS_URL}")
    print(f"  jobs: Sync PyTorchJob, 1 Master + {WORKERS} Workers, flags {SEED_SYNC!r}; in-memory backend")
    print(f"  {shards} shards, rounds at most every {cadence} s; worker processes {counts}; "
          f"first round, then steady rounds for {args.steady_seconds:g} s (at least {args.sweeps}), "
          f"then {args.exits} injected exits (SIGKILL)")
    print(f"  quiet period {settings.MONITOR_QUIET_SECONDS:g} s: a steady job is ticked at its scheduled check or "
          f"when woken; an injected exit wakes its job as the exit listener would (no run_job task: "
          f"the latency is the sweep's)")
    backend = use_memory_backend()
    owner = get_user_model().objects.create_user("bench", "bench@example.com", "bench-password-123")
    ws = Workspace.objects.create(name="Bench", slug="bench")
    Membership.objects.create(workspace=ws, user=owner, role=Role.OWNER)

    logging.getLogger("vigil.decisions").setLevel(logging.ERROR)  # one line per injected exit otherwise
    rows = []
    try:
        for size in sorted(sizes):
            for processes in counts:
                # A fresh set per run: the restarts one run decides must not burden the next.
                Job.objects.all().delete()
                backend.reset()
                t0 = time.perf_counter()
                create_running_jobs(size, backend, owner, ws)
                setup = time.perf_counter() - t0
                r = measure(size, processes, args, cadence, shards)
                rows.append((size, processes, r))
                print(f"  {size:>6} jobs x {WORKERS + 1}, {processes} worker(s): first {r['first']:6.2f} s "
                      f"({r['first_sql']:.2f} queries/job), steady sweep median {r['sweep']:6.3f} s, "
                      f"max {r['sweep_max']:.3f} s over {r['rounds']} rounds "
                      f"({r['sweep'] / size * 1000:.4f} ms/job); per job per round: {r['ticks']:.3f} ticks, "
                      f"{r['sql']:.3f} queries, {r['redis']:.4f} Redis round trips; decision latency p50 {r['p50']:.2f} s, "
                      f"p99 {r['p99']:.2f} s, max {r['max']:.2f} s ({r['decided']}/{r['injected']} exits decided, "
                      f"{r['failed']} failed the job; {r['short']} job ticks left by lost leases)  [setup {setup:.0f} s, load {os.getloadavg()[0]:.2f}]",
                      flush=True)
        print("\n  fitted cost per job (steady sweep / jobs, by worker processes):")
        for processes in counts:
            pts = [(size, r["sweep"]) for size, p, r in rows if p == processes]
            if len(pts) >= 2:
                (x0, y0), (x1, y1) = pts[0], pts[-1]
                print(f"    {processes} worker(s): {(y1 - y0) / (x1 - x0) * 1000:.3f} ms/job marginal "
                      f"({x0} -> {x1} jobs)")
        print(f"  load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if args.postgres:
            drop_postgres(args.postgres)
        if redis is not None:
            redis.stop()


if __name__ == "__main__":
    main()
