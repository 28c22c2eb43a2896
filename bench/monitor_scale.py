"""How long the production monitor sweep takes, and how soon an exit is decided on, as the
number of running jobs and worker processes grows (a benchmark, not a test).

Each job is a Sync PyTorchJob (1 Master + 7 Workers = 8 instances; --instances N for
1 Master + N-1 Workers) with the seed's
fault-tolerance flags, running on the in-memory backend, every instance alive and
recently printing. What runs is what production runs: `monitoring.tasks.sweep(shard)`,
one call per shard (VIGIL_MONITOR_SHARDS, the production default unless --shards),
each under the shard's Redis lease, in 1, 2 or 4 forked worker processes that take
tasks from FIFO queues as Celery workers take them from the broker's (prefetch 1): the
shard tasks from the default queue, the run_job tasks from their own (console.settings
routes them to vigil.exits), which one more process (the Procfile's `decide`) serves
alone and the sweeping workers serve between tasks. A "beat" here enqueues
every shard each round, at most every VIGIL_MONITOR_SWEEP_SECONDS; the round's wall
time (all shards done) is the sweep time.

Exits take production's path. The real exit listener runs in its own process
(monitoring/management/commands/listen_exits.py, its heartbeat and all); an injected
exit (SIGKILL of one instance of a random running job, at random moments, --exit-rate
a second on average: 2, a heavy day for 10,000 jobs, about 1 % restarting a minute) is first made visible to every worker process's copy of the in-memory cluster
through shared memory (the exit is on disk before it is announced, and every process
sees it at once: no per-process lag), then announced as the shim announces it
(jobs.backends.noderedis.publish of the shim's JSON on VIGIL_EXIT_CHANNEL). The
listener wakes the job (jobs.actions.wake_monitor) and enqueues the run_job task, which
the first free process of that queue takes and runs as Celery would
(monitoring.tasks.run_job: the per-job Redis lock, then the tick). The decision latency
is the RestartRecord's restart_time (the deciding tick's clock) minus
the moment of injection, p50 and p99, over --exits decisions. --exit-path sweep drops
the run_job task (the listener still wakes the job): the latency of the sweep alone,
what a person waits for when the run_job task is lost or late. --shared-queue puts run_job
behind the shard tasks on their queue, with no `decide` process (the layout before the
route).

Phases per size and worker count: a first round (every job is new, so every job is
ticked: it also scans logs for watchdog hints and checks stragglers, both every 30 s
per job, and schedules each job's next tick, monitoring.schedule), --settle seconds of
rounds not measured (for the shards to find their pace: a shard behind its schedule
stretches its quiet period and periodic checks, core.pacing), steady rounds for
--steady-seconds (median and max round time, how late the scheduled checks were as
each round started, each shard's quiet period at the end, and per job per round the
ticks, SQL queries and Redis round trips, averaged over the phase; make the settle and
steady phases together longer than 30 s, or the periodic checks the first round
claimed are never paid for), then the rounds with exits injected.
Every run (size, worker processes) starts from a fresh set of running jobs.

The data is bulk-created in a throwaway SQLite database in a temporary VIGIL_DATA_DIR,
or with --postgres in a throwaway PostgreSQL database (vigil_bench_scale_<pid>,
dropped after); Redis is REDIS_URL or a private one (console.devredis). --profile
instead runs one steady sweep of every shard in this process under cProfile and prints
where the time and the SQL statements go.

Run:  .venv/bin/python bench/monitor_scale.py [--sizes 1000,10000] [--workers 1,2,4] [--postgres]
Targets (issue 17): 10,000 jobs with 2 workers on PostgreSQL: steady sweep < 0.5 s, p99 < 1 s;
30,000 jobs: p99 < 2 s.
"""

from __future__ import annotations

import _path  # first: the repository root on sys.path (bench/_path.py)
import argparse
import logging
import multiprocessing
import os
import platform
import queue
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone

ROOT = _path.ROOT

