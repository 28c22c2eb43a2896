"""Chaos suite (issue 20): faults injected into a real console, invariants checked after each.

What it starts, per database, all its own and all on loopback:
  * a private redis-server (console.devredis.PrivateRedis) on a free port;
  * a fresh VIGIL_DATA_DIR, and a database migrated there: SQLite in the data dir, or a
    PostgreSQL database of its own (--pg-url, default postgres://postgres@127.0.0.1:5432/vigil_chaos,
    dropped and created again);
  * the Procfile's three processes, each in a session of its own: `web` (daphne on a free
    port), `worker` (celery -A console worker --beat) and `exits` (manage.py listen_exits);
  * a user with the site permission to run on the local backend, a workspace, and an API
    token made by `manage.py createapitoken`.

Jobs are submitted through the REST API (POST /api/v1/jobs/): 2-rank PyTorchJobs (Master +
Worker) on the real local backend running a small script (no torch: the cores are shared)
that prints a step every 0.2 s. A job "with a fault" has rank 1 die once with a retryable
NCCL error, so the monitor must restart the whole job exactly once.

Experiments (each bounded in count and time; --only picks some by name):
  fault@<step>   the worker dies (SIGKILL of its process group) at a named step of the
                 restart or launch sequence: jobs.faults' VIGIL_FAULT_POINT hook, one
                 experiment per step in jobs.faults.POINTS (F1 and F2 of issue 20)
  worker-kill    the worker's group is SIGKILLed mid-job; rank 1 fails while it is down
  redis-stop     Redis is SIGSTOPped for --stall seconds; rank 1 fails and a job is submitted
                 meanwhile (submission latency must stay under 2 s)
  redis-kill     Redis is SIGKILLed and started again 5 s later (empty: queued tasks are lost)
  web-kill       daphne is SIGKILLed under a WebSocket follower, which reconnects with its
                 offsets and last event id: no line lost or doubled, every event received once,
                 the failed attempt's last line shown before the new attempt's
  exits-kill     the exit listener is SIGKILLed; rank 1 fails while it is down
  db-lock        SQLite: another connection holds the write lock for 10 s; PostgreSQL: every
                 console connection is terminated (pg_terminate_backend) ten times over 5 s
  burst          40 jobs submitted at once, 10 of them with a fault
  console-restart  web, worker and exits are stopped (SIGTERM) with jobs running and started
                 again 5 s later; rank 1 fails while they are down

Invariants checked after each, from the API and the database: the final status (Succeeded),
exactly one restart record per fault and restart_count equal to it (the budget used once),
attempts = faults + 1, the failed rank's exit code recorded (1), no event recorded twice (same
type, attempt, instance and message), no orphaned process (PIDs from the state files under the
data dir, and any process whose working directory is in the job's directory).

Run:   .venv/bin/python bench/chaos.py                  # everything, SQLite then PostgreSQL
       .venv/bin/python bench/chaos.py --quick          # worker-kill + redis-stop, SQLite (CI)
       .venv/bin/python bench/chaos.py --quick --db postgres --pg-url postgres://...  # the same on PostgreSQL
       .venv/bin/python bench/chaos.py --db sqlite --only worker-kill,fault@launch.after_claim
Exit status 0 when every row held. CHAOS_KEEP=1 keeps the data dirs (logs of every process).
"""

from __future__ import annotations

import _path  # first: the repository root on sys.path (bench/_path.py)
import argparse
import asyncio
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = _path.ROOT
BIN = _path.BIN
PYTHON = str(BIN / "python") if (BIN / "python").exists() else sys.executable
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/vigil_chaos"
FLAGS = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg"
)
SUBMIT_TARGET = 2.0  # seconds: a submission must answer within this during a Redis stall
# Shorter than the defaults so that an abandoned launch is taken over within the bounds here.
CONSOLE_ENV = {
    "VIGIL_STOP_GRACE_SECONDS": "3",
    "VIGIL_RESTART_GRACE_SECONDS": "2",
    "VIGIL_MONITOR_SWEEP_SECONDS": "1",
    "VIGIL_LAUNCH_LEASE_SECONDS": "5",
    "VIGIL_RELAUNCH_AFTER_SECONDS": "3",
    "VIGIL_WORKERS": "2",
    "VIGIL_LOG_LEVEL": "INFO",
}
QUICK = ("worker-kill", "redis-stop")

# The training script. Every rank prints "step=N rank=R attempt=A" every CHAOS_EVERY s and
# ends 0 when CHAOS_DONE exists (or after CHAOS_STEPS steps). With CHAOS_FAULT_ONCE set, rank 1
# fails once (the marker file says it did), at step CHAOS_FAULT_STEP or, with CHAOS_FAULT_GO,
# at the first step after that file exists.
TRAIN = textwrap.dedent("""
    import os, sys, time
    rank, attempt = int(os.environ["RANK"]), os.environ.get("VIGIL_ATTEMPT", "?")
    steps, every = int(os.environ.get("CHAOS_STEPS", "900")), float(os.environ.get("CHAOS_EVERY", "0.2"))
    once, go, done = (os.environ.get(k) for k in ("CHAOS_FAULT_ONCE", "CHAOS_FAULT_GO", "CHAOS_DONE"))
    fault_step = int(os.environ.get("CHAOS_FAULT_STEP", "3"))
    for step in range(1, steps + 1):
        print(f"step={step} rank={rank} attempt={attempt}", flush=True)
        if rank == 1 and once and step >= fault_step and (not go or os.path.exists(go)):
            try:
                os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                print(f"last words of attempt {attempt}", flush=True)
                sys.stderr.write("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, "
                                 "unhandled system error, NCCL version 2.18.1\\n")
                sys.exit(1)
        if done and os.path.exists(done):
            break
        time.sleep(every)
    print(f"done rank={rank} attempt={attempt}", flush=True)
""")


class ExperimentFailed(Exception):
    """The experiment could not be carried out as planned (not an invariant)."""


def wait_until(predicate, timeout: float, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine_line() -> str:
    import psutil

    mem = psutil.virtual_memory().total / 2**30
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, {mem:.1f} GiB, load {load}, "
        f"python {platform.python_version()}"
    )


def git_line() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], capture_output=True, text=True, timeout=10
        ).stdout.strip()[:100]
    except (OSError, subprocess.SubprocessError):
        return "?"


# --- the console -------------------------------------------------------------------------------