SEED_SYNC = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg"
)
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
    jobs = Job.objects.bulk_create(
        [
            Job(
                workspace=workspace,
                created_by=owner,
                display_name=f"scale-{start + i}",
                job_type="PyTorchJob",
                job_specs=specs,
                user_command="python train.py",
                backend="local",
                fault_tolerance=True,
                error_monitoring_args=SEED_SYNC,
                ft_config=config.to_dict(),
                current_attempt=1,
                status=JobStatus.RUNNING,
                started_at=now,
            )
            for i in range(count)
        ],
        batch_size=500,
    )
    attempts = []
    for job in jobs:
        attempts.append(
            Attempt(
                job=job,
                number=1,
                status=AttemptStatus.RUNNING,
                queued_at=now,
                preparing_at=now,
                starting_at=now,
                running_at=now,
            )
        )
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
            instances.append(
                Instance(
                    attempt=attempt,
                    role=inst.role,
                    index=inst.index,
                    name=inst.name,
                    rank=inst.rank,
                    node=s.node,
                    status=InstanceStatus.RUNNING,
                    started_at=when(s.started_at),
                    last_output_at=when(s.last_output_at),
                )
            )
    Attempt.objects.bulk_update(attempts, ["backend_handle"], batch_size=500)
    Instance.objects.bulk_create(instances, batch_size=1000)


def cluster_view():
    """The in-memory backend as one cluster seen from several worker processes: an
    attempt another process launched after the fork is running here too, and an exit
    injected anywhere is seen here by the next poll (Exits: shared memory)."""
    from jobs import actions
    from jobs.backends.memory import MemoryBackend
    from jobs.models import Attempt

    class ClusterView(MemoryBackend):
        @property
        def exit_channel(self) -> str | None:
            from django.conf import settings

            return settings.VIGIL_EXIT_CHANNEL  # its exits are announced (Exits.inject)

        def poll(self, handle):
            if EXITS is not None:
                EXITS.see(self, handle)  # an exit is on disk before it is announced
            return super().poll(handle)

        def _attempt(self, handle):
            if (handle["job_id"], handle["attempt"]) not in self.attempts:
                attempt = Attempt.objects.select_related("job").get(job_id=handle["job_id"], number=handle["attempt"])
                self.launch(actions.attempt_launch_spec(attempt.job, attempt))
            return super()._attempt(handle)

    return ClusterView


class Exits:
    """The injected exits, in shared memory mapped before the worker processes fork: the
    injecting process writes an exit before it announces it, and every process's copy of
    the cluster sees it at its next poll of the job, as every worker sees an exit record
    on a shared disk. (Queues per process, as before, let a tick in a process whose copy
    was behind schedule the job past its exit: a lag production does not have.)"""

    def __init__(self, ctx, first_job: int, last_job: int) -> None:
        self.base = first_job
        self.at = ctx.Array("d", last_job - first_job + 1, lock=False)  # exit time; 0: none
        self.worker = ctx.Array("i", last_job - first_job + 1, lock=False)  # which Worker exited

    def inject(self, job_id: int, worker: int, at: float) -> None:
        self.worker[job_id - self.base] = worker
        self.at[job_id - self.base] = at  # last: a reader that sees the time sees the worker

    def see(self, backend, handle) -> None:
        job_id = int(handle["job_id"])
        i = job_id - self.base
        if int(handle["attempt"]) != 1 or not 0 <= i < len(self.at) or not self.at[i]:
            return  # exits are injected into attempt 1 only
        name = f"worker-{self.worker[i]}"
        att = backend.attempts.get((handle["job_id"], handle["attempt"]))
        if att is not None and name in att.statuses and not att.statuses[name].state.finished:
            backend.finish(handle, name, exit_code=None, signal=9, now=self.at[i])


EXITS: Exits | None = None  # set before the fork


def announce(job_id: int, name: str, at: float) -> bool:
    """PUBLISH the exit as the shim announces it (jobs.backends.shim._announce)."""
    import json

    from django.conf import settings

    from jobs.backends.noderedis import publish, redis_target

    payload = json.dumps(
        {"job_id": job_id, "attempt": 1, "instance": name, "exit_code": None, "signal": 9, "exited_at": at, "run": 1}
    )
    return publish(redis_target(settings.REDIS_URL, settings.VIGIL_EXIT_CHANNEL), payload, 2.0)


def listener(tasks_q, run_jobs: bool) -> None:
    """The exit listener, the production command: its heartbeat, wake_monitor on each
    announcement, and run_job.delay, which here puts the task on the workers' queue
    (Celery puts it on the broker's default queue, behind the shard tasks already there)."""
    from django.db import connection

    from monitoring.management.commands import listen_exits

    class Broker:
        @staticmethod
        def delay(job_id: int) -> None:
            if run_jobs:
                tasks_q.put(("run_job", job_id, time.time()))

    connection.close()  # never share the parent's socket
    listen_exits.run_job = Broker  # type: ignore[assignment]
    logging.getLogger("monitoring.management.commands.listen_exits").setLevel(logging.WARNING)
    from django.conf import settings

    listen_exits.Command().handle(channel=settings.VIGIL_EXIT_CHANNEL)


class Counts:
    """SQL queries and Redis round trips made in this process."""

    sql = 0
    redis = 0
    statements: dict[str, int] | None = None  # by verb and table, when profiling

    @classmethod
    def install(cls) -> None:
        import redis.client
        from django.db import connection

        def counting(execute, sql, params, many, context):
            cls.sql += 1
            if cls.statements is not None:
                import re

                verb = sql.split(None, 1)[0].upper()
                table = re.search(r'(?:FROM|UPDATE|INTO)\s+"?(\w+)"?', sql)
                key = f"{verb} {table.group(1) if table else ''}"
                cls.statements[key] = cls.statements.get(key, 0) + 1
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


def worker(queues, results_q) -> None:
    """One worker process: take a task (a shard's sweep or a job's run_job, the production
    tasks) from its queues, run it, report. With two queues (a sweeping worker of the
    Procfile's `worker`, `-Q celery,vigil.exits`) it looks at the exits' queue whenever it is
    free, as Celery's consumer of several queues does between tasks."""
    from django.db import connection

    from monitoring import tasks

    connection.close()  # never share the parent's socket
    Counts.install()
    while True:
        task = _next_task(queues)
        if task is None:
            return
        kind, arg, _ = task
        sql, red, t0 = Counts.sql, Counts.redis, time.perf_counter()
        try:
            out = tasks.sweep(arg) if kind == "sweep" else tasks.run_job(arg)
        except Exception:  # noqa: BLE001 - a failed task, as Celery logs it; the worker goes on
            logging.getLogger("bench").exception("task %s(%s) failed", kind, arg)
            out = None
        results_q.put((kind, arg, out, time.perf_counter() - t0, Counts.sql - sql, Counts.redis - red, time.time()))


def _next_task(queues):
    if len(queues) == 1:
        return queues[0].get()
    while True:
        for q in reversed(queues):  # the exits' queue (last) first
            try:
                return q.get(timeout=0.005)
            except queue.Empty:
                continue


class Pool:
    def __init__(self, processes: int, exit_path: str, exits_queue: bool = True) -> None:
        from django.db import connections

        from jobs.models import Job
        from monitoring.tasks import exits_announced

        global EXITS
        ids = Job.objects.order_by("pk").values_list("pk", flat=True)
        ctx = multiprocessing.get_context("fork")
        EXITS = Exits(ctx, ids.first(), ids.last())
        connections.close_all()  # the children open their own
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        # As production routes it (console.settings CELERY_TASK_ROUTES): run_job on a queue of
        # its own, served by the Procfile's `decide` (one more process that never sweeps) and by
        # the sweeping workers when they are free. --shared-queue: run_job behind the sweeps.
        run_jobs_q = ctx.Queue() if exits_queue else self.tasks
        sweeping = [self.tasks, run_jobs_q] if exits_queue else [self.tasks]
        self.procs = [ctx.Process(target=worker, args=(sweeping, self.results), daemon=True) for _ in range(processes)]
        if exits_queue:
            self.procs.append(ctx.Process(target=worker, args=([run_jobs_q], self.results), daemon=True))
        self.queues = [self.tasks, run_jobs_q] if exits_queue else [self.tasks]
        self.listener = ctx.Process(target=listener, args=(run_jobs_q, exit_path == "listener"), daemon=True)
        for p in [self.listener, *self.procs]:
            p.start()
        self.run_jobs: list[tuple] = []  # (job_id, action, seconds, sql, redis, done_at)
        deadline = time.time() + 30
        while not exits_announced():  # the listener's first heartbeat
            if time.time() > deadline:
                raise RuntimeError("the exit listener did not start")
            time.sleep(0.05)

    def _take(self, timeout: float):
        """One result: a shard's (returned) or a run_job's (kept in self.run_jobs)."""
        kind, arg, out, dt, q, r, done_at = self.results.get(timeout=timeout)
        if kind == "sweep":
            return arg, out, dt, q, r
        self.run_jobs.append((arg, out, dt, q, r, done_at))
        return None

    def drain(self) -> None:
        """run_job results that came between rounds."""
        while True:
            try:
                self._take(0)
            except queue.Empty:
                return

    def round(self, shards: int, during=None) -> tuple[float, int, int, int]:
        """Every shard swept once; wall time, jobs ticked, queries, Redis round trips."""
        t0 = time.perf_counter()
        for shard in range(shards):
            self.tasks.put(("sweep", shard, time.time()))
        done, ticked, sql, red = 0, 0, 0, 0
        while done < shards:
            try:
                got = self._take(0.01)
            except queue.Empty:
                got = None
                if not all(p.is_alive() for p in [self.listener, *self.procs]):
                    raise RuntimeError("a worker process or the exit listener died")
            if during is not None:
                during()
            if got is None:
                continue
            _, n, _, q, r = got
            done, ticked, sql, red = done + 1, ticked + (n or 0), sql + q, red + r
        return time.perf_counter() - t0, ticked, sql, red

    def close(self) -> None:
        for q in self.queues:  # a stop for every process on every queue it may read
            for _ in self.procs:
                q.put(None)
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.kill()
        self.listener.kill()  # its loop never ends; stopped by its own PID
        self.listener.join(10)