class Console:
    """A private Redis, a data dir, a database and the Procfile's processes; Django set up
    in this process too (the invariants are read through the ORM as well as the API)."""

    def __init__(self, db: str, pg_url: str, tmp: Path):
        from console.devredis import PrivateRedis

        self.db = db
        self.tmp = tmp
        self.data = tmp / "data"
        self.data.mkdir(parents=True)
        # Run as root (CI is), the console runs each job as nobody: it must reach the
        # interpreter and its script, and write its markers (docs/security.md).
        from testsupport.jobs import let_jobs_reach

        let_jobs_reach(tmp)
        if not shutil.which("redis-server"):
            raise SystemExit("the chaos suite needs redis-server on PATH (it stops and kills its own Redis)")
        self.redis = PrivateRedis().start()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.started: list[subprocess.Popen] = []
        self.pg_url = pg_url
        database_url = f"sqlite:///{self.data / 'vigil.sqlite3'}" if db == "sqlite" else pg_url
        if db == "postgres":
            self._fresh_pg_database()
        self.env = dict(
            os.environ,
            VIGIL_DATA_DIR=str(self.data),
            REDIS_URL=self.redis.url,
            CELERY_BROKER_URL=self.redis.url,
            DATABASE_URL=database_url,
            DJANGO_SETTINGS_MODULE="console.settings",
            VIGIL_CONSOLE_URL=self.url,
            VIGIL_PORT=str(self.port),
            VIGIL_BIND="127.0.0.1",
            **CONSOLE_ENV,
        )
        self.env["PATH"] = f"{BIN}:{self.env.get('PATH', '')}"
        for key in ("VIGIL_FAULT_POINT", "VIGIL_FAULT_ONCE"):
            self.env.pop(key, None)
        os.environ.update(
            {
                k: self.env[k]
                for k in (
                    "VIGIL_DATA_DIR",
                    "REDIS_URL",
                    "CELERY_BROKER_URL",
                    "DATABASE_URL",
                    "DJANGO_SETTINGS_MODULE",
                    "VIGIL_CONSOLE_URL",
                    *CONSOLE_ENV,
                )
            }
        )
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0, interactive=False)
        self._people()
        self.commands = self._procfile()
        self.script = self.data / "train.py"
        self.script.write_text(TRAIN)
        self.seq = 0

    def _fresh_pg_database(self, create: bool = True):
        import psycopg
        from urllib.parse import urlsplit

        parts = urlsplit(self.pg_url)
        name = parts.path.lstrip("/")
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise SystemExit(f"--pg-url: database name {name!r} must be letters, digits and _")
        admin = parts._replace(path="/postgres").geturl()
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            if create:
                conn.execute(f"CREATE DATABASE {name}")

    def _people(self):
        from django.contrib.auth import get_user_model
        from django.contrib.sessions.backends.db import SessionStore

        from jobs.models import Membership, Role, Workspace

        get_user_model().objects.create_user("chaos", "chaos@example.com", "chaos-password-123")
        self.manage("backendaccess", "grant", "local", "--user", "chaos")
        self.token = self.manage("createapitoken", "chaos", "--name", "chaos").strip().splitlines()[-1]
        user = get_user_model().objects.get(username="chaos")
        self.workspace = Workspace.objects.create(name="Chaos", slug="chaos")
        Membership.objects.create(workspace=self.workspace, user=user, role=Role.OWNER)
        session = SessionStore()  # the WebSocket follower logs in with a session cookie
        session["_auth_user_id"] = str(user.pk)
        session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
        session["_auth_user_hash"] = user.get_session_auth_hash()
        session.create()
        self.session = session.session_key

    def manage(self, *args) -> str:
        out = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )
        if out.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed: {out.stderr[-2000:]}")
        return out.stdout

    def _procfile(self) -> dict[str, str]:
        commands = {}
        for line in (ROOT / "Procfile").read_text().splitlines():
            name, _, cmd = line.partition(":")
            if not cmd.strip():
                continue
            cmd = cmd.strip().replace("var/celerybeat-schedule", str(self.data / "celerybeat-schedule"))
            cmd = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: self.env.get(m.group(1), m.group(2)), cmd)
            commands[name.strip()] = cmd
        return commands

    # -- processes ---------------------------------------------------------------------------------
    def log_path(self, name: str) -> Path:
        return self.data / f"{name}.log"

    def start(self, name: str, extra_env: dict | None = None, wait: bool = True) -> subprocess.Popen:
        if name in self.procs and self.procs[name].poll() is None:
            raise ExperimentFailed(f"{name} is already running")
        env = dict(self.env, **(extra_env or {}))
        log = open(self.log_path(name), "ab")
        log.write(f"\n===== chaos: starting {name} at {time.time():.3f} {extra_env or ''} =====\n".encode())
        log.flush()
        mark = log.tell()
        proc = subprocess.Popen(
            shlex.split(self.commands[name]),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        self.started.append(proc)
        self._record_pgids()
        if wait:
            self._wait_ready(name, proc, mark)
        return proc

    def _wait_ready(self, name, proc, mark):
        def ready():
            if proc.poll() is not None:
                raise ExperimentFailed(
                    f"{name} exited with {proc.returncode} while starting: "
                    + self.log_path(name).read_text(errors="replace")[-1500:]
                )
            if name == "web":
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return True
                except OSError:
                    return False
            with open(self.log_path(name), "rb") as f:
                f.seek(mark)
                text = f.read().decode(errors="replace")
            return ("ready." in text) if name in ("worker", "decide") else ("listening for instance exits" in text)

        if not wait_until(ready, 90, 0.2):
            raise ExperimentFailed(f"{name} did not become ready within 90 s")

    def kill(self, name: str, sig=signal.SIGKILL, timeout: float = 20.0) -> None:
        """Signal a process's whole group (its session); SIGKILL after `timeout`."""
        proc = self.procs.get(name)
        if proc is None:
            return
        if proc.poll() is not None:
            self._reap_group(proc.pid)
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        self._reap_group(proc.pid)

    @staticmethod
    def _reap_group(pgid: int) -> None:
        """Pool children of a killed worker die with its group; make sure none lingers."""
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _record_pgids(self):
        # For the parent process: the groups to kill if this one is killed before its cleanup.
        (self.tmp / "pgids").write_text("\n".join(str(p.pid) for p in self.started) + "\n")

    def close(self):
        for proc in self.started:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self.started:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
            self._reap_group(proc.pid)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        try:
            from jobs.backends import get_backend

            get_backend("local").stop_everything(grace=0.5)
        except Exception as exc:  # noqa: BLE001 - cleanup goes on
            print(f"  (cleanup of instances: {exc})")
        try:
            os.kill(self.redis.process.pid, signal.SIGCONT)
        except (AttributeError, ProcessLookupError):
            pass
        self.redis.stop()
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: BLE001
            pass
        if self.db == "postgres" and not os.environ.get("CHAOS_KEEP"):
            self._fresh_pg_database(create=False)

    # -- Redis -------------------------------------------------------------------------------------
    def redis_signal(self, sig):
        os.kill(self.redis.process.pid, sig)

    def redis_restart_after_kill(self):
        self.redis.process.wait(10)
        self.redis.start()  # same port, nothing kept on disk: an empty Redis

    # -- jobs --------------------------------------------------------------------------------------
    def api(self, method: str, path: str, body=None, timeout: float = 60.0):
        import requests

        return requests.request(
            method, self.url + path, json=body, timeout=timeout, headers={"Authorization": f"Bearer {self.token}"}
        )

    def new_job_files(self, fault: bool) -> dict:
        from testsupport.jobs import job_writable

        self.seq += 1
        base = self.tmp / "control" / f"j{self.seq}"
        job_writable(base)  # the job leaves its fault marker here
        files = {"done": base / "done"}
        if fault:
            files.update(once=base / "fault-fired", go=base / "go")
        return files

    def submit(
        self, name: str, fault: bool, controlled: bool = True, steps: int = 900, timeout: float = 60.0
    ) -> tuple["JobRun", float, int]:
        """Submit through the API; (the job, seconds the POST took, its HTTP status)."""
        files = self.new_job_files(fault)
        envs = {"CHAOS_STEPS": str(steps), "CHAOS_EVERY": "0.2"}
        if controlled:
            envs["CHAOS_DONE"] = str(files["done"])
        if fault:
            envs["CHAOS_FAULT_ONCE"] = str(files["once"])
            if controlled:
                envs["CHAOS_FAULT_GO"] = str(files["go"])
        body = {
            "workspace": "chaos",
            "display_name": name,
            "job_type": "PyTorchJob",
            "job_specs": [{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 1}],
            "user_command": f"exec {shlex.quote(PYTHON)} -u {shlex.quote(str(self.script))}",
            "envs": envs,
            "backend": "local",
            "settings": {"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": FLAGS},
        }
        t0 = time.monotonic()
        resp = self.api("POST", "/api/v1/jobs/", body, timeout=timeout)
        took = time.monotonic() - t0
        if resp.status_code != 201:
            raise ExperimentFailed(f"submission answered {resp.status_code}: {resp.text[:300]}")
        return JobRun(self, resp.json()["id"], files, 1 if fault else 0), took, resp.status_code


class JobRun:
    def __init__(self, console: Console, job_id: int, files: dict, faults: int):
        self.c, self.id, self.files, self.faults = console, job_id, files, faults

    def job(self):
        from jobs.models import Job

        return Job.objects.get(pk=self.id)

    def running_attempt(self, number: int) -> bool:
        """Attempt `number` is Running, with both ranks running and each has printed a step."""
        from jobs.models import Attempt

        a = Attempt.objects.filter(job_id=self.id, number=number).first()
        if a is None or a.status != "Running" or not a.backend_handle:
            return False
        insts = list(a.instances.all())
        if len(insts) != 2 or any(i.status != "Running" for i in insts):
            return False
        for inst in insts:
            try:
                text = (Path(a.backend_handle["dir"]) / inst.name / "output.log").read_text(errors="replace")
            except OSError:
                return False
            if f"attempt={number}\n" not in text:
                return False
        return True

    def wait_running(self, number: int, timeout: float = 90.0) -> None:
        if not wait_until(lambda: self.running_attempt(number), timeout, 0.3):
            job = self.job()
            raise ExperimentFailed(
                f"job {self.id}: attempt {number} not running with both ranks within "
                f"{timeout:g} s (job {job.status}, attempt {job.current_attempt}: {job.reason[:200]})"
            )

    def fire(self):
        self.files["go"].touch()

    def fired(self) -> bool:
        return self.files["once"].exists()

    def finish(self):
        self.files["done"].touch()

    def wait_finished(self, timeout: float = 90.0) -> str:
        from jobs.models import FINISHED_JOB_STATUSES

        wait_until(lambda: self.job().status in FINISHED_JOB_STATUSES, timeout, 0.3)
        return self.job().status

    def complete(self, timeout: float = 120.0) -> str:
        """After the fault: wait for the new attempt to train, then let the job end."""
        deadline = time.monotonic() + timeout
        try:
            self.wait_running(self.faults + 1, max(5.0, deadline - time.monotonic()))
        except ExperimentFailed as exc:
            return f"not finished ({exc})"  # the checks then show how the job was left
        self.finish()
        return self.wait_finished(max(5.0, deadline - time.monotonic()))


# --- invariants --------------------------------------------------------------------------------


def live_pids_of(console: Console, job_id: int) -> list[str]:
    """Processes of the job still alive: PIDs from every state file under its directory (current
    and archived, checked against their recorded start time), and any process working in it."""
    import psutil

    from jobs.backends import shim

    from jobs.models import FINISHED_JOB_STATUSES, Job

    job = Job.objects.get(pk=job_id)
    # While the job is still live (an experiment that failed), its current attempt's ranks are not orphans.
    current = None if job.status in FINISHED_JOB_STATUSES else f"attempt-{job.current_attempt}"
    job_dir = console.data / "local-backend" / "jobs" / str(job_id)
    alive, known = [], set()
    for state_file in job_dir.glob("*/*/state*.json"):
        state = shim.read_json(str(state_file)) or {}
        for role in ("child", "shim"):
            pid, start = state.get(f"{role}_pid"), state.get(f"{role}_start")
            if pid and start is not None and shim.proc_start_ticks(pid) == start:
                known.add(pid)
                if state_file.parent.parent.name != current:
                    alive.append(f"{role} {pid} ({state_file.parent.parent.name}/{state_file.parent.name})")
    prefix = str(job_dir) + os.sep
    for p in psutil.process_iter(["pid", "cwd"]):
        cwd = p.info.get("cwd") or ""
        if (cwd + os.sep).startswith(prefix) and p.pid not in known:
            alive.append(f"pid {p.pid} in {cwd[len(prefix) :] or '.'}")
    return alive


def check_job(run: JobRun, expect: str = "Succeeded") -> list[tuple[str, bool, str]]:
    """(invariant, held, evidence) for one job, from the API and the database."""
    from jobs.models import Instance, JobEvent

    c = run.c
    checks = []
    detail = c.api("GET", f"/api/v1/jobs/{run.id}/").json()
    restarts = c.api("GET", f"/api/v1/jobs/{run.id}/restarts/").json()
    attempts = c.api("GET", f"/api/v1/jobs/{run.id}/attempts/").json()
    checks.append(
        (
            "status",
            detail["status"] == expect,
            f"{detail['status']}" + (f" ({detail['reason'][:120]})" if detail["status"] != expect else ""),
        )
    )
    checks.append(
        (
            "restart records",
            len(restarts) == run.faults,
            f"{len(restarts)} for {run.faults} fault(s)"
            + "".join(f"; #{r['number']} {r['kind']} {r['error_code']} {r['result']}" for r in restarts),
        )
    )
    checks.append(
        ("budget used once", detail["restart_count"] == run.faults, f"restart_count {detail['restart_count']}")
    )
    checks.append(
        (
            "attempts",
            len(attempts) == run.faults + 1,
            f"{len(attempts)}: " + ", ".join(f"{a['number']} {a['status']}" for a in attempts),
        )
    )
    if run.faults:
        failed = Instance.objects.filter(attempt__job_id=run.id, attempt__number=1, rank=1).first()
        checks.append(
            (
                "failed rank's exit recorded",
                failed is not None and failed.exit_code == 1,
                f"attempt 1 rank 1: {failed.status if failed else '-'} exit {failed.exit_code if failed else '-'}",
            )
        )
    events = list(JobEvent.objects.filter(job_id=run.id).values_list("type", "attempt", "instance", "message"))
    dup = [k for k, n in Counter(events).items() if n > 1]
    checks.append(("events once", not dup, f"{len(events)} events" + (f"; doubled: {dup[:2]}" if dup else "")))
    orphans = wait_until(lambda: not live_pids_of(c, run.id), 10, 0.5) or live_pids_of(c, run.id)
    orphans = [] if orphans is True else orphans
    checks.append(("no orphan", not orphans, "none" if not orphans else "; ".join(orphans[:4])))
    return checks


# --- the WebSocket follower (web-kill) ----------------------------------------------------------


class Follower:
    """Follows one job's live view (current attempt, all instances) in a thread of its own,
    reconnecting with its offsets and last event id the way the page does."""

    def __init__(self, console: Console, job_id: int):
        sys.path.insert(0, str(ROOT / "bench"))
        from log_stream import WebSocket  # the benchmarks' minimal RFC 6455 client

        self.WebSocket = WebSocket
        self.c, self.job_id = console, job_id
        self.offsets: dict[str, int] = {}
        self.gaps: list[str] = []
        self.lines: list[tuple[str, str]] = []  # (attempt:instance, line)
        self.event_ids: list[int] = []
        self.connects = 0
        self.reconnected_after: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()

    async def _run(self):
        lost_at = None
        while not self.stop.is_set():
            try:
                ws = await asyncio.wait_for(
                    self.WebSocket.connect(
                        "127.0.0.1",
                        self.c.port,
                        f"/ws/jobs/{self.job_id}/",
                        {"Origin": self.c.url, "Cookie": f"sessionid={self.c.session}"},
                    ),
                    5,
                )
            except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
                lost_at = lost_at or time.monotonic()
                await asyncio.sleep(0.5)
                continue
            self.connects += 1
            if lost_at is not None and self.connects > 1:
                self.reconnected_after = time.monotonic() - lost_at
            lost_at = None
            await ws.send_text(
                json.dumps(
                    {
                        "type": "hello",
                        "after_event": max(self.event_ids, default=None),
                        "logs": {"attempt": None, "instances": None, "offsets": self.offsets},
                    }
                )
            )
            try:
                while not self.stop.is_set():
                    try:
                        text = await asyncio.wait_for(ws.recv_text(), 0.5)
                    except asyncio.TimeoutError:
                        continue
                    if text is None:
                        break
                    self._take(json.loads(text))
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                pass
            finally:
                ws.close()
            lost_at = time.monotonic()

    def _take(self, msg):
        if msg.get("type") == "event":
            self.event_ids.append(msg["id"])
        elif msg.get("type") == "log":
            key = f"{msg['attempt']}:{msg['instance']}"
            if key in self.offsets and msg["offset"] != self.offsets[key]:
                self.gaps.append(f"{key} expected offset {self.offsets[key]} got {msg['offset']}")
            self.offsets[key] = msg["next_offset"]
            self.lines.extend((key, line) for line in msg["lines"])

    def close(self):
        self.stop.set()
        self.thread.join(10)

    def handshake(self, timeout: float = 5.0) -> str:
        """A fresh connection's handshake, now: "101" or why it failed."""

        async def once():
            ws = await asyncio.wait_for(
                self.WebSocket.connect(
                    "127.0.0.1",
                    self.c.port,
                    f"/ws/jobs/{self.job_id}/",
                    {"Origin": self.c.url, "Cookie": f"sessionid={self.c.session}"},
                ),
                timeout,
            )
            ws.close()

        try:
            asyncio.run(once())
            return "101"
        except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            return f"{type(exc).__name__}: {' '.join(str(exc).split())[:80]}"

    def check(self, run: JobRun, reconnect: bool = True) -> list[tuple[str, bool, str]]:
        from jobs.models import JobEvent

        steps = [(k, line) for k, line in self.lines if line.startswith("step=")]
        doubled = [x for x, n in Counter(steps).items() if n > 1]
        db_events = set(JobEvent.objects.filter(job_id=run.id).values_list("id", flat=True))
        missing = sorted(db_events - set(self.event_ids))
        twice = [i for i, n in Counter(self.event_ids).items() if n > 1]
        last_words = any("last words of attempt 1" in line for _, line in self.lines)
        attempts = sorted({k.split(":")[0] for k, _ in steps})
        return [
            (
                "follower reconnected",
                self.connects >= 2 or not reconnect,
                f"{self.connects} connections"
                + (
                    f", back {self.reconnected_after:.1f} s after it was lost"
                    if self.reconnected_after is not None
                    else ""
                ),
            ),
            (
                "log lines once, no gap",
                not doubled and not self.gaps,
                f"{len(steps)} step lines of attempts {','.join(attempts)}"
                + (f"; doubled {doubled[:2]}" if doubled else "")
                + (f"; gaps {self.gaps[:2]}" if self.gaps else ""),
            ),
            (
                "events once, none missed",
                not missing and not twice,
                f"{len(self.event_ids)} received of {len(db_events)}"
                + (f"; missed ids {missing[:5]}" if missing else "")
                + (f"; twice {twice[:5]}" if twice else ""),
            ),
        ] + (
            [  # issue 20 item 6: the view shows how the failed attempt ended before it follows the new one
                (
                    "failed attempt's last line shown",
                    last_words,
                    "seen" if last_words else "the line rank 1 printed before failing never reached the follower",
                ),
            ]
            if run.faults
            else []
        )


# --- experiments -------------------------------------------------------------------------------


def fault_points() -> tuple[str, ...]:
    try:
        from jobs import faults
    except ImportError:
        return ()
    return tuple(faults.POINTS)


def exp_fault_point(c: Console, point: str) -> tuple[list, str]:
    """The worker that handles rank 1's failure dies at `point` (jobs.faults)."""
    run, _, _ = c.submit(f"fault-{point}", fault=True)
    run.wait_running(1)
    # The worker under test is the only decider: `decide` (the decisions queue's own
    # worker) is stopped too, or it would take rank 1's exit instead.
    c.kill("decide", signal.SIGTERM)
    c.kill("worker", signal.SIGTERM)  # a warm shutdown, then one that dies at the step
    marker = c.tmp / "control" / f"fault-point-{point}"
    proc = c.start("worker", {"VIGIL_FAULT_POINT": point, "VIGIL_FAULT_ONCE": str(marker)})
    run.fire()
    if not wait_until(lambda: marker.exists() and proc.poll() is not None, 60, 0.1):
        raise ExperimentFailed(f"the worker never reached {point} within 60 s (fault fired: {run.fired()})")
    died = time.monotonic()
    c.kill("worker")  # whatever of its group is left
    time.sleep(2.0)
    c.start("worker")
    c.start("decide")
    status = run.complete(150)
    return check_job(run), (
        f"worker died at {point} (exit {proc.returncode}), a new one 2 s later; "
        f"job {status} {time.monotonic() - died:.1f} s after the death"
    )


def exp_race(c: Console, step: str) -> tuple[list, str]:
    """Issue 20's own reproduction, by timing: poll the restart's attempt directory every
    millisecond and SIGKILL the worker's group the moment the claim (F1) or attempt.json (F2)
    appears; start the worker again 10 s later."""
    run, _, _ = c.submit(f"race-{step}", fault=True)
    run.wait_running(1)
    adir = c.data / "local-backend" / "jobs" / str(run.id) / "attempt-2"
    watched = adir if step == "claim" else adir / "attempt.json"
    c.kill("decide", signal.SIGTERM)  # the worker under test is the one that decides
    worker = c.procs["worker"]
    run.fire()
    deadline = time.monotonic() + 60
    while not watched.exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    if not watched.exists():
        raise ExperimentFailed(f"{watched.relative_to(c.data)} never appeared within 60 s")
    os.killpg(worker.pid, signal.SIGKILL)
    seen = sorted(p.name for p in adir.iterdir()) if adir.is_dir() else []
    c.kill("worker")
    time.sleep(10.0)
    c.start("worker")
    c.start("decide")
    t0 = time.monotonic()
    status = run.complete(90)
    return check_job(run), (
        f"worker group SIGKILLed when {watched.name} appeared (in it then: "
        f"{', '.join(seen) or 'nothing'}), back 10 s later; job {status} "
        f"{time.monotonic() - t0:.1f} s after that"
    )


def fault_while_down(c: Console, name: str, processes: tuple[str, ...], sig=signal.SIGKILL) -> JobRun:
    """A job with a fault trains; the processes are stopped by `sig`; then rank 1 fails."""
    run, _, _ = c.submit(name, fault=True)
    run.wait_running(1)
    for process in processes:
        c.kill(process, sig)
    run.fire()
    wait_until(run.fired, 10, 0.1)
    return run


def exp_worker_kill(c: Console) -> tuple[list, str]:
    from jobs.models import RestartRecord

    run = fault_while_down(c, "worker-kill", ("worker", "decide"))  # every Celery worker
    time.sleep(5.0)
    c.start("worker")
    c.start("decide")
    t0, back = time.monotonic(), time.time()
    status = run.complete(120)
    record = RestartRecord.objects.filter(job_id=run.id).first()
    # Issue 20 item 3: a killed worker's per-job lock kept its jobs unwatched until it expired.
    decided = (
        f"restart decided {record.restart_time.timestamp() - back:+.1f} s from when it was seen ready"
        if record
        else "no restart decided"
    )
    return check_job(run), (
        f"worker group SIGKILLed, rank 1 failed while it was down, worker back after 5 s "
        f"({decided}); job {status} {time.monotonic() - t0:.1f} s later"
    )


def _submit_timed(c: Console, name: str, out: dict):
    out["name"] = name
    try:
        out["run"], out["took"], out["code"] = c.submit(name, fault=False, controlled=False, steps=10, timeout=60)
    except Exception as exc:  # noqa: BLE001 - reported as evidence
        out["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    out["took"] = out.get("took", time.monotonic() - out["t0"])


def _submission_checks(c: Console, out: dict, what: str, target: float | None) -> list:
    from jobs.models import Job

    checks = []
    if "error" in out:
        stored = Job.objects.filter(display_name=out["name"]).first()
        checks.append(
            (
                f"submission during {what}",
                False,
                f"failed after {out['took']:.1f} s: {out['error']}"
                + (f"; yet stored as job {stored.pk}, {stored.status}" if stored else "; nothing stored"),
            )
        )
        if stored:  # is the stored job launched once Redis is back?
            run = JobRun(c, stored.pk, {}, 0)
            run.wait_finished(90)
            checks += [(f"submitted job: {n}", h, e) for n, h, e in check_job(run)]
        return checks
    ok = target is None or out["took"] < target
    checks.append(
        (f"submission during {what}" + (f" < {target:g} s" if target else ""), ok, f"201 in {out['took']:.2f} s")
    )
    out["run"].wait_finished(90)
    return checks + [(f"submitted job: {n}", h, e) for n, h, e in check_job(out["run"])]


def exp_redis_stop(c: Console, stall: float) -> tuple[list, str]:
    run, _, _ = c.submit("redis-stop", fault=True)
    run.wait_running(1)
    c.redis_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        run.fire()
        wait_until(run.fired, 10, 0.1)
        out = {"t0": time.monotonic()}
        submitter = threading.Thread(target=_submit_timed, args=(c, "during-redis-stop", out), daemon=True)
        submitter.start()
        time.sleep(max(0.0, stall - (time.monotonic() - t0)))
    finally:
        c.redis_signal(signal.SIGCONT)
    stalled = time.monotonic() - t0
    submitter.join(70)
    status = run.complete(120)
    checks = check_job(run) + _submission_checks(c, out, "the stall", SUBMIT_TARGET)
    return checks, f"Redis SIGSTOPped {stalled:.1f} s, rank 1 failed and a job was submitted meanwhile; job {status}"


def exp_redis_stop_follower(c: Console, stall: float) -> tuple[list, str]:
    """A WebSocket follower while Redis is SIGSTOPped: logs are read from files, so lines must
    keep coming, and a new page must still connect."""
    run, _, _ = c.submit("redis-stop-follower", fault=False)
    run.wait_running(1)
    follower = Follower(c, run.id)
    try:
        if not wait_until(lambda: len(follower.lines) >= 4, 30, 0.2):
            raise ExperimentFailed(f"the follower saw no log lines within 30 s ({follower.connects} connections)")
        c.redis_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            time.sleep(1.0)
            before = len(follower.lines)
            handshake = follower.handshake()
            time.sleep(max(0.0, stall - (time.monotonic() - t0)))
            during = len(follower.lines) - before
        finally:
            c.redis_signal(signal.SIGCONT)
        stalled = time.monotonic() - t0
        run.finish()
        status = run.wait_finished(90)
        wait_until(lambda: any(line.startswith("done") for _, line in follower.lines), 10, 0.2)
    finally:
        follower.close()
    # Two ranks print 5 lines/s each: a live tail delivers dozens over the stall.
    expected = int((stall - 2) * 2 * 5 * 0.5)
    checks = (
        check_job(run)
        + follower.check(run, reconnect=False)
        + [
            (
                "log lines during the stall",
                during >= expected,
                f"{during} lines in the last {stall - 1:.0f} s (at least {expected} expected)",
            ),
            ("a new page connects during the stall", handshake == "101", handshake),
        ]
    )
    return checks, f"Redis SIGSTOPped {stalled:.1f} s under a live follower; job {status}"


def exp_redis_kill(c: Console) -> tuple[list, str]:
    run, _, _ = c.submit("redis-kill", fault=True)
    run.wait_running(1)
    os.killpg(c.redis.process.pid, signal.SIGKILL)
    t0 = time.monotonic()
    run.fire()
    wait_until(run.fired, 10, 0.1)
    out = {"t0": time.monotonic()}
    submitter = threading.Thread(target=_submit_timed, args=(c, "during-redis-kill", out), daemon=True)
    submitter.start()
    time.sleep(max(0.0, 5.0 - (time.monotonic() - t0)))
    c.redis_restart_after_kill()
    down = time.monotonic() - t0
    submitter.join(70)
    status = run.complete(150)
    checks = check_job(run) + _submission_checks(c, out, "the outage", None)
    return checks, f"Redis SIGKILLed, an empty one on the same port {down:.1f} s later; job {status}"


def exp_web_kill(c: Console) -> tuple[list, str]:
    run, _, _ = c.submit("web-kill", fault=True)
    run.wait_running(1)
    follower = Follower(c, run.id)
    try:
        if not wait_until(lambda: sum(1 for k, _ in follower.lines if k.startswith("1:")) >= 4, 30, 0.2):
            raise ExperimentFailed(f"the follower saw no log lines within 30 s ({follower.connects} connections)")
        c.kill("web")
        run.fire()
        wait_until(run.fired, 10, 0.1)
        time.sleep(3.0)
        c.start("web")
        run.wait_running(2, 120)
        wait_until(lambda: sum(1 for k, _ in follower.lines if k.startswith("2:")) >= 6, 30, 0.2)
        run.finish()
        status = run.wait_finished(90)
        wait_until(lambda: any(line.startswith("done") and k.startswith("2:") for k, line in follower.lines), 10, 0.2)
        time.sleep(1.0)
    finally:
        follower.close()
    return check_job(run) + follower.check(
        run
    ), f"daphne SIGKILLed under a live follower, rank 1 failed while it was down, daphne back 3 s later; job {status}"


def exp_exits_kill(c: Console) -> tuple[list, str]:
    from jobs.models import RestartRecord

    run = fault_while_down(c, "exits-kill", ("exits",))
    fired = time.time()
    decided = wait_until(lambda: RestartRecord.objects.filter(job_id=run.id).first(), 10, 0.2)
    time.sleep(max(0.0, 5.0 - (time.time() - fired)))
    c.start("exits")
    status = run.complete(120)
    took = (
        f"{decided.restart_time.timestamp() - fired:.1f} s after the failure (by the sweep)"
        if decided
        else "not while the listener was down"
    )
    return check_job(run), f"exit listener SIGKILLed, back after 5 s; restart decided {took}; job {status}"


def exp_db_lock(c: Console) -> tuple[list, str]:
    run, _, _ = c.submit("db-lock", fault=True)
    run.wait_running(1)
    out = {}
    if c.db == "sqlite":
        lock = sqlite3.connect(str(c.data / "vigil.sqlite3"), timeout=30, isolation_level=None)
        try:
            lock.execute("BEGIN IMMEDIATE")  # the write lock: every writer waits (busy timeout 30 s)
            t0 = time.monotonic()
            run.fire()
            out["t0"] = time.monotonic()
            submitter = threading.Thread(target=_submit_timed, args=(c, "during-db-lock", out), daemon=True)
            submitter.start()
            read = {}

            def get():  # issue 20 item 4: a read that writes the token's last_used_at waits for the lock
                t_read = time.monotonic()
                try:
                    read["text"] = f"{c.api('GET', f'/api/v1/jobs/{run.id}/', timeout=30).status_code} in "
                except Exception as exc:  # noqa: BLE001 - evidence
                    read["text"] = f"{type(exc).__name__} after "
                read["text"] += f"{time.monotonic() - t_read:.1f} s"

            reader = threading.Thread(target=get, daemon=True)
            reader.start()
            time.sleep(10.0)
            held = time.monotonic() - t0
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        reader.join(30)
        what = (
            f"another connection held SQLite's write lock {held:.1f} s "
            f"(an API read meanwhile: {read.get('text', 'no answer')})"
        )
    else:
        import psycopg

        name = c.pg_url.rsplit("/", 1)[1]
        terminated = 0
        with psycopg.connect(c.pg_url, autocommit=True, connect_timeout=10) as conn:
            run.fire()
            out["t0"] = time.monotonic()
            submitter = threading.Thread(target=_submit_timed, args=(c, "during-terminations", out), daemon=True)
            submitter.start()
            for _ in range(10):
                terminated += sum(
                    1
                    for (ok,) in conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                        "AND pid <> pg_backend_pid()",
                        (name,),
                    ).fetchall()
                    if ok
                )
                time.sleep(0.5)
        from django.db import connections

        connections.close_all()  # this process's own connection was terminated too
        what = f"{terminated} PostgreSQL connections terminated over 5 s"
    submitter.join(70)
    status = run.complete(120)
    return check_job(run) + _submission_checks(c, out, "it", None), f"{what}; rank 1 failed meanwhile; job {status}"


def exp_burst(c: Console, jobs: int = 40, faulty: int = 10) -> tuple[list, str]:
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(c.submit, f"burst-{i}", i % (jobs // faulty) == 0, False, 15) for i in range(jobs)]
        results = [f.result() for f in futures]
    runs = [r for r, _, _ in results]
    slowest = max(t for _, t, _ in results)
    from jobs.models import FINISHED_JOB_STATUSES, Job

    ids = [r.id for r in runs]
    wait_until(lambda: Job.objects.filter(pk__in=ids, status__in=FINISHED_JOB_STATUSES).count() == len(ids), 400, 1.0)
    took = time.monotonic() - t0
    failures, applied, held = {}, Counter(), Counter()
    for run in runs:
        for name, ok, evidence in check_job(run):
            applied[name] += 1
            held[name] += ok
            if not ok:
                failures.setdefault(name, []).append(f"job {run.id}: {evidence}")
    checks = [
        (
            name,
            name not in failures,
            f"held for {held[name]} of {applied[name]} jobs"
            + (f"; {len(failures[name])} failed, first: {failures[name][0]}" if name in failures else ""),
        )
        for name in applied
    ]
    return checks, (
        f"{jobs} jobs ({faulty} with a fault) submitted by 8 threads, slowest POST {slowest:.2f} s; "
        f"all finished {took:.0f} s after the first POST"
    )


def exp_console_restart(c: Console) -> tuple[list, str]:
    calm, _, _ = c.submit("restart-calm", fault=False)
    calm.wait_running(1)
    run = fault_while_down(c, "restart-fault", ("web", "exits", "decide", "worker"), signal.SIGTERM)
    time.sleep(5.0)
    for name in ("worker", "decide", "exits", "web"):
        c.start(name)
    status = run.complete(150)
    calm.finish()
    calm_status = calm.wait_finished(90)
    checks = check_job(run) + [(f"calm job: {n}", h, e) for n, h, e in check_job(calm)]
    return (
        checks,
        f"web, exits and worker SIGTERMed with 2 jobs running, rank 1 failed while down, all back "
        f"5 s later; jobs {status}, {calm_status}",
    )


def experiments(args, db: str) -> list[tuple[str, callable]]:
    points = fault_points()
    plan = []
    if points:
        plan += [(f"fault@{p}", lambda c, p=p: exp_fault_point(c, p)) for p in points]
    else:
        plan.append(("fault@<launch steps>", None))
    plan += [
        ("race@claim", lambda c: exp_race(c, "claim")),
        ("race@attempt.json", lambda c: exp_race(c, "attempt.json")),
        ("worker-kill", exp_worker_kill),
        ("redis-stop", lambda c: exp_redis_stop(c, args.stall)),
        ("redis-stop-follower", lambda c: exp_redis_stop_follower(c, args.stall)),
        ("redis-kill", exp_redis_kill),
        ("web-kill", exp_web_kill),
        ("exits-kill", exp_exits_kill),
        ("db-lock", exp_db_lock),
        ("burst", exp_burst),
        ("console-restart", exp_console_restart),
    ]
    names = QUICK if args.quick else (args.only.split(",") if args.only else None)
    if names:
        plan = [
            (n, f) for n, f in plan if n in names or any(n.startswith(x.rstrip("*")) and x.endswith("*") for x in names)
        ]
    return plan


# --- one database, in a process of its own ------------------------------------------------------


def run_database(args) -> int:
    tmp = Path(args.workdir)
    results = []
    console = None

    def on_term(signum, frame):
        raise SystemExit(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    try:
        console = Console(args.db, args.pg_url, tmp)
        for name in ("web", "worker", "decide", "exits"):
            console.start(name)
        for name, fn in experiments(args, args.db):
            t0 = time.monotonic()
            print(f"[{args.db}] {name} ...", flush=True)
            if fn is None:
                results.append(
                    {
                        "experiment": name,
                        "held": False,
                        "seconds": 0,
                        "what": "not run",
                        "checks": [
                            ["fault-point hook", False, "jobs/faults.py (VIGIL_FAULT_POINT) is not on this checkout"]
                        ],
                    }
                )
                continue
            try:
                for proc_name in ("web", "worker", "decide", "exits"):  # every experiment starts from a whole console
                    if console.procs[proc_name].poll() is not None:
                        console.start(proc_name)
                checks, what = fn(console)
            except ExperimentFailed as exc:
                checks, what = [["carried out", False, str(exc)[:400]]], "could not be carried out"
            except Exception as exc:  # noqa: BLE001 - a broken experiment is a failed row, the rest go on
                traceback.print_exc()
                checks, what = [["carried out", False, f"{type(exc).__name__}: {str(exc)[:300]}"]], "crashed"
            stop_live_jobs(console)
            held = all(h for _, h, _ in checks)
            results.append(
                {
                    "experiment": name,
                    "held": held,
                    "seconds": round(time.monotonic() - t0, 1),
                    "what": what,
                    "checks": [list(x) for x in checks],
                }
            )
            print(f"[{args.db}] {name}: {'held' if held else 'FAILED'} in {time.monotonic() - t0:.0f} s", flush=True)
            Path(args.json).write_text(json.dumps(results))
    finally:
        if console is not None:
            console.close()
        Path(args.json).write_text(json.dumps(results))
    return 0


def stop_live_jobs(c: Console) -> None:
    """A job an experiment left running (it failed) is stopped, so the next starts clean."""
    from jobs.models import LIVE_JOB_STATUSES, Job, JobStatus

    for proc_name in ("web", "worker", "exits"):
        if c.procs[proc_name].poll() is not None:
            try:
                c.start(proc_name)
            except ExperimentFailed as exc:
                print(f"  (restarting {proc_name}: {exc})")
    live = list(Job.objects.filter(status__in=LIVE_JOB_STATUSES).values_list("pk", flat=True))
    for job_id in live:
        c.api("POST", f"/api/v1/jobs/{job_id}/stop/")
    stopping = (*LIVE_JOB_STATUSES, JobStatus.STOPPING)
    if live and not wait_until(lambda: not Job.objects.filter(pk__in=live, status__in=stopping).exists(), 60, 0.5):
        print(f"  (jobs {live} did not stop within 60 s)")


# --- the parent: one child per database, then the table ------------------------------------------


def kill_leftovers(workdir: Path) -> None:
    """Groups the child started, if it died before stopping them (each leads its own session)."""
    try:
        pgids = [int(x) for x in (workdir / "pgids").read_text().split()]
    except (OSError, ValueError):
        return
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def stop_instances(workdir: Path) -> None:
    """Any rank left under the data dir (the child's own cleanup normally did this)."""
    data = workdir / "data" / "local-backend"
    if not data.is_dir():
        return
    from jobs.backends.local import LocalBackend

    LocalBackend(data_dir=str(data), redis_url=None).stop_everything(grace=0.2)


def print_table(rows: list[dict], dbs: list[str]) -> None:
    names = []
    for r in rows:
        if r["experiment"] not in names:
            names.append(r["experiment"])
    by = {(r["db"], r["experiment"]): r for r in rows}
    width = max([len(n) for n in names] + [10])
    print("\n" + f"{'experiment':<{width}}  " + "  ".join(f"{d:<10}" for d in dbs))
    for n in names:
        cells = []
        for d in dbs:
            r = by.get((d, n))
            cells.append(f"{'-' if r is None else ('held' if r['held'] else 'FAILED'):<10}")
        print(f"{n:<{width}}  " + "  ".join(cells))
    print("\nevidence:")
    for d in dbs:
        for n in names:
            r = by.get((d, n))
            if r is None:
                continue
            print(f"  [{d}] {n}: {'held' if r['held'] else 'FAILED'} ({r['seconds']:.0f} s) - {r['what']}")
            for check, held, evidence in r["checks"]:
                print(f"      {'ok  ' if held else 'FAIL'} {check}: {evidence}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--db", default=None, help="sqlite, postgres or both, comma-separated (default both; --quick: sqlite)"
    )
    parser.add_argument("--pg-url", default=os.environ.get("CHAOS_PG_URL", DEFAULT_PG))
    parser.add_argument("--only", default="", help="experiment names, comma-separated ('fault@*' for every step)")
    parser.add_argument("--quick", action="store_true", help=f"the CI subset: {', '.join(QUICK)}")
    parser.add_argument("--stall", type=float, default=None, help="seconds Redis stays SIGSTOPped (12; --quick: 8)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per database before it is cut off")
    parser.add_argument("--report", help="also write every row (experiment, db, held, checks) to this JSON file")
    parser.add_argument("--json", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.db is None:
        args.db = "sqlite" if args.quick else "sqlite,postgres"
    if args.stall is None:
        args.stall = 8.0 if args.quick else 12.0
    if args.workdir:  # a child: one database
        return run_database(args)

    dbs = [d.strip() for d in args.db.split(",") if d.strip()]
    for d in dbs:
        if d not in ("sqlite", "postgres"):
            parser.error(f"--db: {d!r} is not sqlite or postgres")
    print("chaos suite (issue 20): faults injected into a real console; invariants from the API and the database")
    print(f"  machine: {machine_line()}")
    print(f"  code: {git_line()}; fault-point hook: {'jobs.faults' if fault_points() else 'absent'}")
    print(f"  console: Procfile web + worker + decide + exits, private redis-server, settings {CONSOLE_ENV}")
    print(f"  jobs: 2-rank PyTorchJob via POST /api/v1/jobs/, {FLAGS}")

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")  # the child is stopped and its groups killed below

    signal.signal(signal.SIGTERM, interrupted)
    rows = []
    t_all = time.monotonic()
    for db in dbs:
        workdir = Path(tempfile.mkdtemp(prefix=f"vigil-chaos-{db}-"))
        out = workdir / "results.json"
        cmd = [
            PYTHON,
            str(Path(__file__).resolve()),
            "--db",
            db,
            "--pg-url",
            args.pg_url,
            "--stall",
            str(args.stall),
            "--json",
            str(out),
            "--workdir",
            str(workdir),
        ]
        if args.quick:
            cmd.append("--quick")
        elif args.only:
            cmd += ["--only", args.only]
        print(f"\n== {db} (data dir {workdir}/data) ==", flush=True)
        child = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
        try:
            child.wait(args.timeout)
        except subprocess.TimeoutExpired:
            print(f"  {db}: cut off after {args.timeout:g} s", flush=True)
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(10)
        except KeyboardInterrupt:
            child.send_signal(signal.SIGTERM)
            child.wait(60)
            raise
        finally:
            kill_leftovers(workdir)
            try:
                stop_instances(workdir)
            except Exception as exc:  # noqa: BLE001
                print(f"  (leftover instances: {exc})")
        try:
            got = json.loads(out.read_text())
        except (OSError, ValueError):
            got = []
        if child.returncode != 0 or not got:
            got.append(
                {
                    "experiment": "suite",
                    "held": False,
                    "seconds": 0,
                    "what": f"exit {child.returncode}",
                    "checks": [["finished", False, f"the {db} run ended with {child.returncode}"]],
                }
            )
        rows += [dict(r, db=db) for r in got]
        if os.environ.get("CHAOS_KEEP"):
            print(f"  kept {workdir} (CHAOS_KEEP)")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print_table(rows, dbs)
    if args.report:
        Path(args.report).write_text(json.dumps(rows, indent=1))
    held = sum(r["held"] for r in rows)
    print(f"\n{held} of {len(rows)} held; {time.monotonic() - t_all:.0f} s in all")
    return 0 if rows and held == len(rows) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        print(f"chaos: interrupted ({exc}); everything it started was stopped", file=sys.stderr)
        sys.exit(130)