def lateness() -> float:
    """How late the latest scheduled check of a Running job is as a round starts (0 if
    none is): a hang deadline or periodic check runs at best this late."""
    from django.db.models import Min

    from jobs.models import Job, JobStatus

    oldest = Job.objects.filter(status=JobStatus.RUNNING, monitor_next_check_at__isnull=False).aggregate(
        at=Min("monitor_next_check_at")
    )["at"]
    return max(0.0, time.time() - oldest.timestamp()) if oldest is not None else 0.0


def quiet_stretches(shards: int) -> list[float]:
    """Each shard's factor on the quiet period as its last sweep left it (monitoring.schedule)."""
    from monitoring import schedule

    return [schedule.stretch_of(shard) for shard in range(shards)]


def pick(values: list[float], p: float) -> float:
    """The p-quantile of sorted values (nan if none)."""
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def routed_exits(args) -> bool:
    """run_job on a queue of its own, as console.settings routes it (unless --shared-queue)."""
    from django.conf import settings

    return not args.shared_queue and "monitoring.tasks.run_job" in settings.CELERY_TASK_ROUTES


def measure(size: int, processes: int, args, cadence: float, shards: int) -> dict:
    from django.conf import settings

    from jobs.models import Job, JobStatus, RestartRecord

    from infra.client import redis_client

    # Each run finds its own pace: no stretch left by the run before.
    redis_client().delete(*(f"vigil:monitor:quiet-stretch:{shard}" for shard in range(shards)))
    pool = Pool(processes, args.exit_path, routed_exits(args))
    try:
        first = pool.round(shards)
        # Rounds not measured, for the shards to find their pace after the first round
        # (every job new and due at once): the quiet period stretches while a shard is
        # behind (core.pacing), and a stretched job's next tick is up to a period away.
        settle_until = time.perf_counter() + args.settle
        while time.perf_counter() < settle_until:
            started = time.perf_counter()
            pool.round(shards)
            time.sleep(max(0.0, cadence - (time.perf_counter() - started)))
        steady, late = [], []
        # Steady rounds for longer than the longest quiet period, so that every job's
        # scheduled ticks (and the periodic checks due in that window) are paid for.
        until = time.perf_counter() + args.steady_seconds
        while len(steady) < args.sweeps or time.perf_counter() < until:
            started = time.perf_counter()
            late.append(lateness())
            steady.append(pool.round(shards))
            time.sleep(max(0.0, cadence - (time.perf_counter() - started)))
        stretch = quiet_stretches(shards)
        # The first round ticks every job (all new); a job not ticked by it was left by a
        # shard whose lease ran out mid-sweep (its worker starved past the lease).
        short = size - first[1]
        sweep = statistics.median(s[0] for s in steady)
        # Exits at random moments, about three per round, into jobs not yet hit.
        rng = random.Random(size * 10 + processes)
        candidates = list(Job.objects.filter(status=JobStatus.RUNNING, current_attempt=1).values_list("pk", flat=True))
        rng.shuffle(candidates)
        injected: dict[int, float] = {}
        gap = 1 / args.exit_rate  # the mean time between two exits (uniform in 0..2 gaps)
        next_at = [time.time() + rng.uniform(0, gap)]

        def maybe_inject() -> None:
            if len(injected) < args.exits and time.time() >= next_at[0]:
                job_id, which = candidates[len(injected)], rng.randrange(WORKERS)
                at = injected[job_id] = time.time()
                assert EXITS is not None
                EXITS.inject(job_id, which, at)  # on disk first, then announced
                if not announce(job_id, f"worker-{which}", at):
                    print(f"    (the announcement of job {job_id}'s exit failed)", flush=True)
                next_at[0] = time.time() + rng.uniform(0, 2 * gap)

        deadline = time.time() + 60 + 2 * gap * args.exits
        decided: dict[int, float] = {}
        while len(decided) < args.exits and time.time() < deadline:
            started = time.perf_counter()
            pool.round(shards, during=maybe_inject)
            maybe_inject()
            for job_id, at in RestartRecord.objects.filter(job_id__in=list(injected)).values_list(
                "job_id", "restart_time"
            ):
                decided.setdefault(job_id, at.timestamp())
            while time.perf_counter() - started < cadence:
                maybe_inject()
                pool.drain()
                time.sleep(0.005)
        time.sleep(0.2)
        pool.drain()
        latencies = sorted(decided[j] - injected[j] for j in decided)
        failed = Job.objects.filter(pk__in=list(injected), status=JobStatus.FAILED).count()
        by_run_job = {j for j, action, *_ in pool.run_jobs if j in injected and action not in (None, "none")}
        # ... and until its run_job task was done (the restart launched, the events written).
        done = sorted(r[5] - injected[r[0]] for r in pool.run_jobs if r[0] in injected and r[1] not in (None, "none"))
        run_job_seconds = sorted(r[2] for r in pool.run_jobs)
    finally:
        pool.close()
    pct = lambda p: pick(latencies, p)  # noqa: E731
    rounds = len(steady)
    late.sort()
    return {
        "late_p50": pick(late, 0.5),
        "late_max": late[-1],
        "quiet": [round(settings.MONITOR_QUIET_SECONDS * x, 1) for x in stretch],
        "short": short,
        "first": first[0],
        "sweep": sweep,
        "sweep_max": max(s[0] for s in steady),
        "rounds": rounds,
        "ticks": sum(s[1] for s in steady) / rounds / size,
        "sql": sum(s[2] for s in steady) / rounds / size,
        "redis": sum(s[3] for s in steady) / rounds / size,
        "first_sql": first[2] / size,
        "injected": len(injected),
        "decided": len(decided),
        "failed": failed,
        "p50": pct(0.50),
        "p99": pct(0.99),
        "max": latencies[-1] if latencies else float("nan"),
        "done_p50": pick(done, 0.50),
        "done_p99": pick(done, 0.99),
        "run_jobs": len(run_job_seconds),
        "by_run_job": len(by_run_job & set(decided)),
        "run_job_median": statistics.median(run_job_seconds) if run_job_seconds else float("nan"),
    }


def profile(size: int, shards: int) -> None:
    """Where a sweep's time and statements go, in this process: the first round (every
    job new), a round where every steady job is due (its scheduled tick), and a round
    with none due (the list queries only)."""
    import cProfile
    import io
    import pstats

    from infra import health
    from jobs.models import Job
    from monitoring import tasks

    Counts.install()
    Counts.statements = {}

    def one(title: str) -> None:
        health.record(health.EXITS)  # the listener's heartbeat: the schedule is trusted
        Counts.statements, sql, red = {}, Counts.sql, Counts.redis
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        ticked = sum(tasks.sweep(shard) or 0 for shard in range(shards))
        prof.disable()
        took = time.perf_counter() - t0
        print(
            f"\n  {title}: {ticked} ticks in {took:.3f} s under cProfile ({took / max(ticked, 1) * 1000:.2f} ms/tick), "
            f"{Counts.sql - sql} queries, {Counts.redis - red} Redis round trips; load "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        report(prof)

    def report(prof) -> None:
        print(
            "    statements: "
            + ", ".join(f"{k} {v}" for k, v in sorted(Counts.statements.items(), key=lambda kv: -kv[1]))
        )
        for order in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats(order).print_stats(18)
            text = out.getvalue()
            print(
                "    by "
                + order
                + ":\n"
                + "\n".join("      " + line for line in text[text.index("ncalls") :].rstrip().splitlines())
            )

    one(f"first round, {size} new jobs")
    Job.objects.update(monitor_next_check_at=None)  # every steady job due: its scheduled tick
    one(f"steady round, all {size} jobs due")
    one("steady round, none due")

    # The exit path: run_job of jobs with an instance just killed (the listener's task).
    from jobs.backends import get_backend
    from jobs.models import Attempt

    backend = get_backend("local")
    handles = dict(Attempt.objects.filter(number=1).order_by("job_id").values_list("job_id", "backend_handle")[:20])
    Counts.statements, sql, red = {}, Counts.sql, Counts.redis
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    for job_id, handle in handles.items():
        backend.finish(handle, "worker-1", exit_code=None, signal=9)
        prof.enable()
        tasks.run_job(job_id)
        prof.disable()
    took = time.perf_counter() - t0
    print(
        f"\n  run_job of {len(handles)} jobs with an instance killed: {took / len(handles) * 1000:.1f} ms each, "
        f"{(Counts.sql - sql) / len(handles):.1f} queries and {(Counts.redis - red) / len(handles):.1f} Redis "
        f"round trips each"
    )
    report(prof)


def fit(points: list[tuple[int, float]]) -> str:
    """The least-squares line through (jobs, seconds): its slope per job and its intercept."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")
    return f"{slope * 1e6:.1f} us/job + {my - slope * mx:.3f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts")
    parser.add_argument("--sweeps", type=int, default=3, help="steady-state rounds per run (median reported)")
    parser.add_argument("--exits", type=int, default=50, help="injected instance exits per run")
    parser.add_argument(
        "--instances", type=int, default=WORKERS + 1, help="instances per job (1 Master, the rest Workers)"
    )
    parser.add_argument("--shards", type=int, default=0, help="VIGIL_MONITOR_SHARDS (0: the production default)")
    parser.add_argument(
        "--quiet",
        type=float,
        default=None,
        help="VIGIL_MONITOR_QUIET_SECONDS (default: the production default; 0 ticks every job every sweep)",
    )
    parser.add_argument(
        "--quiet-max",
        type=float,
        default=None,
        help="VIGIL_MONITOR_QUIET_MAX_SECONDS (default: the production default; the quiet period: never stretch)",
    )
    parser.add_argument(
        "--steady-seconds",
        type=float,
        default=None,
        help="how long the steady phase runs (default: the quiet period plus 2 s)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds of rounds between the first round and the steady phase, not measured "
        "(for the shards' quiet periods to find their pace)",
    )
    parser.add_argument("--exit-rate", type=float, default=2.0, help="injected exits per second, on average")
    parser.add_argument(
        "--shared-queue",
        action="store_true",
        help="run_job on the sweeps' queue, no `decide` process (the layout before CELERY_TASK_ROUTES)",
    )
    parser.add_argument(
        "--exit-path",
        choices=("listener", "sweep"),
        default="listener",
        help="listener: production's (wake_monitor and a run_job task); sweep: the wake only",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile one first and one steady sweep of the first size in this process instead",
    )
    parser.add_argument(
        "--postgres",
        nargs="?",
        const="postgres://postgres@127.0.0.1:5432",
        default=None,
        help="PostgreSQL server URL (without database) instead of SQLite",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still drops the database and stops Redis
    if args.instances < 2:
        parser.error("--instances: at least 2 (a Master and a Worker)")
    globals()["WORKERS"] = args.instances - 1
    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(w) for w in args.workers.split(",")]
    if args.shards:
        os.environ["VIGIL_MONITOR_SHARDS"] = str(args.shards)
    if args.quiet is not None:
        os.environ["VIGIL_MONITOR_QUIET_SECONDS"] = str(args.quiet)
    if args.quiet_max is not None:
        os.environ["VIGIL_MONITOR_QUIET_MAX_SECONDS"] = str(args.quiet_max)

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
    print(
        f"  machine: {platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at start, python {platform.python_version()}, "
        f"Django {django.get_version()}"
    )
    print(
        f"  database: {connection.vendor} {settings.DATABASES['default']['NAME']} (throwaway); "
        f"Redis {settings.REDIS_URL}"
    )
    print(f"  jobs: Sync PyTorchJob, 1 Master + {WORKERS} Workers, flags {SEED_SYNC!r}; in-memory backend")
    print(
        f"  {shards} shards, rounds at most every {cadence} s; worker processes {counts}; "
        f"first round, {args.settle:g} s of rounds to settle, then steady rounds for {args.steady_seconds:g} s "
        f"(at least {args.sweeps}), "
        f"then {args.exits} injected exits (SIGKILL), {args.exit_rate:g} a second on average"
    )
    print(
        f"  quiet period {settings.MONITOR_QUIET_SECONDS:g} s (stretching up to {settings.MONITOR_QUIET_MAX_SECONDS:g} s "
        f"while a shard is behind): a steady job is ticked at its scheduled check or "
        f"when woken; exit path {args.exit_path!r}: "
        + (
            "the exit listener wakes the job and enqueues run_job "
            + (
                "on the workers' queue (--shared-queue)"
                if not routed_exits(args)
                else "on its own queue (vigil.exits), served by one more process that does not sweep "
                "(the Procfile's decide) and by the sweeping workers when free"
            )
            if args.exit_path == "listener"
            else "the exit listener wakes the job, no run_job task (the latency is the sweep's)"
        )
    )
    backend = use_memory_backend()
    owner = get_user_model().objects.create_user("bench", "bench@example.com", "bench-password-123")
    ws = Workspace.objects.create(name="Bench", slug="bench")
    Membership.objects.create(workspace=ws, user=owner, role=Role.OWNER)

    logging.getLogger("vigil.decisions").setLevel(logging.ERROR)  # one line per injected exit otherwise
    rows = []
    try:
        if args.profile:
            create_running_jobs(sizes[0], backend, owner, ws)
            profile(sizes[0], shards)
            return
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
                print(
                    f"  {size:>6} jobs x {WORKERS + 1}, {processes} worker(s): first {r['first']:6.2f} s "
                    f"({r['first_sql']:.2f} queries/job), steady sweep median {r['sweep']:6.3f} s, "
                    f"max {r['sweep_max']:.3f} s over {r['rounds']} rounds "
                    f"({r['sweep'] / size * 1000:.4f} ms/job); scheduled checks late by p50 {r['late_p50']:.2f} s, "
                    f"max {r['late_max']:.2f} s; quiet period by shard {r['quiet']} s; "
                    f"per job per round: {r['ticks']:.3f} ticks, "
                    f"{r['sql']:.3f} queries, {r['redis']:.4f} Redis round trips; decision latency p50 {r['p50']:.3f} s, "
                    f"p99 {r['p99']:.3f} s, max {r['max']:.3f} s ({r['decided']}/{r['injected']} exits decided, "
                    f"{r['by_run_job']} by run_job, {r['failed']} failed the job; those run_job tasks done "
                    f"p50 {r['done_p50']:.3f} s, p99 {r['done_p99']:.3f} s after the exit; {r['run_jobs']} run_job tasks, "
                    f"median {r['run_job_median'] * 1000:.1f} ms; {r['short']} job ticks left by lost leases)  "
                    f"[setup {setup:.0f} s, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}]",
                    flush=True,
                )
        print("\n  fitted cost per job (least squares over the sizes, by worker processes):")
        for processes in counts:
            pts = [(size, r) for size, p, r in rows if p == processes]
            if len(pts) >= 2:
                line = ", ".join(
                    f"{name} {fit([(x, r[key]) for x, r in pts])}"
                    for name, key in (("steady sweep", "sweep"), ("first round", "first"), ("decision p99", "p99"))
                )
                print(f"    {processes} worker(s), {', '.join(str(x) for x, _ in pts)} jobs: {line}")
        print(f"  load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if args.postgres:
            drop_postgres(args.postgres)
        if redis is not None:
            redis.stop()


if __name__ == "__main__":
    main()
